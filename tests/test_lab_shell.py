"""The lab's hosts run every command in this machine's real /bin/sh (simulator/shell.py),
with the host's tools on PATH answered by the host model (simulator/shim.py): shell
syntax, quoting and `sh -s < script` behave as on a real host, over the lab's SSH."""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import subprocess

import pytest

from simulator.lab import Lab
from simulator.shell import reads_stdin


@pytest.fixture
async def lab(tmp_path):
    async with Lab(tmp_path / "lab") as lab:
        yield lab


def _ssh_argv(lab, host: str) -> list[str]:
    ssh = shutil.which("ssh")
    if ssh is None:
        if os.environ.get("CI"):
            pytest.fail("ssh is missing: .ci/run installs openssh")
        pytest.skip("ssh not installed")
    server = lab.servers[host]
    return [ssh, "-F", "none", "-p", str(server.port), "-i", str(lab.directory / "id_ed25519"),
            "-o", f"UserKnownHostsFile={lab.directory / 'known_hosts'}",
            "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", f"root@{server.address}"]  # fmt: skip


async def _ssh(lab, command: str, stdin: str = "", host: str = "gpu-b300-01"):
    """OpenSSH's own client, as an operator types it."""
    process = await asyncio.create_subprocess_exec(
        *_ssh_argv(lab, host), command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(stdin.encode()), 60)
    return process.returncode, out.decode(), err.decode()


async def test_pipes_substitution_loops_and_exit_status_are_the_shells(lab):
    status, out, err = await _ssh(
        lab,
        'for port in ens5f0np0 ens5f1np1; do printf "%s=%s\\n" "$port" '
        '"$(ethtool -i "$port" | grep ^driver)"; done; dcb pfc show dev nosuch; echo "rc=$?"',
    )
    assert status == 0, err
    assert out.splitlines()[:2] == ["ens5f0np0=driver: ice", "ens5f1np1=driver: ice"]
    assert out.splitlines()[-1] != "rc=0"  # the model's error status reached the shell


async def test_a_script_fed_on_stdin_runs_with_set_e_and_traps(lab):
    script = (
        "set -eu\n"
        "trap 'echo cleanup ran >&2' EXIT\n"
        "uname -r\n"
        "modprobe no_such_module\n"
        "echo not reached\n"
    )
    status, out, err = await _ssh(lab, "sh -s", script)
    assert status != 0
    assert out.strip() == lab.hosts["gpu-b300-01"].state.kernel
    assert "not reached" not in out
    assert "cleanup ran" in err and "no_such_module" in err


async def test_odd_arguments_reach_the_tool_as_one_word_each(lab):
    """What the wizard quotes is parsed by a real shell, not by the lab's own split."""
    value = "a b'c\"d $HOME `x` ;|&"
    status, out, _ = await _ssh(lab, shlex.join(["echo", value]))
    assert (status, out) == (0, value + "\n")
    status, out, _ = await _ssh(lab, "printf '%s\\n' " + shlex.quote(value) + " | tee /dev/null")
    assert (status, out) == (0, value + "\n")


async def test_an_unknown_command_is_the_shells_not_found(lab):
    status, _, err = await _ssh(lab, "no-such-tool --version")
    assert status == 127 and "not found" in err


async def test_nothing_reaches_this_machines_files(lab, tmp_path):
    """The shell runs as nobody when the lab runs as root, and in the host's own view of
    /etc when bubblewrap is here (simulator/rootfs.py): a redirection into /etc lands in
    the host's model, or is refused by the kernel; the rest of the machine is read-only.
    Either way this machine's files are not written."""
    if os.geteuid() != 0:
        pytest.skip("only as root is there something to protect")
    status, _, err = await _ssh(lab, "echo x > /etc/gnw-lab-should-not-exist")
    if lab.shell.sandbox:
        assert status == 0, err
        assert lab.hosts["gpu-b300-01"].files["/etc/gnw-lab-should-not-exist"] == "x\n"
        status, _, err = await _ssh(lab, "echo x > /usr/gnw-lab-should-not-exist")
        assert status != 0 and "Read-only file system" in err
    else:
        assert status != 0 and "Permission denied" in err
    assert not os.path.exists("/etc/gnw-lab-should-not-exist")
    assert not os.path.exists("/usr/gnw-lab-should-not-exist")


def test_only_tools_that_read_stdin_get_it():
    assert reads_stdin(["tee", "/x"]) and reads_stdin(["cat"]) and reads_stdin(["grep", "x"])
    assert not reads_stdin(["cat", "/etc/os-release"]) and not reads_stdin(["grep", "x", "/f"])
    assert not reads_stdin(["dcb", "ets", "show", "dev", "p"])


@pytest.mark.parametrize("kind", ["c", "python"])
async def test_both_shims_speak_the_same_protocol(monkeypatch, kind):
    """The C shim (with cc) and the Python stand-in (without) give the same answers:
    argv, stdin only for a tool that reads it, stdout, stderr and the exit status."""
    from simulator.host import LabHost
    from simulator.shell import LabShell

    if kind == "c" and shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler")
    monkeypatch.setenv("GNW_LAB_SHIM", kind)
    host = LabHost("gpu-1", "gpu", "10.0.0.1", "192.168.50.1")
    shell = LabShell({host.name: host})
    await shell.start()
    try:
        assert shell.kind == kind
        ran = await shell.exec(host, "printf '%s\\n' 'a b' | tee /dev/null; cat /nope; echo $?")
        assert ran.stdout == "a b\n1\n" and "No such file" in ran.stderr
        ran = await shell.exec(host, "uname -r", b"")
        assert ran.stdout == host.state.kernel + "\n"
    finally:
        await shell.stop()


async def test_the_tools_socket_is_only_for_the_shells_user():
    """Under root the lab's shells run as nobody; the socket that answers their tool calls
    is nobody's, mode 0600, not open to every local user."""
    from simulator.shell import LabShell

    if os.geteuid() != 0:
        pytest.skip("the lab drops to nobody only when it runs as root")
    shell = LabShell({})
    await shell.start()
    try:
        info = os.stat(shell.socket)
        assert (info.st_mode & 0o777, info.st_uid) == (0o600, 65534)
    finally:
        await shell.stop()
