"""Running the operator's Kubespray checkout for the join: checks, inventory, playbooks.

With ``cluster.kubespray`` in the site file the wizard runs the join itself: it checks the
checkout (Kubespray v2.29.1, the playbooks present), shows the inventory and group_vars
changes as diffs against the live files (edited round-trip, so the operator's comments and
order stay), then runs ``playbooks/facts.yml`` and ``scale.yml --limit=<nodes>`` from the
checkout with the output streamed and the PLAY RECAP read. Kubespray is idempotent, so an
interrupted join is simply run again.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError
from ruamel.yaml.scalarstring import LiteralScalarString

from wizard import journal
from wizard.site import Node
from wizard.transports import children
from wizard.transports.base import TransportError

TARGET = "kubespray"
# Kubespray keeps its version in galaxy.yml (`version: 2.29.1` at tag v2.29.1).
VERSION_FILE = "galaxy.yml"
# ansible's default stdout callback prints one line per host after "PLAY RECAP":
# "<host> : ok=N changed=N unreachable=N failed=N skipped=N rescued=N ignored=N"
# (ansible-core lib/ansible/plugins/callback/default.py, v2_playbook_on_stats).
_RECAP_LINE = re.compile(r"^(?P<host>\S+)\s+:\s+(?P<counts>(?:\w+=\d+\s*)+)$")
_TASK = re.compile(r"^TASK \[(?P<name>.*)\]")
_YAML_ONLY = "the wizard edits a hosts.yaml inventory; with an INI one, run the join by hand"


class KubesprayError(TransportError):
    """A Kubespray run that failed, or a checkout or inventory the wizard cannot use."""

    def __init__(self, message: str) -> None:
        super().__init__(TARGET, message)


@dataclass
class PlaybookRun:
    playbook: str
    exit_status: int
    recap: dict[str, dict[str, int]] = field(default_factory=dict)
    tasks: int = 0
    tail: str = ""  # the last lines of the output (the journal keeps them)

    def bad_hosts(self) -> dict[str, str]:
        """host -> 'failed' / 'unreachable', from the PLAY RECAP."""
        bad = {}
        for host, counts in self.recap.items():
            if counts.get("unreachable"):
                bad[host] = "unreachable"
            elif counts.get("failed"):
                bad[host] = "failed"
        return bad


def parse_recap(output: str) -> dict[str, dict[str, int]]:
    """The PLAY RECAP of an ansible-playbook run: host -> {ok, changed, failed, ...}."""
    recap: dict[str, dict[str, int]] = {}
    inside = False
    for raw in output.splitlines():
        line = raw.strip()
        if line.startswith("PLAY RECAP"):
            inside = True
            continue
        if inside:
            match = _RECAP_LINE.match(line)
            if match is None:
                if line:
                    inside = False
                continue
            counts = dict(pair.split("=") for pair in match["counts"].split())
            recap[match["host"]] = {k: int(v) for k, v in counts.items()}
    return recap


def checkout_problems(checkout: Path, version: str, playbooks: tuple[str, ...]) -> list[str]:
    """What makes ``checkout`` unusable for the wizard's commands (empty: usable)."""
    if not checkout.is_dir():
        return [f"{checkout} is not a folder"]
    problems = []
    try:
        meta = _yaml().load((checkout / VERSION_FILE).read_text()) or {}
        found = str(meta.get("version", "?"))
    except (OSError, YAMLError, AttributeError):
        found = None
    wanted = version.lstrip("v")
    if found is None:
        problems.append(f"no readable {VERSION_FILE}: not a Kubespray checkout")
    elif found != wanted:
        problems.append(f"Kubespray {found}, the wizard's join is for {wanted}")
    problems += [f"{p} is missing" for p in playbooks if not (checkout / p).is_file()]
    return problems


def _yaml() -> YAML:
    yaml = YAML()  # round-trip: comments, order and quoting of the operator's file stay
    yaml.preserve_quotes = True
    yaml.indent(mapping=2, sequence=4, offset=2)
    return yaml


def _dump(data: Any) -> str:
    out = io.StringIO()
    _yaml().dump(data, out)
    return out.getvalue()


