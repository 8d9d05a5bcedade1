"""The Ansible hand-off: rendered from the wizard's own data, and valid for ansible itself."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simulator.host import LabHost
from steps import build_plan
from steps.qos import BootPersistence, procedure
from tests.conftest import MINIMAL_SITE
from wizard.export import export
from wizard.site import load_site

FLEET = (
    MINIMAL_SITE.replace(
        "aistor:",
        "  - name: gpu-2\n    host: 10.0.0.2\n    ssh: {user: ops, port: 2222}\n    os: ubuntu-24.04\n"
        "    bond: {ports: [enp1s0f0, enp1s0f1]}\n    rdma_ip: 192.168.50.2\n"
        "  - name: gpu-3\n    host: 10.0.0.3\n    bond: {ports: [ens5f0np0, ens5f1np1]}\n"
        "    rdma_ip: 192.168.50.3\naistor:",
    )
    + "rollout: {maintenance_batch: 2}\n"
)


@pytest.fixture
def exported(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text(FLEET)
    out = tmp_path / "out"
    export(load_site(path), build_plan(), out)
    return load_site(path), out / "ansible"


def test_playbook_uses_the_wizards_own_commands(exported):
    site, ansible = exported
    node = site.node("gpu-2")
    host_vars = yaml.safe_load((ansible / "host_vars/gpu-2.yml").read_text())
    assert host_vars["ansible_port"] == 2222 and host_vars["ansible_user"] == "ops"
    assert host_vars["gnw_bond_ports"] == ["enp1s0f0", "enp1s0f1"]
    # The QoS change is the wizard's own script for this node; the boot files its own too.
    assert (ansible / "files/gpu-2/apply-qos.sh").read_text() == procedure(site, node)
    boot = {f["dest"]: f["content"] for f in host_vars["gnw_boot_files"]}
    assert boot == {a.host_path: a.content for a in BootPersistence().artifacts(site, node)}
    assert "ibverbs-providers" in host_vars["gnw_packages"]  # the Ubuntu profile
    playbook = yaml.safe_load((ansible / "site.yml").read_text())
    qos_play = playbook[1]
    assert qos_play["serial"] == 2 and qos_play["max_fail_percentage"] == 0
    names = [t["name"] for t in qos_play["tasks"]]
    window = next(t for t in qos_play["tasks"] if "block" in t)
    names += [t["name"] for t in window["block"]]
    # The cordon is marked as the play's before the drain, lifted (then the mark) after.
    assert names.index("Mark the cordon as this play's (before the drain cordons the node)") < (
        names.index("Cordon and drain the node")
    )
    assert names.index("Uncordon the node") < names.index(
        "Remove the play's mark (after the uncordon, so a failed one is retried)"
    )
    # A failure in the window says so; the last play lists what is left cordoned.
    assert "LEFT CORDONED" in str([t for t in window["rescue"] if "ansible.builtin.fail" in t])
    assert playbook[-1]["hosts"] == "localhost" and "NODES LEFT CORDONED" in str(playbook[-1])
    # irdma: the copy notifies the initramfs rebuild itself (a failed reload cannot stop
    # it, and force_handlers keeps it after a later failure); the reload is in the drained
    # window, after the drain, never a handler of the all-nodes play.
    files_play = playbook[0]
    assert files_play["force_handlers"] is True
    assert [h["name"] for h in files_play["handlers"]] == ["Rebuild the initramfs"]
    copy = next(
        t for t in files_play["tasks"] if t["name"] == "Write the irdma boot and RoCEv2 files"
    )
    assert copy["notify"] == "Rebuild the initramfs"
    assert names.index("Cordon and drain the node") < names.index(
        "Reload irdma in RoCE mode (drained, one batch at a time)"
    )
    # The out-of-band rule holds in the play too: refused before anything is drained.
    assert names.index("Refuse when the SSH session runs over the bond this change takes down") < (
        names.index("Cordon and drain the node")
    )
    assert names.index("Cordon and drain the node") < names.index(
        "Apply identical QoS to both ports (the wizard's own script, idempotent)"
    )


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing: the test extras install it")
        pytest.skip(f"{name} not installed")
    return path


def test_syntax_check_passes(exported):
    _, ansible = exported
    result = subprocess.run(
        [_tool("ansible-playbook"), "-i", "inventory.ini", "site.yml", "--syntax-check"],
        capture_output=True, text=True, cwd=ansible, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_ansible_lint_passes(exported):
    _, ansible = exported
    result = subprocess.run(
        [_tool("ansible-lint"), "--offline", "site.yml"],
        capture_output=True, text=True, cwd=ansible, check=False,
        env={**os.environ, "ANSIBLE_LINT_NODEPS": "1", "NO_COLOR": "1"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def _check_mode(ansible: Path, tmp_path: Path, rdma_links: str) -> subprocess.CompletedProcess:
    """`ansible-playbook --check --diff` of the export against this machine (connection
        local, no become), with `rdma` answering what a GPU node's would, `kubectl` a node nobody
    cordoned, and an SSH session over loopback. The package task is
        skipped: its names are for the node's distribution, not this machine's."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "links.json").write_text(rdma_links)
    (bin_dir / "rdma").write_text(f"#!/bin/sh\ncat {bin_dir / 'links.json'}\n")
    (bin_dir / "rdma").chmod(0o755)
    # kubectl answers a node nobody cordoned (the play reads its cordon under --check too).
    (bin_dir / "kubectl").write_text(
        '#!/bin/sh\ncase "$*" in\n'
        "*'get nodes '*) echo '{\"items\": []}' ;;\n"
        '*) echo \'{"metadata": {"name": "gpu-1"}, "spec": {}}\' ;;\nesac\n'
    )
    (bin_dir / "kubectl").chmod(0o755)
    inventory = tmp_path / "localhost.ini"
    inventory.write_text(
        f"[gpu_nodes]\ngpu-1 ansible_connection=local gnw_become=false "
        f"ansible_python_interpreter={sys.executable}\n"
    )
    return subprocess.run(
        [_tool("ansible-playbook"), "-i", str(inventory), "site.yml", "--check", "--diff",
         "--skip-tags", "packages", "--limit", "gpu-1"],
        capture_output=True, text=True, cwd=ansible, check=False, timeout=300,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "NO_COLOR": "1",
             "ANSIBLE_NOCOLOR": "1", "SSH_CONNECTION": "127.0.0.1 40000 127.0.0.1 22"},
    )  # fmt: skip


