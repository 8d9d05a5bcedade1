"""The runbook lists every command the wizard really runs.

One headless demo run against the embedded lab (one GPU node, auto-approved, the whole plan);
each command in its journal must be a runbook line (``gpu-node-wizard export``: each step's
``commands()``) of the same step, for the host it ran on, up to the values that only exist at
run time. Those are normalised on both sides, token by token, by the rules below; nothing
else is forgiven.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import shlex
from pathlib import Path

import pytest

from frontend.headless import HeadlessFrontEnd
from steps import build_plan
from tests.conftest import run_in_lab
from wizard.checkpoint import site_state_dir
from wizard.export import collect, runbook
from wizard.plan import Scope
from wizard.site import Site, load_site
from wizard.transports.base import WRITE_FILE_SCRIPT, WRITE_VALUE_SCRIPT
from wizard.transports.helm import TARGET as HELM_TARGET

JUMP_HOST = "the jump host"

# Values discovered at run time, as (pattern, placeholder) on single tokens. The runbook
# writes the placeholder (its intro says where each value comes from).
DISCOVERED = (
    # RDMA devices, from `rdma link show` on the host the command runs on (phase 5).
    (re.compile(r"\birdma\d+\b"), "<rdma-dev>"),
    # A file the wizard writes to a temporary folder of its own (tempfile, prefix gnw-) to
    # pass it to a tool is the export's file of the same name (the Helm values).
    (re.compile(r"^/\S*/gnw-[a-z]+-[^/]+/"), "<export>/"),
    (re.compile(r"^(?:cluster|nodes)/\S*/"), "<export>/"),
    # The running kernel's headers, named in the runbook by the shell ($(uname -r)), and an
    # installed kernel release (`ls /lib/modules`): found on the node.
    (re.compile(r"(?<=^kernel-devel-)[0-9]\S*$|(?<=^linux-headers-)[0-9]\S*$"), "$(uname -r)"),
    (re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+-[0-9][\w.+~-]*$"), "<kernel>"),
)
# A token after one of these options is discovered: the RoCEv2 GID index (ibv_devinfo).
DISCOVERED_AFTER = {"-x": (re.compile(r"^\d+$"), "<gid-index>")}
# The UUID of a bond port's NetworkManager profile (`nmcli ... connection show`), after
# `connection up/down uuid`.
PROFILE = (("connection", "down"), ("connection", "up"))


def normalise(tokens: list[str], site: Site) -> tuple[str, ...]:
    """One command, as argv tokens, in the form both sides are compared in."""
    # Kubespray runs from its checkout: the runbook says `(cd CHECKOUT && ansible-playbook
    # ...)`, the wizard runs the jump host's ansible-playbook with the checkout as its
    # working directory (steps/join.py); both are the playbook command.
    if len(tokens) > 3 and tokens[0] == "(cd" and tokens[2] == "&&" and tokens[-1].endswith(")"):
        tokens = [*tokens[3:-1], tokens[-1][:-1]]
    if tokens and tokens[0].endswith("/ansible-playbook"):
        tokens = ["ansible-playbook", *tokens[1:]]
    if tokens[:2] == ["ansible-playbook", "-i"] and len(tokens) > 2:
        # The inventory as the site names it, resolved where it is used (test_kubespray_join
        # checks both forms name the same file).
        tokens = [*tokens[:2], "<kubespray-inventory>", *tokens[3:]]
    # The file-writing helper (transports/base.py) counts as the file it writes, with its mode;
    # the runbook shows it as `install -m MODE <export file> PATH`.
    if tokens[:3] == ["sh", "-c", WRITE_FILE_SCRIPT] and len(tokens) == 6:
        tokens = ["install", "-m", tokens[4], "<export file>", tokens[5]]
    elif tokens[:2] == ["install", "-m"] and len(tokens) == 5:
        tokens = [*tokens[:3], "<export file>", tokens[4]]
    # The value-writing helper (configfs, sysfs) is the printf line it runs.
    if tokens[:3] == ["sh", "-c", WRITE_VALUE_SCRIPT] and len(tokens) == 6:
        tokens = ["printf", "%s\\n", tokens[4], ">", tokens[5]]
    # Paths the site file names relative to itself (the kubeconfig, a helm binary given as a
    # path) are resolved when used; the runbook shows them as the site file writes them.
    resolved = {
        str(site.resolve_path(path)): path for path in (site.cluster.kubeconfig, site.cluster.helm)
    }
    # The runbook names the kubeconfig once (its opening block exports KUBECONFIG, checked in
    # tests/test_runbook_follow.py); its lines read "$KUBECONFIG".
    resolved["$KUBECONFIG"] = site.cluster.kubeconfig
    out = []
    for i, token in enumerate(tokens):
        token = resolved.get(token, token)
        for pattern, placeholder in DISCOVERED:
            token = pattern.sub(placeholder, token)
        after = DISCOVERED_AFTER.get(tokens[i - 1]) if i else None
        if after and after[0].match(token):
            token = after[1]
        if i == 4 and tokens[0] == "nmcli" and tuple(tokens[1:3]) in PROFILE:
            token = "<profile>"
        out.append(token)
    return tuple(out)


_ON = re.compile(r"^on (?:the AIStor peer )?(?P<host>[A-Za-z0-9._-]+?)(?:[,:;]|$)")


def runbook_command(line: str, default_host: str) -> tuple[str, list[str]] | None:
    """(host, argv) of one runbook line; None for a comment line. A trailing comment that
    starts with `on HOST` or `from the jump host` says where the command runs."""
    if not line.strip() or line.lstrip().startswith("#"):
        return None
    tokens = shlex.split(line, comments=True)
    comment = line.split("  # ", 1)[1].strip() if "  # " in line else ""
    host = default_host
    if match := _ON.match(comment):
        host = match["host"]
    elif comment.startswith("from the jump host"):
        host = JUMP_HOST
    return host, tokens


def unlisted_commands(site: Site, journal: list[dict]) -> list[str]:
    """The journal's commands that no runbook line of their step (and host) matches."""
    assert len(site.nodes) == 1, "one node: every node-step command belongs to it"
    node = site.nodes[0].name
    plan = build_plan()
    _, blocks = collect(site, plan)
    listed: dict[str, set[tuple[str, tuple[str, ...]]]] = {}
    for step in plan.steps():
        default = node if step.scope == Scope.NODE else JUMP_HOST
        for block in blocks[step.id]:
            for line in block.commands:
                parsed = runbook_command(line, default)
                if parsed is not None:
                    host, tokens = parsed
                    listed.setdefault(step.id, set()).add((host, normalise(tokens, site)))
    missing = []
    peers = {peer.name for peer in site.aistor.peers}
    for entry in journal:
        # Helm and Kubespray run on the jump host (their journal targets name the tool).
        host = JUMP_HOST if entry["target"] in (HELM_TARGET, "kubespray") else entry["target"]
        tokens = shlex.split(entry["command"])
        if host in peers and tokens[:1] == ["dcb"] and "dev" in tokens:
            # An AIStor peer's netdev is found on the peer (its `rdma link`), not in the site.
            tokens[tokens.index("dev") + 1] = "<peer-netdev>"
        key = (host, normalise(tokens, site))
        if key not in listed.get(entry["step"], set()):
            missing.append(f"{entry['step']} on {host}: {entry['command']}")
    return sorted(set(missing))


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """The headless demo's run (auto-approved, maintenance window open), once per module."""
    tmp = tmp_path_factory.mktemp("runbook")
    frontend = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
    outcome, lab = asyncio.run(run_in_lab(tmp, frontend))
    site = load_site(lab.site_path)
    lines = (site_state_dir(tmp / "state", site) / "journal.jsonl").read_text().splitlines()
    journal = [e for e in map(json.loads, lines) if "command" in e]
    return outcome, site, journal


