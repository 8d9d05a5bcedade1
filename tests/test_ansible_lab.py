"""The exported Ansible hand-off against the lab's hosts, over real OpenSSH (Ansible's ssh
connection plugin), with nothing but the export's own inventory."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest
import yaml

from steps import build_plan
from steps.ansible import ssh_vars
from tests.conftest import MINIMAL_SITE
from wizard.export import export
from wizard.lab.lab import Lab
from wizard.site import load_site


def _ansible(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing: the test extras install it")
        pytest.skip(f"{name} not installed")
    return path


async def _run(*argv: str, cwd) -> tuple[int, str]:
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_HOME": str(cwd / ".ansible-home")}
    process = await asyncio.create_subprocess_exec(
        *argv, cwd=cwd, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(process.communicate(), 300)
    return process.returncode or 0, out.decode()


async def test_the_exported_inventory_reaches_the_lab_with_the_sites_key_and_known_hosts(tmp_path):
    """The README's hand-off, tried as a new user would: no option beyond the inventory.
    Without the site's key and known_hosts, ssh answers "Host key verification failed"."""
    tool = _ansible("ansible")
    async with Lab(tmp_path / "lab", nodes=2) as lab:
        export(load_site(lab.site_path), build_plan(), tmp_path / "out")
        ansible = tmp_path / "out/ansible"
        status, output = await _run(
            tool, "-i", "inventory.ini", "gpu_nodes", "-m", "raw", "-a", "cat /etc/machine-id",
            cwd=ansible,
        )  # fmt: skip
        assert status == 0, output
        for host in lab.gpu_hosts():
            assert f"{host.name} | CHANGED | rc=0" in output
            assert host.machine_id in output


def test_by_default_an_unknown_host_key_is_refused(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text(MINIMAL_SITE)
    found = ssh_vars(load_site(path), load_site(path).nodes[0].ssh)
    assert "-o StrictHostKeyChecking=yes" in found["ansible_ssh_common_args"]
    # ssh expands the ~ itself (the operator's home on the control host).
    assert "-o 'UserKnownHostsFile=~/.ssh/known_hosts'" in found["ansible_ssh_common_args"]


def test_key_known_hosts_proxy_jump_and_sudo_come_from_the_site(tmp_path):
    path = tmp_path / "my site" / "site.yaml"
    path.parent.mkdir()
    path.write_text(
        MINIMAL_SITE.replace(
            "nodes:",
            "ssh: {user: ops, key: keys/id_ed25519, known_hosts: 'keys/known hosts',\n"
            "      proxy_jump: 'jump@bastion.example', trust_on_first_use: true}\nnodes:",
            1,
        )
    )
    site = load_site(path)
    out = tmp_path / "out"
    export(site, build_plan(), out)
    node = site.nodes[0]
    found = yaml.safe_load((out / f"ansible/host_vars/{node.name}.yml").read_text())
    folder = path.parent
    assert found["ansible_user"] == "ops" and found["ansible_become"] is True
    assert found["ansible_ssh_private_key_file"] == str(folder / "keys/id_ed25519")
    args = found["ansible_ssh_common_args"]
    # Quoted for Ansible's shell-like split: a path with a space stays one argument.
    assert f"-o 'UserKnownHostsFile={folder}/keys/known hosts'" in args
    assert "-o StrictHostKeyChecking=accept-new" in args
    assert "-o ProxyJump=jump@bastion.example" in args
