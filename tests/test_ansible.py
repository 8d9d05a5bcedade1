"""The Ansible hand-off: rendered from the wizard's own data, and valid for ansible itself."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from steps import build_plan
from steps.qos import FACTORY, port_commands
from tests.conftest import MINIMAL_SITE
from wizard.export import export
from wizard.site import load_site

FLEET = (
    MINIMAL_SITE.replace(
        "aistor:",
        "  - name: gpu-2\n    host: 10.0.0.2\n    ssh: {user: ops, port: 2222}\n    os: ubuntu-24.04\n"
        "    bond: {ports: [enp1s0f0, enp1s0f1]}\n    rdma_ip: 192.168.50.2\naistor:",
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
    expected = [c for port in node.bond.ports for c in port_commands(site, port, FACTORY)]
    assert host_vars["gnw_qos_commands"] == expected
    assert "ibverbs-providers" in host_vars["gnw_packages"]  # the Ubuntu profile
    assert "{{ rdma_dev }}" in host_vars["gnw_boot_script"]
    playbook = yaml.safe_load((ansible / "site.yml").read_text())
    qos_play = playbook[1]
    assert qos_play["serial"] == 2 and qos_play["max_fail_percentage"] == 0
    names = [t["name"] for t in qos_play["tasks"]]
    assert names.index("Cordon and drain the node") < names.index(
        "Take the ports out of the bond (QoS is blocked on bonded ports)"
    )
    assert names.index("Put the ports back into the bond") < names.index("Uncordon the node")
    inventory = (ansible / "inventory.ini").read_text()
    assert "[gpu_nodes]\ngpu-1\ngpu-2\n" in inventory


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
