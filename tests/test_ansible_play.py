"""The exported Ansible play, run for real: the real ``ansible-playbook`` with the export's
inventory and ssh_config against the lab's hosts (each in its own filesystem view,
simulator/rootfs.py, over the lab's SSH with OpenSSH's sftp-server for the transfers), the
drain and uncordon by the real kubectl (v1.33, built with the control plane, on PATH from the
lab's bin folder) against the real control plane. Then the wizard's
own verification of the same phases passes, and a rerun changes nothing."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import tempfile

import pytest
import yaml

from simulator.controlplane.versions import KUBERNETES_VERSION
from simulator.lab import Lab
from simulator.rootfs import bwrap_available
from simulator.shell import SFTP_SERVERS
from steps import build_plan
from steps.ansible import CORDON_MARK
from tests.real_tier import failures as _failures
from tests.real_tier import require_real, verify_steps
from wizard.export import export
from wizard.site import load_site

TAGS = "packages,irdma,qos,boot-unit"
# The wizard's steps whose work the play does, each verified on each node afterwards.
VERIFIED = ("packages.install", "irdma.enable", "irdma.verify", "qos.apply", "qos.persist")
# A node with work for every tag: no headers for the running kernel, irdma in iWARP mode,
# no QoS and no boot units (a fresh lab host has neither).
FAULTS = ("greenfield", "headers-other-kernel", "iwarp")  # the node already joined
_OWN_ENV = ("ANSIBLE_NOCOLOR", "ANSIBLE_HOME", "ANSIBLE_SSH_CONTROL_PATH_DIR")
_TASK = re.compile(r"^(?:TASK|RUNNING HANDLER) \[(.+?)\] \**$", re.M)
_RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def _needs() -> str:
    """ansible-playbook, bubblewrap, sftp-server and the real control plane (whose build
    carries kubectl): skipped only locally without them (CI fails instead)."""
    missing = [
        what
        for what, found in (
            ("ansible-playbook", shutil.which("ansible-playbook")),
            ("bubblewrap (/usr/bin/bwrap)", bwrap_available()),
            ("OpenSSH's sftp-server", any(os.access(p, os.X_OK) for p in SFTP_SERVERS)),
        )
        if not found
    ]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{', '.join(missing)} missing: .ci/run installs them")
        pytest.skip(f"{', '.join(missing)} not installed")
    require_real()
    return shutil.which("ansible-playbook") or ""


def _play_path(lab: Lab) -> str:
    """The play's PATH: the lab's bin folder first (its kubectl and helm are the control
    plane's own), as `lab --write-site` tells an operator to export it."""
    return f"{lab.directory / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"


def _as_operator(lab: Lab) -> None:
    """The site as an operator's usually is (Kubespray's): a non-root SSH user and sudo
    (ssh.sudo defaults to user != root), which the lab's sudo answers with sudoers'
    env_reset (simulator/shell.py)."""
    site = yaml.safe_load(lab.site_path.read_text())
    site["ssh"]["user"] = "gnw-ops"
    lab.site_path.write_text(yaml.safe_dump(site, sort_keys=False))


async def _play(tool: str, out, control: str, lab: Lab, path: str | None = None) -> tuple[int, str]:
    """ansible-playbook as the operator runs it: the export's inventory carries every
    setting (nothing from the environment but where Ansible keeps its own files, which
    ControlPath's 108-byte limit needs short, and no colour), with the lab's bin folder
    first on PATH (its kubectl is the control plane's version)."""
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_HOME": str(out / ".ansible-home"),
           "ANSIBLE_SSH_CONTROL_PATH_DIR": control}  # fmt: skip
    for name in [n for n in env if n.startswith("ANSIBLE_") and n not in _OWN_ENV]:
        env.pop(name)
    env["PATH"] = _play_path(lab)
    env.pop("KUBECONFIG", None)  # the play names the site's kubeconfig itself
    if path is not None:
        env["PATH"] = f"{path}:{env['PATH']}"
    process = await asyncio.create_subprocess_exec(
        tool, "-i", "ansible/inventory.ini", "ansible/site.yml", "--tags", TAGS,
        cwd=out, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await asyncio.wait_for(process.communicate(), 600)
    return process.returncode or 0, output.decode(errors="replace")


async def _kubectl(lab: Lab, *args: str) -> str:
    """The kubectl the play finds on its PATH (the drain's and the uncordon's)."""
    found = shutil.which("kubectl", path=_play_path(lab))
    assert found == str(lab.directory / "bin" / "kubectl"), found
    process = await asyncio.create_subprocess_exec(
        found, "--kubeconfig", str(lab.directory / "kubeconfig"), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, out
    return out.decode()


def _tasks(output: str) -> dict[str, str]:
    """Each task's block of the output by its name (the last run of a name wins)."""
    parts = _TASK.split(output)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


async def _node(lab: Lab, name: str = "gpu-b300-01") -> tuple[str, str | None]:
    """The node's spec.unschedulable ("" or "true") and the play's cordon mark on it."""
    found = json.loads(await _kubectl(lab, "get", "node", name, "-o", "json"))
    return (
        "true" if found["spec"].get("unschedulable") else "",
        (found["metadata"].get("annotations") or {}).get(CORDON_MARK),
    )


def _recap(output: str) -> dict[str, tuple[int, int, int, int]]:
    """PLAY RECAP per host: (ok, changed, unreachable, failed), summed over the plays."""
    totals: dict[str, list[int]] = {}
    for host, *counts in _RECAP.findall(output):
        row = totals.setdefault(host, [0, 0, 0, 0])
        for i, count in enumerate(counts):
            row[i] += int(count)
    return {host: tuple(row) for host, row in totals.items()}  # type: ignore[misc]


async def _verify(lab: Lab, state) -> dict[tuple[str, str], list]:
    return await verify_steps(lab.site_path, VERIFIED, state)


async def test_the_play_runs_for_real_then_the_wizard_verifies_it_and_a_rerun_changes_nothing(
    tmp_path,
):
    tool = _needs()
    control = tempfile.mkdtemp(prefix="gnw-cp-", dir="/tmp")  # ControlPath: 108-byte limit
    try:
        async with Lab(tmp_path / "lab", nodes=1, faults=FAULTS, control_plane="real") as lab:
            _as_operator(lab)
            export(load_site(lab.site_path), build_plan(), tmp_path / "out")
            before = _failures(await _verify(lab, tmp_path / "state-before"))
            # The wizard sees the work first: the headers, RoCE, the QoS and its boot units.
            assert set(before) >= {
                (step, "gpu-b300-01")
                for step in ("packages.install", "irdma.verify", "qos.apply", "qos.persist")
            }, before

            # The kubectl the play finds is the API server's own version (skew policy).
            client = json.loads(await _kubectl(lab, "version", "--client", "-o", "json"))
            assert client["clientVersion"]["gitVersion"] == KUBERNETES_VERSION, client

            status, output = await _play(tool, tmp_path / "out", control, lab)
            assert status == 0, output[-6000:]
            (_, changed, unreachable, failed) = _recap(output)["gpu-b300-01"]
            assert (unreachable, failed) == (0, 0) and changed > 0, output[-3000:]
            # The node was drained (by kubectl on the control host) for its QoS window, and
            # before the apply: the drain's own words, in the order the play ran.
            tasks = _tasks(output)
            assert "changed: [gpu-b300-01 -> localhost]" in tasks["Cordon and drain the node"]
            drained = tasks["Show what the drain did"]
            assert "node/gpu-b300-01 cordoned" in drained, drained
            assert "node/gpu-b300-01 drained" in drained, drained
            names = list(tasks)
            assert names.index("Show what the drain did") < names.index(
                "Apply identical QoS to both ports (the wizard's own script, idempotent)"
            )
            assert "no node is left cordoned by the QoS play" in output
            # irdma was reloaded in RoCE mode inside the window (drained), not in play 1.
            reload = "Reload irdma in RoCE mode (drained, one batch at a time)"
            assert "changed: [gpu-b300-01]" in tasks[reload], tasks[reload]
            assert names.index("Show what the drain did") < names.index(reload)

            # What the play wrote landed in the host's model (through its own view).
            for host in lab.gpu_hosts():
                state = host.state
                assert f"kernel-devel-{state.kernel}" in state.packages  # the running kernel's
                assert "roce_ena=1" in host.files["/etc/modprobe.d/irdma.conf"]
                assert host.state.irdma_roce and "roce_ena=1" in host.state.initramfs_irdma_options
                assert host.name in host.files["/usr/local/sbin/gpu-node-wizard-roce-tos"]
                assert host.state.enabled_units >= {
                    "gpu-node-wizard-roce-qos.service",
                    "gpu-node-wizard-roce-tos.service",
                }
                # Drained and uncordoned again by the real kubectl.
                unschedulable = await _kubectl(
                    lab, "get", "node", host.name, "-o", "jsonpath={.spec.unschedulable}"
                )
                assert unschedulable == "", unschedulable
                assert (await _node(lab, host.name))[1] is None

            assert _failures(await _verify(lab, tmp_path / "state-after")) == {}

            status, output = await _play(tool, tmp_path / "out", control, lab)
            assert status == 0, output[-6000:]
            recap = _recap(output)
            assert "gpu-b300-01" in recap, output[-3000:]
            for host, (_, changed, unreachable, failed) in recap.items():
                assert (changed, unreachable, failed) == (0, 0, 0), (host, output[-6000:])
            assert "changed: [gpu-b300-01 -> localhost]" not in output  # no drain, no uncordon

            # A run that failed half-way left irdma in iWARP mode and the initramfs without
            # roce_ena: the rerun notices both (nothing it copies changed) and fixes both.
            (host,) = lab.gpu_hosts()
            host.state.irdma_roce = False
            host.state.initramfs_irdma_options = ""
            status, output = await _play(tool, tmp_path / "out", control, lab)
            assert status == 0, output[-6000:]
            tasks = _tasks(output)
            assert "changed: [gpu-b300-01]" in tasks["Rebuild the initramfs"], output[-6000:]
            assert "changed: [gpu-b300-01]" in tasks[reload], output[-6000:]
            assert host.state.irdma_roce and "roce_ena=1" in host.state.initramfs_irdma_options
            assert await _node(lab) == ("", None)
    finally:
        shutil.rmtree(control, ignore_errors=True)


# kubectl on the control host that fails the first uncordon as an unreachable API server
# does, then is the real kubectl again.
_FLAKY_KUBECTL = """#!/bin/sh
case " $* " in
*" uncordon "*)
    if [ ! -e "{flag}" ]; then
        : > "{flag}"
        echo 'The connection to the server 127.0.0.1:6443 was refused' >&2
        exit 1
    fi ;;
esac
exec {kubectl} "$@"
"""


async def test_a_node_a_failed_run_left_cordoned_is_named_and_uncordoned_by_the_rerun(tmp_path):
    """B1: the uncordon fails once: the run fails saying which node it left cordoned and the
    last play lists it; the rerun (QoS in place by then) still uncordons it, and a cordon
    someone else set later is never lifted."""
    tool = _needs()
    control = tempfile.mkdtemp(prefix="gnw-cp-", dir="/tmp")
    flaky = tmp_path / "flaky-bin"
    flaky.mkdir()
    (flaky / "kubectl").write_text(
        _FLAKY_KUBECTL.format(flag=tmp_path / "failed-once", kubectl=shutil.which("kubectl"))
    )
    (flaky / "kubectl").chmod(0o755)
    out = tmp_path / "out"
    try:
        async with Lab(tmp_path / "lab", nodes=1, faults=FAULTS, control_plane="real") as lab:
            _as_operator(lab)
            export(load_site(lab.site_path), build_plan(), out)

            status, output = await _play(tool, out, control, lab, path=str(flaky))
            assert status != 0, output[-4000:]
            assert 'NODE gpu-b300-01 LEFT CORDONED: "Uncordon the node" failed' in output, output[
                -4000:
            ]
            assert "NODES LEFT CORDONED by the QoS play: gpu-b300-01." in output, output[-4000:]
            assert await _node(lab) == ("true", "qos")

            status, output = await _play(tool, out, control, lab)
            assert status == 0, output[-6000:]
            tasks = _tasks(output)
            assert "skipping" in tasks["Cordon and drain the node"]  # the QoS is in place
            assert "changed: [gpu-b300-01 -> localhost]" in tasks["Uncordon the node"]
            assert await _node(lab) == ("", None), output[-3000:]

            # Someone else's cordon (a hardware fault, say): left alone, and said so.
            await _kubectl(lab, "cordon", "gpu-b300-01")
            status, output = await _play(tool, out, control, lab)
            assert status == 0, output[-6000:]
            assert "was cordoned before this run, not by this play" in output, output[-3000:]
            assert "changed: [gpu-b300-01 -> localhost]" not in output
            assert (await _node(lab))[0] == "true"
    finally:
        shutil.rmtree(control, ignore_errors=True)


@pytest.mark.parametrize("fault", ["ssh-over-bond1", "ssh-over-bond1-vlan"])
async def test_the_play_refuses_a_node_whose_ssh_session_runs_over_the_bond(tmp_path, fault):
    """B2: SSH reaches the node over bond1 (or a VLAN on it, host-r2 B4) and the play goes
    through sudo (whose env_reset drops SSH_CONNECTION): the guard reads it as the SSH
    user and refuses before anything is marked, drained or applied."""
    tool = _needs()
    control = tempfile.mkdtemp(prefix="gnw-cp-", dir="/tmp")
    out = tmp_path / "out"
    try:
        async with Lab(
            tmp_path / "lab", nodes=1, faults=(*FAULTS, fault), control_plane="real"
        ) as lab:
            _as_operator(lab)
            export(load_site(lab.site_path), build_plan(), out)
            status, output = await _play(tool, out, control, lab)
            assert status != 0, output[-4000:]
            refused = _tasks(output)[
                "Refuse when the SSH session runs over the bond this change takes down"
            ]
            assert "the SSH session to gpu-b300-01 runs over bond1" in refused, output[-4000:]
            assert "Cordon and drain the node" not in _tasks(output), output[-4000:]
            assert await _node(lab) == ("", None)
            (host,) = lab.gpu_hosts()
            assert not [c for c in host.commands if "apply-qos" in c or "nomaster" in c]
    finally:
        shutil.rmtree(control, ignore_errors=True)
