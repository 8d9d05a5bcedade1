"""RUNBOOK.md can be followed from its export folder (#24 point 5).

The lab (`gpu-node-wizard lab --write-site`, in its own process) writes a site file whose
kubeconfig is a path relative to the site file, the case that used to leave no working
directory serving both it and the export's `--values`. The site is exported into another
folder and RUNBOOK.md is read as an operator reads it: its sh blocks in order.

What is executed, with a real shell from the export folder: the opening block (the working
directory check and the one `export KUBECONFIG`), and then, after it, every line of the
cluster preflight that reads the cluster (`kubectl --kubeconfig "$KUBECONFIG" version`)
against the lab's API server; and the GPU node's read-only check blocks, piped from the
export folder into `ssh -F ansible/ssh_config NODE 'sh -es'` as the runbook says, on the
lab's node (a real shell in its own root filesystem). The embedded API server serves no
discovery endpoints, so its other kubectl lines are not executed; the real tier below runs
the cluster blocks in order on the real control plane (CI=true requires it). Node blocks
with conditional lines (`when it differs`, changes in the maintenance window) and the
blocks after the GPU Operator (its pods, test pods, measurements) are not executed here. For every block the test checks what an operator following it needs: each
line parses as shell once the placeholders the runbook's introduction names are filled
in, each file it names exists in the export folder, every `kubectl logs` comes after a
`kubectl wait` on the same object, the chart's repository is added before the chart is
used, and no line names a kubeconfig other than "$KUBECONFIG".
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from steps import build_plan
from tests.conftest import MINIMAL_SITE, served_lab
from tests.real_tier import exported_real_lab, failures, verify_steps
from tests.runbook_follower import BLOCK, Follower, follow_section, sections
from wizard.export import RUNBOOK, export
from wizard.site import load_site

# The placeholders the runbook's introduction says where to find (and a sample value).
PLACEHOLDERS = {
    "<rdma-dev>": "irdma0",
    "<gid-index>": "3",
    "<kernel>": "6.12.0-55.el10.x86_64",
    "<peer-netdev>": "ens1f0np0",
    "<chart-repository-url>": "https://mirror.example/nvidia",
    # What qos.apply read above on the node (the line's comment says so).
    "<capture>": "/tmp/qos-capture",
    # The Kubespray checkout and its inventory's folder (the join step's operator action).
    "<kubespray-checkout>": "/srv/kubespray",
    "<cluster>": "mycluster",
}
PLACEHOLDER = re.compile(r"<[a-z][a-z0-9-]*>")


@pytest.fixture(scope="module")
def followed(tmp_path_factory):
    """(site, export folder, the runbook's sh blocks) of an export of a served lab's site."""
    tmp = tmp_path_factory.mktemp("follow")
    site_file = tmp / "lab" / "site.yaml"
    out = tmp / "export"
    with served_lab(site_file):
        site = load_site(site_file)
        export(site, build_plan(), out)
        text = (out / RUNBOOK).read_text()
        blocks = BLOCK.findall(text)
        yield site, out, text, blocks, site_file


def lines(blocks: list[str]) -> list[str]:
    """The command lines of ``blocks`` (comment lines left out)."""
    return [
        line
        for block in blocks
        for line in block.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_the_opening_block_names_the_export_folder_and_the_sites_kubeconfig(followed):
    site, out, _, blocks, site_file = followed
    opening = blocks[0]
    kubeconfig = str(site.resolve_path(site.cluster.kubeconfig))
    shown = subprocess.run(
        ["sh", "-ec", opening + '\nprintf %s "$KUBECONFIG"'],
        cwd=out, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == kubeconfig
    # Anywhere else (the site file's folder) it stops at once.
    elsewhere = subprocess.run(
        ["sh", "-ec", opening], cwd=site_file.parent, capture_output=True, timeout=30
    )
    assert elsewhere.returncode != 0


def test_the_cluster_preflight_runs_from_the_export_folder_against_the_lab(followed):
    _, out, _, blocks = followed[:4]
    preflight = [line for line in lines(blocks) if line.startswith("kubectl --kubeconfig")]
    assert preflight, "the cluster preflight lists its kubectl lines"
    version = [line for line in preflight if line.split("  #")[0].endswith(" version")]
    assert version
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    for line in version:
        ran = subprocess.run(
            ["sh", "-ec", blocks[0] + "\n" + line],
            cwd=out, capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
        assert ran.returncode == 0, f"{line}: {ran.stderr}"
        assert "Server Version" in ran.stdout


def test_every_line_is_shell_once_its_placeholders_are_filled_in(followed):
    _, _, _, blocks = followed[:4]
    for line in lines(blocks):
        for hole in PLACEHOLDER.findall(line.split("  # ", 1)[0]):
            if hole.startswith("<uuid-of-"):
                continue  # the port's profile (`nmcli -t -f NAME,UUID,TYPE,DEVICE connection show`)
            assert hole in PLACEHOLDERS, f"unexplained placeholder {hole} in: {line}"
        filled = line
        for hole, value in PLACEHOLDERS.items():
            filled = filled.replace(hole, value)
        filled = re.sub(r"<uuid-of-[a-z0-9]+>", "5f1a0c2e-8d5b-4a36-9a0e-2c1b7d2f0a11", filled)
        checked = subprocess.run(["sh", "-n", "-c", filled], capture_output=True, timeout=10)
        assert checked.returncode == 0, f"not shell: {line}: {checked.stderr!r}"


def test_every_file_a_line_names_is_in_the_export_folder(followed):
    _, out, _, blocks = followed[:4]
    named = set()
    for line in lines(blocks):
        command = line.split("  # ", 1)[0]
        tokens = shlex.split(re.sub(PLACEHOLDER, "x", command), comments=True)
        for i, token in enumerate(tokens):
            flag = tokens[i - 1] if i else ""
            after_file_flag = token != "-" and (
                (tokens[0] == "kubectl" and flag == "-f") or flag == "--values"
            )
            if after_file_flag or re.match(r"^(cluster|nodes|ansible)/", token):
                named.add(token)
    assert any(p.endswith("gpu-test-pod.yaml") for p in named)
    assert any(p.startswith("cluster/k8s/") for p in named)
    missing = sorted(p for p in named if not (out / p).is_file())
    assert missing == []


def test_logs_are_read_after_a_wait_on_the_same_object(followed):
    _, _, _, blocks = followed[:4]
    for block in blocks:
        waited: set[str] = set()
        for line in lines([block]):
            tokens = shlex.split(line.split("  # ", 1)[0])
            if tokens[:1] != ["kubectl"]:
                continue
            objects = [t for t in tokens if re.match(r"^(pod|job|mpijob)/", t)]
            if "wait" in tokens:
                waited |= set(objects)
            if "logs" in tokens:
                assert objects or "-l" in tokens, line
                if objects:
                    assert set(objects) <= waited, f"logs without a wait first: {line}"
                else:
                    assert any(w.startswith("mpijob/") for w in waited), line


def test_the_chart_repository_is_added_before_helm_uses_the_chart(followed):
    site, _, _, blocks = followed[:4]
    chart = site.registry.gpu_operator_chart
    repo = chart.split("/", 1)[0]
    all_lines = lines(blocks)
    added = next(i for i, line in enumerate(all_lines) if f"repo add {repo} " in line)
    used = [i for i, line in enumerate(all_lines) if f" {chart} " in line]
    assert used and min(used) > added


def test_the_kubeconfig_is_named_once(followed):
    _, _, _, blocks = followed[:4]
    for line in lines(blocks[1:]):
        tokens = shlex.split(line.split("  # ", 1)[0])
        for i, token in enumerate(tokens[:-1]):
            if token == "--kubeconfig":
                assert tokens[i + 1] == "$KUBECONFIG", line
    assert sum("export KUBECONFIG=" in block for block in blocks) == 1


def test_cordon_drain_uncordon_and_rollbacks_are_commands(followed):
    _, _, text, _ = followed[:4]
    for heading in ("Rollback", "Commands"):
        for block in re.findall(rf"^{heading}[^\n]*:\n\n```sh\n(.*?)^```$", text, re.S | re.M):
            for line in block.splitlines():
                if line.strip() and not line.startswith("#"):
                    word = line.split()[0].removeprefix("(")  # a subshell's first word
                    assert re.fullmatch(r"[A-Za-z0-9_./-]+", word), line
                    assert not word[0].isupper(), f"a sentence, not a command: {line}"
    for verb in ("cordon", "drain"):
        assert re.search(rf"^kubectl {verb} gpu-b300-01", text, re.M)
    # The uncordon only of a cordon the procedure set (wizard/drain.py): its mark first,
    # and the uncordon guarded by it, as commands too.
    assert re.search(r"^if test -n .*kubectl annotate node gpu-b300-01 ", text, re.M)
    assert re.search(r"^if test -n .*then kubectl uncordon gpu-b300-01 ", text, re.M)
    assert not re.search(r"^kubectl uncordon", text, re.M)


# The cluster side of the runbook that a lab without GPU Operator pods can take, in the
# runbook's order: the version and node reads, the labels, the chart's repository and the
# GPU Operator preflight, the RDMA device plugin (ConfigMap, DaemonSet, rollout).
CLUSTER_STEPS = (
    "preflight.cluster",
    "join.labels",
    "gpu-operator.preflight",
    "rdma-plugin.install",
)


def step_blocks(text: str, step: str) -> list[str]:
    """The sh blocks of one step's section (from its `### step:` heading to the next)."""
    section = text.split(f"\n### {step}: ", 1)[1].split("\n### ", 1)[0]
    return BLOCK.findall(section)


@pytest.fixture(scope="module")
def followed_real(tmp_path_factory):
    """An export of a lab on the real control plane (real kube-apiserver, controllers, helm
    and the chart repository `nvidia` served on loopback): kubectl has its discovery there."""
    # Greenfield: its GPU node already joined, so the cluster blocks after the join (labels,
    # the plugin) have a node to act on; the default lab's node joins through Kubespray.
    yield from exported_real_lab(tmp_path_factory.mktemp("real-lab"), "--fault", "greenfield")


def test_the_cluster_blocks_run_in_order_from_the_export_folder_on_the_real_control_plane(
    followed_real,
):
    lab, out, text = followed_real
    opening = BLOCK.findall(text)[0]
    # The operator's own shell: no KUBECONFIG of ours, kubectl from PATH, helm as named.
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    for step in CLUSTER_STEPS:
        blocks = step_blocks(text, step)
        assert blocks, f"{step} has no sh block"
        for block in blocks:
            ran = subprocess.run(
                ["sh", "-ec", f"{opening}\n{block}"],
                cwd=out, capture_output=True, text=True, timeout=360, env=env,
            )  # fmt: skip
            assert ran.returncode == 0, f"{step}:\n{block}\n{ran.stdout[-2000:]}{ran.stderr}"
    kubectl = ["kubectl", "--kubeconfig", str(lab.kubeconfig)]
    node = subprocess.run(
        [*kubectl, "get", "node", "gpu-b300-01", "-o", "jsonpath={.metadata.labels}"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert '"accelerator":"nvidia-b300"' in node.stdout
    ds = subprocess.run(
        [*kubectl, "-n", "kube-system", "get", "daemonset", "gnw-rdma-shared-dp-ds", "-o",
         "jsonpath={.status.numberReady}"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert int(ds.stdout or 0) >= 1


# The GPU node's read-only checks, in the runbook's order: every line of these blocks runs
# unconditionally (the other node blocks list what the wizard runs only sometimes, as their
# comments say: `when it differs`, `once a driver is present`, a change in the maintenance
# window), so they can be followed line by line as written.
NODE_READS = ("preflight.host", "preflight.containerd", "preflight.gpudirect",
              "preflight.ssh-path", "e810.ice", "bond.lacp", "irdma.verify")  # fmt: skip


def test_the_node_read_blocks_run_on_the_lab_node_over_the_exported_ssh_config(followed):
    site, out, text, _ = followed[:4]
    host = site.nodes[0].host
    for step in NODE_READS:
        for block in step_blocks(text, step):
            ran = subprocess.run(
                ["ssh", "-F", "ansible/ssh_config", host, "sh -es"],
                input=block, cwd=out, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert ran.returncode == 0, f"{step}:\n{block}\n{ran.stderr[-2000:]}"
            assert ran.stdout.strip(), f"{step} printed nothing"


@pytest.mark.parametrize(
    ("kubeconfig", "where"),
    [("~/kube configs/prod", "home"), ("kube/config", "site"), ("/etc/k8s/admin.conf", "abs")],
)
def test_the_kubeconfig_is_one_absolute_file_whatever_the_site_file_wrote(
    tmp_path, kubeconfig, where
):
    """`~/` is the home of whoever follows the runbook (POSIX sh does not expand a tilde
    after `=` in `export`); a relative path is the site file's neighbour, not the export's."""
    site_file = tmp_path / "site" / "site.yaml"
    site_file.parent.mkdir()
    site_file.write_text(
        MINIMAL_SITE + f"cluster:\n  kubeconfig: {kubeconfig!r}\n  context: prod-admin@prod\n"
    )
    out = tmp_path / "export"
    export(load_site(site_file), build_plan(), out)
    text = (out / RUNBOOK).read_text()
    opening = BLOCK.findall(text)[0]
    assert 'test "$(kubectl config current-context)" = prod-admin@prod' in opening
    assert "--context prod-admin@prod version" in text
    home = tmp_path / "home"
    expected = {
        "home": home / "kube configs" / "prod",
        "site": site_file.parent / "kube" / "config",
        "abs": Path("/etc/k8s/admin.conf"),
    }[where]
    export_line = next(line for line in opening.splitlines() if line.startswith("export "))
    shown = subprocess.run(
        ["sh", "-ec", f'{export_line}\nprintf %s "$KUBECONFIG"'],
        cwd=out, capture_output=True, text=True, timeout=30,
        env={**os.environ, "HOME": str(home)},
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == str(expected)


# What the lab's cluster cannot answer as a real one would, and what it says instead: the
# API server proxies only to addresses it considers routable (kube-apiserver
# pkg/registry/core/pod/strategy.go ResourceLocation: IsProxyableIP refuses loopback pod
# IPs, which every lab pod has); the wizard skips that read the same way (steps/gpu_operator/
# dcgm.py).
LAB_LIMITS = {"/proxy/metrics": "address not allowed"}
# Followed from here to the end (and join.labels first: the plugin's nodeSelector needs it).
FOLLOWED_FROM = "gpu-operator.install"
# What the wizard verifies afterwards on the node: the window's change, its boot units, the
# reboot's re-verification and what the cluster blocks installed.
# gpu-operator.preflight first: it records the release (its namespace) verify reads.
AFTER_FOLLOWING = ("irdma.verify", "bond.lacp", "qos.apply", "qos.persist",
                   "gpu-operator.preflight", "gpu-operator.verify", "rdma-plugin.pod-test")  # fmt: skip


def follower_for(site, out: Path, text: str, env: dict[str, str]) -> Follower:
    """A follower of ``text`` (RUNBOOK.md) for the site's first GPU node, with the
    introduction's `install` form read from the introduction itself."""
    writer = re.search(r"as the wizard writes it[^`]*`(ssh [^`]* < FILE)`", text)
    assert writer, "the introduction says how an `install -m MODE FILE PATH` line is run"
    hosts = {n.name: n.host for n in site.nodes} | {p.name: p.host for p in site.aistor.peers}
    return Follower(out, BLOCK.findall(text)[0], site.nodes[0].host, hosts, env,
                    lab_limits=LAB_LIMITS, file_writer=writer.group(1))  # fmt: skip


async def test_the_runbook_followed_to_its_end_on_the_real_control_plane_then_the_wizard_verifies(
    followed_real, tmp_path
):
    lab, out, text = followed_real
    site = load_site(lab.site)
    before = failures(await verify_steps(lab.site, ("qos.apply", "qos.persist"), tmp_path / "a"))
    assert set(before) == {("qos.apply", "gpu-b300-01"), ("qos.persist", "gpu-b300-01")}
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["PATH"] = f"{lab.folder / 'bin'}{os.pathsep}{env['PATH']}"  # its kubectl, as `lab` says
    follower = follower_for(site, out, text, env)
    followed = []
    started = False
    for step, section in sections(text):
        started = started or step == FOLLOWED_FROM
        # gpu-operator.preflight too: its line finds the release (GNW_RELEASE,
        # GNW_NAMESPACE) that the install's and verification's lines name.
        if started or step in ("join.labels", "gpu-operator.preflight"):
            follow_section(follower, section)
            followed.append(step)
    assert followed[-1] == "operate.reboot"
    # The window was followed by its "By hand" block: the drain, the exported script, back.
    window = [r.line for r in follower.ran if "apply-qos.sh" in r.line]
    assert len(window) == 1 and "kubectl drain gpu-b300-01" in window[0]
    # The reboot happened (the boot id changed) and the node came back by the runbook alone.
    boot_ids = {r.stdout for r in follower.ran if r.line.endswith("random/boot_id")}
    assert len(boot_ids) == 2
    after = await verify_steps(lab.site, AFTER_FOLLOWING, tmp_path / "b")
    assert failures(after) == {}
