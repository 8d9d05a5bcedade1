"""The exported Ansible hand-off against the lab's hosts, over real OpenSSH (Ansible's ssh
connection plugin), with nothing but the export's own inventory."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile

import pytest
import yaml

from simulator.lab import Lab
from steps import build_plan
from steps.ansible import ssh_vars
from tests.conftest import MINIMAL_SITE
from wizard.export import export
from wizard.site import load_site


def _ansible(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing: the test extras install it")
        pytest.skip(f"{name} not installed")
    return path


async def _run(*argv: str, cwd, env: dict | None = None) -> tuple[int, str]:
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_HOME": str(cwd / ".ansible-home"),
           **(env or {})}  # fmt: skip
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
            assert host.state.machine_id in output


def test_by_default_an_unknown_host_key_is_refused(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text(MINIMAL_SITE)
    found = ssh_vars(load_site(path), load_site(path).nodes[0].ssh)
    assert "-o StrictHostKeyChecking=yes" in found["ansible_ssh_common_args"]
    # ssh expands the ~ itself (the operator's home on the control host).
    assert """-o 'UserKnownHostsFile="~/.ssh/known_hosts"'""" in found["ansible_ssh_common_args"]
    assert found["ansible_host_key_checking"] is True


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
    assert (
        found["ansible_user"] == "ops"
        and found["gnw_become"] is True
        and "ansible_become" not in found
    )
    assert found["ansible_ssh_private_key_file"] == str(folder / "keys/id_ed25519")
    args = found["ansible_ssh_common_args"]
    # Quoted for Ansible's shell-like split (one argument) and inside the value for ssh,
    # which splits UserKnownHostsFile at whitespace into several files.
    assert f"""-o 'UserKnownHostsFile="{folder}/keys/known hosts"'""" in args
    assert args.startswith("-F '{{ inventory_dir }}/ssh_config' ")
    config = (out / "ansible/ssh_config").read_text()
    assert "Host bastion.example\n    HostName bastion.example\n    User jump\n" in config
    assert f'    UserKnownHostsFile "{folder}/keys/known hosts"\n' in config
    assert f'    IdentityFile "{folder}/keys/id_ed25519"\n' in config
    assert "-o StrictHostKeyChecking=accept-new" in args
    assert "-o ProxyJump=jump@bastion.example" in args


SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def _sshd(folder, address: str, client_public: bytes):
    """A real OpenSSH sshd on a loopback address; returns (process, port, host key line)."""
    import socket
    import subprocess
    import time

    import asyncssh

    folder.mkdir()
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    (folder / "host_key").write_bytes(host_key.export_private_key())
    (folder / "host_key").chmod(0o600)
    (folder / "authorized_keys").write_bytes(client_public)
    with socket.socket() as sock:
        sock.bind((address, 0))
        port = sock.getsockname()[1]
    (folder / "sshd_config").write_text(
        f"Port {port}\nListenAddress {address}\nHostKey {folder / 'host_key'}\n"
        f"AuthorizedKeysFile {folder / 'authorized_keys'}\nPidFile {folder / 'sshd.pid'}\n"
        "PermitRootLogin yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "UsePAM no\nStrictModes no\nLogLevel ERROR\nAllowTcpForwarding yes\n"
    )
    process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(folder / "sshd_config")])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection((address, port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    return process, port, f"[{address}]:{port} {host_key.export_public_key().decode()}"


async def test_the_inventory_reaches_a_node_through_a_jump_host_with_the_sites_key_and_known_hosts(
    tmp_path,
):
    """Two real sshd hops: a jump host on 127.0.0.3 and a node on 127.0.0.4. The site's
    key and known_hosts must reach the jump hop too (OpenSSH's implicit ProxyCommand from
    ProxyJump passes it only -l -p -J -F -v), or the jump hop answers "Host key
    verification failed". HOME is empty: nothing comes from ~/.ssh."""
    import getpass

    import asyncssh

    tool = _ansible("ansible")
    if not os.path.exists(SSHD):
        if os.environ.get("CI"):
            pytest.fail("sshd is missing: .ci/run installs openssh-server")
        pytest.skip("OpenSSH server not installed")
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", exist_ok=True)
    site_dir = tmp_path / "site dir"
    site_dir.mkdir()
    key = asyncssh.generate_private_key("ssh-ed25519")
    (site_dir / "id_ed25519").write_bytes(key.export_private_key())
    (site_dir / "id_ed25519").chmod(0o600)
    public = key.export_public_key()
    # HOME empty; ControlPath sockets in a short folder (108-byte limit of sun_path).
    control = tempfile.mkdtemp(prefix="gnw-cp-", dir="/tmp")
    jump, jump_port, jump_line = _sshd(tmp_path / "jump", "127.0.0.3", public)
    node, node_port, node_line = _sshd(tmp_path / "node", "127.0.0.4", public)
    try:
        (site_dir / "known hosts").write_text(jump_line + node_line)
        user = getpass.getuser()
        (site_dir / "site.yaml").write_text(
            MINIMAL_SITE.replace("host: 10.0.0.1", "host: 127.0.0.4").replace(
                "nodes:",
                f"ssh: {{user: {user}, port: {node_port}, key: id_ed25519,"
                f" known_hosts: 'known hosts', proxy_jump: '{user}@127.0.0.3:{jump_port}',"
                " sudo: false}\nnodes:",
                1,
            )
        )
        export(load_site(site_dir / "site.yaml"), build_plan(), tmp_path / "out")
        home = tmp_path / "home"
        home.mkdir()
        env_home = {"HOME": str(home), "ANSIBLE_SSH_CONTROL_PATH_DIR": control}
        status, output = await _run(
            tool, "-i", "ansible/inventory.ini", "gpu_nodes", "-m", "raw", "-a", "echo hop-$((6*7))",
            cwd=tmp_path / "out", env=env_home,
        )  # fmt: skip
        assert status == 0, output
        assert "gpu-1 | CHANGED | rc=0" in output and "hop-42" in output
        assert not (home / ".ssh/known_hosts").exists()
    finally:
        shutil.rmtree(control, ignore_errors=True)
        for process in (jump, node):
            process.terminate()
            process.wait(timeout=5)