def test_the_demo_run_passes_and_runs_commands_of_every_host_phase(demo_run):
    outcome, site, journal = demo_run
    assert outcome.exit_code == 0
    steps = {e["step"] for e in journal}
    assert {"preflight.host", "irdma.enable", "qos.apply", "operate.reboot"} <= steps
    assert {e["target"] for e in journal} >= {site.nodes[0].name, site.aistor.peers[0].name}


def test_every_command_the_demo_ran_is_a_runbook_line_of_its_step(demo_run):
    _, site, journal = demo_run
    assert unlisted_commands(site, journal) == []


def test_runbook_lines_are_what_the_rendered_runbook_prints(demo_run):
    _, site, _ = demo_run
    plan = build_plan()
    _, blocks = collect(site, plan)
    text = runbook(site, plan, blocks)
    for step_blocks in blocks.values():
        for block in step_blocks:
            for line in block.commands:
                assert f"\n{line}\n" in text


if __name__ == "__main__":  # against a saved run: python -m tests.test_runbook_commands DIR
    import sys

    directory = Path(sys.argv[1])
    saved = load_site(directory / "lab" / "site.yaml")
    lines = (directory / "state" / saved.name / "journal.jsonl").read_text().splitlines()
    for line in unlisted_commands(saved, [e for e in map(json.loads, lines) if "command" in e]):
        print(line)