def merged_inventory(text: str, nodes: list[Node]) -> str:
    """The inventory with each node in ``all.hosts`` (ansible_host, ``ip`` on the bond,
    ansible_user) and in ``kube_node``; everything else as it was."""
    try:
        data = _yaml().load(text) if text.strip() else None
    except YAMLError as exc:
        raise KubesprayError(
            f"the inventory is not valid YAML ({_YAML_ONLY}): {str(exc).splitlines()[0]}"
        ) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise KubesprayError(f"the inventory is not a YAML mapping with `all:` ({_YAML_ONLY})")
    group = data.setdefault("all", {})
    hosts = group.setdefault("hosts", {}) if isinstance(group, dict) else None
    children = group.setdefault("children", {}) if isinstance(group, dict) else None
    if not isinstance(hosts, dict) or not isinstance(children, dict):
        raise KubesprayError("the inventory's `all` has no `hosts` and `children` mappings")
    kube_node = children.setdefault("kube_node", {})
    if kube_node is None:
        kube_node = children["kube_node"] = {}
    members = kube_node.setdefault("hosts", {})
    if members is None:
        members = kube_node["hosts"] = {}
    changed = False
    for node in nodes:
        entry = hosts.get(node.name)
        if not isinstance(entry, dict):
            entry = hosts[node.name] = {}
            changed = True
        wanted = {"ansible_host": node.host, "ip": node.rdma_ip}
        if node.ssh.user != "root":
            wanted["ansible_user"] = node.ssh.user
        for key, value in wanted.items():
            if entry.get(key) != value:
                entry[key] = value
                changed = True
        if node.name not in members:
            members[node.name] = None
            changed = True
    # Unchanged: the operator's file as it is (no re-indentation shown as a change).
    return _dump(data) if changed else text


def merged_group_vars(text: str | None, imports_line: str) -> str:
    """containerd group_vars with ``imports_line`` in containerd_extra_args (added to what
    the operator has there, never in its place)."""
    try:
        data = (_yaml().load(text) if text and text.strip() else None) or {}
    except YAMLError as exc:
        raise KubesprayError(f"the containerd group_vars are not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise KubesprayError("the containerd group_vars are not a YAML mapping")
    current = str(data.get("containerd_extra_args") or "")
    if text is not None and imports_line in current.splitlines():
        return text
    data["containerd_extra_args"] = LiteralScalarString(
        (current.rstrip("\n") + "\n" if current else "") + imports_line + "\n"
    )
    return _dump(data)


def ansible_playbook() -> str:
    """The ansible-playbook to run: on PATH, or beside this Python (a virtualenv)."""
    found = shutil.which("ansible-playbook")
    if found:
        return found
    sibling = Path(sys.executable).with_name("ansible-playbook")
    if sibling.exists():
        return str(sibling)
    raise KubesprayError(
        "ansible-playbook is not installed on this jump host: install ansible-core (Kubespray "
        "v2.29.1 needs ansible-core 2.17) or run the join by hand"
    )


async def run_playbook(
    checkout: Path,
    inventory: Path,
    playbook: str,
    args: tuple[str, ...] = (),
    *,
    on_line: Any = None,
    on_task: Any = None,
    timeout: float = 7200,
) -> PlaybookRun:
    """``ansible-playbook -i INVENTORY -b PLAYBOOK ARGS...`` in the checkout, output
    streamed line by line; the change is journaled before it runs."""
    argv = [ansible_playbook(), "-i", str(inventory), "-b", playbook, *args]
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
           "PYTHONUNBUFFERED": "1", "ANSIBLE_RETRY_FILES_ENABLED": "0"}  # fmt: skip
    intent = journal.begin({"target": TARGET, "command": shlex.join(argv), "cwd": str(checkout)})
    # Dies with the wizard; its pid and start time are journaled with the intent, so a
    # resume waits for a scale.yml a killed run left running instead of starting a second.
    process = await children.spawn(
        argv, intent, cwd=checkout, env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    lines: list[str] = []
    tasks = 0

    async def pump() -> None:
        nonlocal tasks
        assert process.stdout is not None
        async for raw in process.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            lines.append(line)
            if on_line is not None:
                on_line(line)
            task = _TASK.match(line)
            if task:
                tasks += 1
                if on_task is not None:
                    on_task(tasks, task["name"])

    try:
        await asyncio.wait_for(pump(), timeout)
        status = await process.wait()
    except TimeoutError:
        process.kill()
        journal.end(intent, {"error": f"timed out after {timeout:g}s"})
        raise KubesprayError(f"{playbook} did not finish within {timeout:g}s") from None
    output = "\n".join(lines)
    run = PlaybookRun(playbook, status, parse_recap(output), tasks, "\n".join(lines[-40:]))
    journal.end(intent, {"exit": status, "recap": run.recap})
    return run


async def count_tasks(checkout: Path, inventory: Path, playbook: str, args: tuple[str, ...]) -> int:
    """How many tasks the playbook lists (``--list-tasks`` with the run's own ARGS, so
    skipped tags are not counted), for the progress; 0 unknown."""
    argv = [ansible_playbook(), "-i", str(inventory), playbook, *args, "--list-tasks"]
    process = await asyncio.create_subprocess_exec(
        *argv, cwd=checkout, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
    )  # fmt: skip
    out, _ = await process.communicate()
    if process.returncode != 0:
        return 0
    # `--list-tasks` prints each play ("play #1 (hosts): name\tTAGS: []") and under it each
    # task ("name\tTAGS: []").
    return sum(
        1
        for line in out.decode(errors="replace").splitlines()
        if "\tTAGS: [" in line and not line.strip().startswith("play #")
    )
