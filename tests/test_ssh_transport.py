"""The SSH transport against the lab's asyncssh server (host keys, auth, reconnects) and
against a real OpenSSH sshd on loopback (exit codes, stderr, quoting, timeouts, a killed
connection)."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import asyncssh
import pytest

from simulator.host import LabHost
from simulator.sshd import LabSshServer
from wizard.site import SshSettings
from wizard.transports.base import (
    AuthenticationError,
    CommandFailedError,
    CommandTimeoutError,
    HostKeyError,
    UnreachableError,
    write_file_command,
)
from wizard.transports.ssh import ConnectionDroppedError, SshHost

ADDRESS = "127.0.0.9"


@pytest.fixture(scope="module")
def client_key() -> asyncssh.SSHKey:
    return asyncssh.generate_private_key("ssh-ed25519")


def _key_file(tmp_path: Path, key: asyncssh.SSHKey) -> Path:
    path = tmp_path / "id_ed25519"
    path.write_bytes(key.export_private_key())
    path.chmod(0o600)
    return path


async def _lab_server(client_key, faults=()) -> LabSshServer:
    host = LabHost("gpu-1", "gpu", "10.10.0.21", "192.168.50.21", faults=set(faults))
    server = LabSshServer(host, ADDRESS, asyncssh.generate_private_key("ssh-ed25519"),
                          client_key.export_public_key().decode())  # fmt: skip
    await server.start()
    return server


def _transport(tmp_path, client_key, server, **settings) -> SshHost:
    known = tmp_path / "known_hosts"
    return SshHost(
        "gpu-1", ADDRESS,
        SshSettings(port=server.port, connect_timeout=5, **settings),
        key_path=_key_file(tmp_path, client_key), known_hosts_path=known, ssh_config=[],
    )  # fmt: skip


def _known_line(server: LabSshServer, key: asyncssh.SSHKey | None = None) -> str:
    key = key or server.host_key
    return f"[{ADDRESS}]:{server.port} {key.export_public_key().decode().strip()}\n"


async def test_unknown_host_key_is_refused_without_tofu(tmp_path, client_key):
    server = await _lab_server(client_key)
    try:
        host = _transport(tmp_path, client_key, server)
        with pytest.raises(HostKeyError, match="unknown"):
            await host.run(["uname", "-r"])
    finally:
        await server.stop()


async def test_trust_on_first_use_records_the_key_then_verifies_it(tmp_path, client_key):
    server = await _lab_server(client_key)
    try:
        host = _transport(tmp_path, client_key, server, trust_on_first_use=True)
        assert (await host.run(["uname", "-m"])).stdout == "x86_64\n"
        await host.close()
        assert (tmp_path / "known_hosts").read_text() == _known_line(server)
        strict = _transport(tmp_path, client_key, server)
        assert (await strict.run(["uname", "-m"])).ok
        await strict.close()
    finally:
        await server.stop()


async def test_changed_host_key_is_always_refused(tmp_path, client_key):
    server = await _lab_server(client_key)
    try:
        (tmp_path / "known_hosts").write_text(
            _known_line(server, asyncssh.generate_private_key("ssh-ed25519"))
        )
        host = _transport(tmp_path, client_key, server, trust_on_first_use=True)
        with pytest.raises(HostKeyError, match="does not match"):
            await host.run(["uname", "-r"])
        assert "ssh-keygen -R" in str(await _error(host.run(["uname"])))
    finally:
        await server.stop()


async def _error(coro) -> Exception:
    try:
        await coro
    except Exception as exc:
        return exc
    raise AssertionError("no error")


async def test_wrong_client_key_is_an_authentication_error(tmp_path, client_key):
    server = await _lab_server(client_key)
    try:
        (tmp_path / "known_hosts").write_text(_known_line(server))
        other = asyncssh.generate_private_key("ssh-ed25519")
        host = _transport(tmp_path, other, server)
        with pytest.raises(AuthenticationError, match=f"root@{ADDRESS}:{server.port}"):
            await host.run(["uname"])
    finally:
        await server.stop()


async def test_closed_port_names_the_address(tmp_path, client_key):
    with socket.socket() as sock:
        sock.bind((ADDRESS, 0))
        port = sock.getsockname()[1]
    host = SshHost("gpu-1", ADDRESS, SshSettings(port=port, connect_timeout=2),
                   known_hosts_path=tmp_path / "kh", ssh_config=[])  # fmt: skip
    with pytest.raises(UnreachableError, match=f"cannot reach root@{ADDRESS}:{port}"):
        await host.run(["true"])


async def test_one_connection_many_concurrent_commands(tmp_path, client_key):
    server = await _lab_server(client_key)
    try:
        (tmp_path / "known_hosts").write_text(_known_line(server))
        host = _transport(tmp_path, client_key, server)
        results = await asyncio.gather(*(host.run(["uname", "-r"]) for _ in range(24)))
        assert all(r.ok for r in results)
        assert len(server._connections) == 1
        await host.close()
    finally:
        await server.stop()


async def test_dropped_connection_reports_then_reconnects(tmp_path, client_key):
    server = await _lab_server(client_key, faults=("ssh-drop",))
    try:
        (tmp_path / "known_hosts").write_text(_known_line(server))
        host = _transport(tmp_path, client_key, server)
        with pytest.raises(ConnectionDroppedError, match="may or may not have completed"):
            await host.run(["cat", "/etc/os-release"])
        assert (await host.run(["uname", "-m"])).stdout == "x86_64\n"
        await host.close()
    finally:
        await server.stop()


async def test_reboot_drops_the_host_and_it_comes_back_with_a_new_boot_id(tmp_path, client_key):
    server = await _lab_server(client_key)
    server.reboot_seconds = 0.5
    try:
        (tmp_path / "known_hosts").write_text(_known_line(server))
        host = _transport(tmp_path, client_key, server)
        before = (await host.run(["cat", "/proc/sys/kernel/random/boot_id"])).stdout
        await host.run(["systemctl", "reboot"])
        await asyncio.sleep(1.0)
        after = (await host.run(["cat", "/proc/sys/kernel/random/boot_id"])).stdout
        assert before != after
        await host.close()
    finally:
        await server.stop()


# -- a real OpenSSH server ---------------------------------------------------------------------

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@contextlib.contextmanager
def _openssh(tmp_path, client_key, extra_config: str = ""):
    """A real OpenSSH sshd on loopback and an SshHost pointed at it."""
    if not os.path.exists(SSHD):
        if os.environ.get("CI"):
            pytest.fail("sshd is missing: .ci/run installs openssh-server")
        pytest.skip("OpenSSH server not installed")
    Path("/run/sshd").mkdir(exist_ok=True) if os.geteuid() == 0 else None
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    (tmp_path / "host_key").write_bytes(host_key.export_private_key())
    (tmp_path / "host_key").chmod(0o600)
    (tmp_path / "authorized_keys").write_bytes(client_key.export_public_key())
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = tmp_path / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp_path / 'host_key'}\n"
        f"AuthorizedKeysFile {tmp_path / 'authorized_keys'}\nPidFile {tmp_path / 'sshd.pid'}\n"
        "PermitRootLogin yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "UsePAM no\nStrictModes no\nLogLevel ERROR\n" + extra_config
    )
    process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    (tmp_path / "known_hosts").write_text(
        f"[127.0.0.1]:{port} {host_key.export_public_key().decode()}"
    )
    host = SshHost(
        "real", "127.0.0.1",
        SshSettings(user=getpass.getuser(), port=port, connect_timeout=5, sudo=False),
        key_path=_key_file(tmp_path, client_key), known_hosts_path=tmp_path / "known_hosts", ssh_config=[],
    )  # fmt: skip
    try:
        yield host
    finally:
        process.terminate()
        process.wait(timeout=5)


@pytest.fixture
def openssh(tmp_path, client_key):
    with _openssh(tmp_path, client_key) as host:
        yield host


async def test_openssh_exit_status_and_stderr(openssh):
    result = await openssh.run("echo out; echo oops >&2; exit 3")
    assert (result.exit_status, result.stdout, result.stderr) == (3, "out\n", "oops\n")
    with pytest.raises(CommandFailedError, match="exited with status 3: oops"):
        await openssh.run("echo oops >&2; exit 3", check=True)
    await openssh.close()


async def test_openssh_odd_arguments_are_quoted(openssh, tmp_path):
    marker = tmp_path / "pwned"
    args = ["a b", "c'd", f"$(touch {marker})", "*", "; rm -rf /", '"q"', "tab\there"]
    result = await openssh.run(["printf", "%s\\n", *args])
    assert result.stdout.splitlines() == args
    assert not marker.exists()
    await openssh.close()


async def test_openssh_streams_lines_and_writes_files(openssh, tmp_path):
    lines: list[tuple[str, str]] = []
    await openssh.run(
        "printf 'one\\ntwo\\n'; echo three >&2",
        on_line=lambda stream, line: lines.append((stream, line)),
    )
    assert (
        ("stdout", "one") in lines and ("stdout", "two") in lines and ("stderr", "three") in lines
    )
    target = tmp_path / "etc" / "irdma.conf"
    target.parent.mkdir()
    await openssh.run(
        write_file_command(str(target), 0o640), stdin="options irdma roce_ena=1\n", check=True
    )
    assert target.read_text() == "options irdma roce_ena=1\n"
    assert oct(target.stat().st_mode & 0o777) == "0o640"
    await openssh.close()


async def test_openssh_prefers_aes_gcm_unless_the_ssh_config_sets_ciphers(openssh, tmp_path):
    connection = await openssh.connection()
    assert connection.get_extra_info("send_cipher") == "aes128-gcm@openssh.com"
    await openssh.close()
    config = tmp_path / "ssh_config"
    config.write_text("Host *\n    Ciphers aes256-ctr\n")
    openssh.ssh_config = [str(config)]
    connection = await openssh.connection()
    assert connection.get_extra_info("send_cipher") == "aes256-ctr"
    await openssh.close()


async def test_openssh_command_timeout(openssh):
    started = time.monotonic()
    with pytest.raises(CommandTimeoutError, match=r"did not finish within 0\.5s"):
        await openssh.run("echo started; sleep 20", timeout=0.5)
    assert time.monotonic() - started < 5
    await openssh.close()


async def test_openssh_connection_killed_mid_command(openssh):
    with pytest.raises(ConnectionDroppedError, match="dropped while running"):
        await openssh.run("echo before; kill -9 $PPID; sleep 5")
    # The next command reconnects.
    assert (await openssh.run(["echo", "back"])).stdout == "back\n"
    await openssh.close()


# -- several reads in one exec (wizard/transports/batch.py) --------------------------------


async def test_openssh_batch_keeps_each_commands_status_and_output(openssh, tmp_path):
    marker = tmp_path / "pwned"
    results = await openssh.run_many(
        [
            "printf 'no newline'",
            "echo oops >&2; exit 3",
            "printf 'GNW-BATCH 0 0 5 5\\nfake\\n'",  # looks like a header: must stay data
            ["printf", "%s\\n", f"$(touch {marker})", "a b"],
            "true",
            "echo $SSH_CONNECTION",
        ]
    )
    assert [r.exit_status for r in results] == [0, 3, 0, 0, 0, 0]
    assert results[0].stdout == "no newline"
    assert (results[1].stdout, results[1].stderr) == ("", "oops\n")
    assert results[2].stdout == "GNW-BATCH 0 0 5 5\nfake\n"
    assert results[3].stdout == f"$(touch {marker})\na b\n" and not marker.exists()
    assert results[4].stdout == results[4].stderr == ""
    assert results[5].stdout.split()[2] == "127.0.0.1"  # the session's own environment
    assert [r.command for r in results][:2] == ["printf 'no newline'", "echo oops >&2; exit 3"]
    await openssh.close()


async def test_openssh_batch_timeout_names_the_command_that_hung(openssh):
    # The limit leaves `echo first` seconds to finish on a loaded machine (CI saw 0.5 s pass
    # with it still running); `sleep 20` is what the limit must catch.
    with pytest.raises(CommandTimeoutError, match=r"`sleep 20` was running, 1 done"):
        await openssh.run_many(["echo first", "sleep 20", "echo never"], timeout=4)
    await openssh.close()


async def test_batch_falls_back_to_one_exec_each_without_a_scratch_directory(tmp_path, client_key):
    # mktemp -d fails when TMPDIR does not exist: the commands still run, one by one.
    with _openssh(tmp_path, client_key, "SetEnv TMPDIR=/nonexistent-gnw\n") as host:
        probe = await host.run("mktemp -d")
        assert probe.exit_status != 0  # the premise: no scratch directory
        results = await host.run_many(["echo one", "echo two >&2; exit 4"])
        assert [(r.exit_status, r.stdout, r.stderr) for r in results] == [
            (0, "one\n", ""), (4, "", "two\n")]  # fmt: skip
        await host.close()


async def test_lab_answers_a_batch_like_a_shell(tmp_path, client_key):
    server = await _lab_server(client_key)
    (tmp_path / "known_hosts").write_text(_known_line(server))
    host = _transport(tmp_path, client_key, server)
    results = await host.run_many(["uname -r", "nosuchcommand", ["cat", "/etc/os-release"]])
    assert server.host.commands[-3:] == ["uname -r", "nosuchcommand", "cat /etc/os-release"]
    alone = [server.host.execute(c) for c in ("uname -r", "cat /etc/os-release")]
    # Each command's share of the batch is what the host answers to it on its own.
    assert (results[0].exit_status, results[0].stdout) == (0, alone[0].stdout)
    assert results[1].exit_status == 127 and "command not found" in results[1].stderr
    assert results[2].stdout == alone[1].stdout and "VERSION_ID" in results[2].stdout
    await host.close()
    await server.stop()