def test_check_mode_on_localhost_shows_the_changes_and_makes_none(exported, tmp_path):
    _, ansible = exported
    lab_host = LabHost("gpu-1", "gpu", "10.0.0.1", "192.168.50.1")  # answers like a GPU node
    written = [Path("/etc/modprobe.d/irdma.conf"), Path("/usr/local/sbin/gpu-node-wizard-roce-qos")]
    before = {path: path.exists() for path in written}
    result = _check_mode(ansible, tmp_path, lab_host.execute("rdma -j link show").stdout)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "failed=0" in output
    assert "+options irdma roce_ena=1" in output  # the irdma file, shown as a diff
    # The boot scripts are the wizard's own, shown as diffs (the device is found at boot).
    assert "tc-bw 0:50 1:0 2:0 3:50 4:0 5:0 6:0 7:0'\n" in output
    assert '+write_tos "$dev" "$TOS"' in output
    assert {path: path.exists() for path in written} == before  # --check wrote nothing


def test_check_mode_stops_with_a_clear_message_without_an_rdma_device(exported, tmp_path):
    _, ansible = exported
    result = _check_mode(ansible, tmp_path, "[]")
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "no RDMA device on ens5f0np0 or ens5f1np1" in output
    assert "load irdma with roce_ena=1 first" in output


@pytest.mark.parametrize(
    ("rollout", "serial", "max_fail"),
    [("{maintenance_batch: 25%, max_failed_nodes: 1}", "25%", 33),
     ("{maintenance_batch: 1, max_failed_nodes: 10%}", 1, 10)],
)  # fmt: skip
def test_serial_and_failure_limit_follow_the_rollout(tmp_path, rollout, serial, max_fail):
    path = tmp_path / "site.yaml"
    path.write_text(FLEET.replace("rollout: {maintenance_batch: 2}", f"rollout: {rollout}"))
    export(load_site(path), build_plan(), tmp_path / "out")
    qos_play = yaml.safe_load((tmp_path / "out/ansible/site.yml").read_text())[1]
    assert (qos_play["serial"], qos_play["max_fail_percentage"]) == (serial, max_fail)
