"""A real POSIX shell for the lab's hosts: every command the wizard sends over SSH and
every script it exports or installs runs in this machine's ``/bin/sh``, as on a real host.

The shell's ``PATH`` holds only the host's tools (simulator/shim.py): every external
command (``dcb``, ``ip``, ``rdma``, ``nmcli``, ``cat``, ``tee``, ``mkdir`` ...) is a tiny
program that hands its argv (and its stdin, when the tool reads stdin) to this process
over a Unix socket, where the simulated host's ``cmd_<name>`` handler answers it
(simulator/host/dispatch.py); ``sh`` is the real shell, ``sudo`` and ``timeout`` small
scripts that run the rest of their command line. Shell syntax (``;``, pipes, ``$(...)``,
loops, ``set -e``, traps, ``sh -s < script``) and quoting are the real shell's own.

The wizard's fixed transport scripts (write a file, write a value, the probe batch, the
driver-root ``nvidia-smi``) are interpreted in-process, as they always were: a fleet's
probes are thousands of commands, and a shell plus a tool per command costs about 2 ms
of CPU against 0.05 ms in-process (measured in the commit that added this; the batch
script's own framing is judged by a real sshd in tests/test_ssh_transport.py).

Each host's shell runs in a filesystem view of its own when bubblewrap is here
(simulator/rootfs.py): its ``/etc`` and ``/usr/local`` are a per-host folder kept equal to
the host model's files, the rest of the machine is read-only, so a real program (Ansible's
Python modules, OpenSSH's sftp-server, coreutils' ``chmod``/``rm``/``dd``, which are on
PATH after the host's tools) changes only that host, and the model sees what it wrote.
``mkdir``/``rmdir`` outside configfs are then the real ones too (the shim is told to exec
them). Without bubblewrap (or with ``GNW_LAB_SANDBOX=0``, to compare) there is no view:
only the model's tools are on PATH. The view costs about 5 ms of CPU per shell (bwrap's
namespace setup: 10.7 against 5.3 ms per one-tool shell, measured on this loaded 2-core
machine).

Either way the shell runs as ``nobody`` when the lab runs as root, in a home folder of its
own per host, and a script run by ``run`` that redirects output into a file (``>
/sys/...``) is refused before it runs, since a write into /sys or /proc would bypass the
host model. Scripts write values with ``tee`` (``printf '%s\\n' 96 | tee PATH
>/dev/null``), which the model answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import shutil
import signal
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import asyncssh

from simulator.rootfs import BWRAP, HostRoot, bwrap_available
from simulator.scratch import scratch_dir
from simulator.shim import RUNAS, install_shims

if TYPE_CHECKING:
    from simulator.host import LabHost

# A redirection into a file other than /dev/null (``> x``, ``>> x``, ``2> x``); ``>&2`` and
# ``2>&1`` are fine.
_FILE_REDIRECT = re.compile(r"(?<![<>&0-9])\d?>{1,2}\s*(?!&|/dev/null\b)[^\s;|&)]+")

# Commands a host has beyond the model's own cmd_* handlers (answered by a special route
# or the model's generic handling).
_EXTRA_COMMANDS = ("tee", "sleep", "test-ok", *("wc", "head", "tail", "sort", "cut", "tr", "uniq"), "pkill", "iperf3", "ib_write_bw", "ib_read_bw",
                   "ib_send_bw", "ib_write_lat", "ib_read_lat", "ib_send_lat")  # fmt: skip

# sudo(8) and timeout(1) as the host's: run the rest of the command line (the lab's time
# is simulated, so timeout never fires; its duration is checked to be a number).
# sudo with the sudoers default ``env_reset`` (sudoers(5), "Command environment": the
# command runs in a new environment of TERM, PATH, HOME, MAIL, SHELL, LOGNAME, USER and
# the SUDO_* variables, plus env_keep, which on RHEL 9 and Ubuntu 22.04 has no SSH_*
# variable): the caller's SSH_CONNECTION, TMPDIR, LC_ALL and the rest are gone. PATH stays
# the lab's (a real host's secure_path names the same folders, where the tools are) and
# GNW_LAB_* is the lab's plumbing to its tools, not the caller's environment.
_SUDO = """#!/bin/sh
while [ $# -gt 0 ]; do
    case $1 in
        -u|-g|-p|-C|-h) shift 2 ;;
        --) shift; break ;;
        -*) shift ;;
        *) break ;;
    esac
done
exec /usr/bin/env -i ${TERM+"TERM=$TERM"} "PATH=$PATH" "HOME=$HOME" "SHELL=/bin/sh" \\
    "MAIL=/var/mail/root" "LOGNAME=root" "USER=root" "SUDO_USER=${USER:-root}" \\
    "SUDO_COMMAND=$*" \\
    "GNW_LAB_HOST=$GNW_LAB_HOST" "GNW_LAB_SOCKET=$GNW_LAB_SOCKET" "$@"
"""
_TIMEOUT = """#!/bin/sh
while [ $# -gt 0 ]; do
    case $1 in
        -s|-k) shift 2 ;;
        --) shift; break ;;
        -*) shift ;;
        *) break ;;
    esac
done
case $1 in ''|*[!0-9.smhd]*) echo "timeout: invalid time interval '$1'" >&2; exit 125 ;; esac
shift
exec "$@"
"""

# Tools that read stdin when given no file operand (the shim then sends it; any other
# tool leaves stdin alone, as the real one would, so `sh -s < script` keeps its script).
_READS_STDIN = {"cat", "wc", "head", "tail", "sort", "cut", "tr", "uniq", "base64", "sha256sum",
                "md5sum"}  # fmt: skip
_NOBODY = 65534
# Pure text filters: given only stdin they touch nothing of the host, so the machine's own
# (coreutils, grep) filter it, exactly; with file operands the host model answers.
_TEXT_FILTERS = ("grep", "wc", "head", "tail", "sort", "cut", "tr", "uniq")
_FILTER_PATH = "/usr/bin:/bin"
# The machine's own programs on a sandboxed host's PATH, after the host's tools: they act
# only on the host's view (simulator/rootfs.py). What Ansible runs besides its modules
# (``chmod u+x``, ``rm -f -r`` of its temp folder, ``dd`` for a piped transfer), and the
# remote Python its modules need (the machine's python3).
_REAL_TOOLS = ("chmod", "rm", "dd", "mv", "cp", "ln", "touch", "stat", "mktemp",
               "readlink", "dirname", "basename", "id", "whoami", "python3")  # fmt: skip
# Where OpenSSH's sftp-server is (Debian/Ubuntu, RHEL).
SFTP_SERVERS = ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server")
# Tools whose file operands outside configfs are the view's (the real tool runs them).
_REAL_OUTSIDE_SYSFS = ("mkdir", "rmdir")

Special = Callable[[list[str]], Awaitable[tuple[str, str, int] | None]]


class StdinSource(Protocol):
    """An SSH channel's stdin (asyncssh's reader): chunks until EOF (empty)."""

    async def read(self, n: int = -1) -> str | bytes: ...


@dataclass
class ScriptResult:
    exit_status: int
    stdout: str
    stderr: str


def reads_stdin(argv: list[str]) -> bool:
    """Whether the real tool would read its stdin for this argv."""
    name, operands = argv[0], [a for a in argv[1:] if not a.startswith("-") or a == "-"]
    if name == "tee":
        return True
    if name == "grep":
        return len(operands) <= 1 or "-" in operands[1:]
    return name in _READS_STDIN and (not operands or "-" in operands)


def file_redirect(script: str) -> str | None:
    """The first redirection into a file in ``script`` (comments aside), if any."""
    for line in script.splitlines():
        if line.lstrip().startswith("#"):
            continue
        if match := _FILE_REDIRECT.search(line):
            return match.group(0)
    return None


class LabShell:
    """One socket and one folder of tools, shared by every host of a lab."""

    def __init__(self, hosts: dict[str, LabHost]) -> None:
        self.hosts = hosts
        # Unix socket paths are limited to ~107 bytes: a short folder of its own.
        self.folder = scratch_dir("gnw-sh-")  # a killed lab's is swept (scratch.py)
        self.socket = self.folder / "host.sock"
        self.bin = self.folder / "bin"
        self.homes = self.folder / "home"
        self.tools = self.folder / "tools"  # the machine's programs (_REAL_TOOLS), sandboxed
        self.roots_folder = self.folder / "roots"
        self.roots: dict[str, HostRoot] = {}
        self.sandbox = False  # bubblewrap works here (decided in start)
        self.kind = ""  # "c" or "python": which shim answers (simulator/shim.py)
        # Commands answered by an asynchronous route instead of the model's handler (the
        # benchmarks pair up across hosts through the lab's broker), per host.
        self.special: dict[str, Special] = {}
        self._drop = os.geteuid() == 0  # run the shell as nobody (see the module doc)
        self.shells = 0  # how many shells ran (benchmarks/run.py reports it)
        # Every tool call, as (host, argv), and a kill of the calling shell (SIGKILL to its
        # process group, before the tool answers) at call number ``kill_at``: what a
        # crash mid-script leaves, for the exported scripts' kill tests.
        self.calls: list[tuple[str, list[str]]] = []
        self.kill_at: int | None = None
        self.kill_signal: int = signal.SIGKILL  # or SIGTERM / SIGHUP: a kill the shell sees
        # Or, at call number ``drop_at``, the session goes away (``run_dropped``): what the
        # call does then, before the tool answers.
        self.drop_at: int | None = None
        self._drop_session: Callable[[], None] | None = None
        self._groups: dict[str, int] = {}
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        from simulator.host import LabHost

        self.bin.mkdir()
        self.homes.mkdir()
        self.roots_folder.mkdir()
        from simulator.host.dispatch import LAB_TOOLS

        names = {n[4:] for kind in LabHost.ANSWERING for n in dir(kind) if n.startswith("cmd_")}
        names |= set(_EXTRA_COMMANDS)
        names |= set(LAB_TOOLS)  # the tools registered for a Command (@lab_tool)
        names = {spelling for n in names for spelling in (n, n.replace("_", "-"))}
        names -= {"sh", "sudo", "timeout"}
        self.kind = install_shims(self.bin, names)
        (self.bin / "sh").symlink_to("/bin/sh")
        for name, text in (("sudo", _SUDO), ("timeout", _TIMEOUT)):
            (self.bin / name).write_text(text)
            (self.bin / name).chmod(0o755)
        self.sandbox = await self._sandbox_works()
        if self.sandbox:
            self.tools.mkdir()
            for name in _REAL_TOOLS:
                found = shutil.which(name, path=_FILTER_PATH)
                if found is not None:
                    (self.tools / name).symlink_to(os.path.realpath(found))
        self._server = await asyncio.start_unix_server(
            self._serve, path=str(self.socket), limit=64 * 1024 * 1024
        )
        if self._drop:
            # nobody reaches the tools and the socket, nothing else of the lab's folder.
            os.chmod(self.folder, 0o711)
            os.chmod(self.homes, 0o711)
            # The socket is the shells' user's alone (not 0666: any local user could
            # otherwise ask a host's model to answer).
            os.chown(self.socket, _NOBODY, -1)
            os.chmod(self.socket, 0o600)

    async def _sandbox_works(self) -> bool:
        """bubblewrap is installed and may make a mount namespace here (the C shim's
        launcher drops to nobody inside it; the Python stand-in has none)."""
        if not bwrap_available() or self.kind != "c" or os.environ.get("GNW_LAB_SANDBOX") == "0":
            return False
        process = await asyncio.create_subprocess_exec(
            BWRAP, "--ro-bind", "/", "/", "--", "/bin/true",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        return await process.wait() == 0

    def root(self, host: LabHost) -> HostRoot | None:
        """The host's filesystem view (made at its first shell), or None without sandbox."""
        if not self.sandbox:
            return None
        root = self.roots.get(host.name)
        if root is None:
            root = HostRoot(host, self.roots_folder / host.name, self._drop)
            root.create()
            self.roots[host.name] = root
        return root

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        shutil.rmtree(self.folder, ignore_errors=True)

    # -- the tools' requests ------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            count = int((await reader.readuntil(b"\0"))[:-1])
            host_name = (await reader.readuntil(b"\0"))[:-1].decode()
            argv = [
                (await reader.readuntil(b"\0"))[:-1].decode(errors="surrogateescape")
                for _ in range(count)
            ]
            self.calls.append((host_name, argv))
            if self.kill_at is not None and len(self.calls) == self.kill_at:
                with contextlib.suppress(KeyError, ProcessLookupError, PermissionError):
                    os.killpg(self.process_group(host_name), self.kill_signal)
                writer.close()
                return
            if len(self.calls) == self.drop_at and self._drop_session is not None:
                self._drop_session()
            root = self.roots.get(host_name)
            real = self._real_tool(argv) if root is not None else None
            if real is not None:
                # The view's own directories: the real tool makes them (simulator/rootfs.py).
                writer.write(b"R" + real.encode() + b"\0")
                await writer.drain()
                writer.close()
                return
            wants = reads_stdin(argv)
            writer.write(b"I" if wants else b"N")
            await writer.drain()
            data = await reader.read()
            if root is not None:
                root.pull()  # what a real program wrote before this call
            out, err, status = await self._answer(host_name, argv, data.decode(errors="replace"))
            if root is not None:
                root.push()  # what the model changed, for the real programs after it
        except Exception as exc:
            out, err, status = "", f"lab shell: {type(exc).__name__}: {exc}\n", 127
        body_out, body_err = out.encode(), err.encode()
        writer.write(f"{status} {len(body_out)} {len(body_err)}\n".encode() + body_out + body_err)
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()

    def process_group(self, host_name: str) -> int:
        """The process group of the host's running shell: the spawned process's own, or,
        in a sandbox, that of bwrap's child (bwrap --new-session; Linux lists a process's
        children in /proc/PID/task/PID/children)."""
        pid = self._groups[host_name]
        if host_name in self.roots:
            with contextlib.suppress(OSError, ValueError):
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
                if children:
                    return os.getpgid(int(children[0]))
        return pid

    @staticmethod
    def _real_tool(argv: list[str]) -> str | None:
        """The machine's program for this call when it acts on the view, not the model."""
        if argv[0] not in _REAL_OUTSIDE_SYSFS:
            return None
        if any(a.startswith("/sys/") for a in argv[1:]):
            return None
        return shutil.which(argv[0], path=_FILTER_PATH)

    async def _answer(self, host_name: str, argv: list[str], stdin: str) -> tuple[str, str, int]:
        special = self.special.get(host_name)
        if special is not None and (answer := await special(argv)) is not None:
            return answer
        if argv[0] in _TEXT_FILTERS and reads_stdin(argv):
            tool = shutil.which(argv[0], path=_FILTER_PATH)
            if tool is not None:
                return await self._filter([tool, *argv[1:]], stdin)
        result = self.hosts[host_name].dispatch.run_argv(argv, stdin)
        return result.stdout, result.stderr, result.exit_status

    async def _filter(self, argv: list[str], stdin: str) -> tuple[str, str, int]:
        process = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env={"LC_ALL": "C", "PATH": _FILTER_PATH},
        )  # fmt: skip
        out, err = await process.communicate(stdin.encode())
        name = os.path.basename(argv[0])
        return (
            out.decode(errors="replace"),
            err.decode(errors="replace").replace(argv[0], name),
            (process.returncode or 0),
        )

    # -- running --------------------------------------------------------------------------------

    def _home(self, host: LabHost) -> Path:
        home = self.homes / host.name
        if not home.exists():
            home.mkdir(mode=0o700)
            if self._drop:
                os.chown(home, _NOBODY, _NOBODY)
        return home

    async def _spawn(
        self, host: LabHost, argv: list[str], stdin: bytes | StdinSource | None,
        env: dict[str, str],
        timeout: float,
    ) -> ScriptResult:  # fmt: skip
        argv, home, full_env, drop, root = self._prepare(host, argv, env)
        try:
            return await self._wait(host, argv, home, full_env, stdin, timeout, drop)
        finally:
            if root is not None:
                root.pull()

    def _prepare(
        self, host: LabHost, argv: list[str], env: dict[str, str]
    ) -> tuple[list[str], Path, dict[str, str], dict, HostRoot | None]:
        """The command line, home, environment and user of a host's shell."""
        self.shells += 1
        home = self._home(host)
        root = self.root(host)
        path = f"{self.bin}:{self.tools}" if root is not None else str(self.bin)
        full_env = {"PATH": path, "GNW_LAB_HOST": host.name,
                    "GNW_LAB_SOCKET": str(self.socket), "HOME": str(home), "TMPDIR": str(home),
                    "USER": "root", "LOGNAME": "root", "LC_ALL": "C", **env}  # fmt: skip
        drop: dict = {}
        if self._drop:
            # Through the C shim's launcher (an exec that drops to nobody) when there is
            # one: Popen's user= forces a fork of this big process instead of a vfork.
            runas = self.bin / RUNAS
            if runas.exists():
                argv = [str(runas), *argv]
            else:
                drop = {"user": _NOBODY, "group": _NOBODY, "extra_groups": []}
        if root is not None:
            root.push()
            argv = [*root.bwrap_argv(home), *argv]
        return argv, home, full_env, drop, root

    async def _wait(
        self, host: LabHost, argv: list[str], home: Path, full_env: dict[str, str],
        stdin: bytes | StdinSource | None, timeout: float, drop: dict,
    ) -> ScriptResult:  # fmt: skip
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=home, env=full_env,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True, **drop,
        )  # fmt: skip
        self._groups[host.name] = process.pid
        try:
            if isinstance(stdin, bytes) or stdin is None:
                out, err = await asyncio.wait_for(process.communicate(stdin), timeout)
            else:
                out, err = await asyncio.wait_for(self._stream(process, stdin), timeout)
        except TimeoutError:
            process.kill()
            await process.wait()
            return ScriptResult(124, "", f"lab shell: ran over {timeout:g}s\n")
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise
        return ScriptResult(process.returncode or 0, out.decode(errors="replace"),
                            err.decode(errors="replace"))  # fmt: skip

    @staticmethod
    async def _stream(
        process: asyncio.subprocess.Process, source: StdinSource
    ) -> tuple[bytes, bytes]:
        """As sshd does: the channel's stdin fed to the command while it runs (a client
        such as Ansible's may keep it open until the command ends)."""
        assert process.stdin is not None and process.stdout and process.stderr

        async def pump() -> None:
            try:
                while chunk := await source.read(65536):
                    process.stdin.write(chunk.encode() if isinstance(chunk, str) else chunk)
                    await process.stdin.drain()
            except (OSError, asyncssh.Error):
                pass
            finally:
                with contextlib.suppress(OSError):
                    process.stdin.close()

        feeding = asyncio.get_running_loop().create_task(pump())
        try:
            out, err = await asyncio.gather(process.stdout.read(), process.stderr.read())
            await process.wait()
        finally:
            feeding.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feeding
        return out, err

    async def sftp(self, host: LabHost, process: asyncssh.SSHServerProcess) -> int | None:
        """What sshd does with the ``sftp`` subsystem (sshd_config(5) ``Subsystem sftp
        /usr/lib/openssh/sftp-server``): OpenSSH's own sftp-server, in the host's view and
        as the shell's user, on the channel's bytes (the session set no encoding). None
        without a view (the host then has no sftp, as before)."""
        server = next((p for p in SFTP_SERVERS if os.access(p, os.X_OK)), None)
        root = self.root(host)
        if root is None or server is None:
            return None
        home = self._home(host)
        env = {"PATH": f"{self.bin}:{self.tools}", "HOME": str(home), "LC_ALL": "C",
               "GNW_LAB_HOST": host.name, "GNW_LAB_SOCKET": str(self.socket)}  # fmt: skip
        argv = [server]
        if self._drop:
            argv = [str(self.bin / RUNAS), *argv]
        root.push()
        child = await asyncio.create_subprocess_exec(
            *root.bwrap_argv(home), *argv, cwd=home, env=env, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        assert child.stdin is not None and child.stdout is not None

        async def inbound() -> None:
            try:
                while chunk := await process.stdin.read(65536):
                    child.stdin.write(chunk)
                    await child.stdin.drain()
            except (OSError, asyncssh.Error):
                pass
            finally:
                with contextlib.suppress(OSError):
                    child.stdin.close()

        feeding = asyncio.get_running_loop().create_task(inbound())
        try:
            while chunk := await child.stdout.read(65536):
                process.stdout.write(chunk)
            return await child.wait()
        finally:
            feeding.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feeding
            if child.returncode is None:
                child.kill()
                await child.wait()
            root.pull()

    async def exec(
        self, host: LabHost, command: str, stdin: bytes | StdinSource | None = None, *,
        env: dict[str, str] | None = None, timeout: float = 3600,
    ) -> ScriptResult:  # fmt: skip
        """What sshd does with an exec request: ``sh -c COMMAND`` in the user's home."""
        return await self._spawn(host, ["/bin/sh", "-c", command], stdin, env or {}, timeout)

    async def run(
        self, host: LabHost, script: str, *args: str, timeout: float = 60, shell: str = "/bin/sh"
    ) -> ScriptResult:
        """Run ``script`` on ``host`` in /bin/sh (or ``shell``), as the host's own shell would."""
        redirect = file_redirect(script)
        if redirect is not None:
            return ScriptResult(126, "", f"lab shell: refused, the script writes a file with "
                                          f"`{redirect}` (use tee)\n")  # fmt: skip
        home = self._home(host)
        with tempfile.NamedTemporaryFile("w", dir=home, suffix=".sh", delete=False) as file:
            file.write(script)
        os.chmod(file.name, 0o644)
        try:
            return await self._spawn(host, [shell, file.name, *args], None, {}, timeout)
        finally:
            os.unlink(file.name)

    async def run_dropped(
        self, host: LabHost, script: str, at: int, *, tty: bool, shell: str = "/bin/sh",
        timeout: float = 60,
    ) -> ScriptResult:  # fmt: skip
        """Run ``script`` with its stdout and stderr on the SSH session, which goes away at
        tool call number ``at``: its reader is closed, as when a connection drops.

        Without a pty (``ssh node 'sh -s' < script``) the script's output is a pipe whose
        reader is gone: OpenSSH's session.c ``session_close_by_channel`` closes the
        child's fds and sends no signal, so the next write is SIGPIPE (pipe(7)). With a
        pty (ansible-core's ssh plugin runs a script with ``-tt``) the master is closed:
        the kernel hangs the terminal up, sends SIGHUP to the foreground process group
        (drivers/tty/tty_jobctrl.c ``tty_signal_session_leader``, pty.c ``pty_close``)
        and every later write fails with EIO. The shell runs in its own session here
        (bwrap --new-session), so the test delivers that SIGHUP itself. What the script
        wrote before the drop is returned; its exit status is the shell's."""
        redirect = file_redirect(script)
        assert redirect is None, redirect
        home = self._home(host)
        with tempfile.NamedTemporaryFile("w", dir=home, suffix=".sh", delete=False) as file:
            file.write(script)
        os.chmod(file.name, 0o644)
        argv, home, env, drop, root = self._prepare(host, [shell, file.name], {})
        reader, writer = os.openpty() if tty else os.pipe()
        loop = asyncio.get_running_loop()
        seen = bytearray()
        open_fds = {reader}

        def readable() -> None:
            try:
                chunk = os.read(reader, 65536)
            except OSError:  # EIO: a pty whose slave side is closed
                chunk = b""
            seen.extend(chunk)
            if not chunk:
                loop.remove_reader(reader)

        def drop_session() -> None:
            if reader in open_fds:
                loop.remove_reader(reader)
                os.close(reader)
                open_fds.discard(reader)
            if tty:
                with contextlib.suppress(KeyError, ProcessLookupError, PermissionError):
                    os.killpg(self.process_group(host.name), signal.SIGHUP)

        loop.add_reader(reader, readable)
        self.drop_at, self._drop_session = at, drop_session
        try:
            try:
                process = await asyncio.create_subprocess_exec(
                    *argv, cwd=home, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=writer,
                    stderr=writer, start_new_session=True, **drop,
                )  # fmt: skip
            finally:
                os.close(writer)
            self._groups[host.name] = process.pid
            status = await asyncio.wait_for(process.wait(), timeout)
        finally:
            self.drop_at, self._drop_session = None, None
            for fd in open_fds:
                loop.remove_reader(fd)
                os.close(fd)
            os.unlink(file.name)
            if root is not None:
                root.pull()
        return ScriptResult(status, "", seen.decode(errors="replace"))

    async def boot(self, host: LabHost) -> list[ScriptResult]:
        """What systemd does at boot: the enabled oneshot units ordered before the network
        (``Before=network-pre.target``) run first, then the network comes up (the bond
        forms), then the others (``After=network-online.target``), each ExecStart in turn."""
        early, late = [], []
        for unit in sorted(host.state.enabled_units):
            text = host.files.get(f"/etc/systemd/system/{unit}", "")
            (early if "network-pre.target" in _directive(text, "Before") else late).append(
                (unit, text)
            )
        failed: set[str] = set()
        results = [await self._unit(host, unit, text, failed) for unit, text in early]
        host.network.form_bond()
        results += [await self._unit(host, unit, text, failed) for unit, text in late]
        return [r for r in results if r is not None]

    async def _unit(
        self, host: LabHost, unit: str, text: str, failed: set[str]
    ) -> ScriptResult | None:
        """One unit's start. A unit that ``Requires=`` and is ordered ``After=`` a unit that
        failed is not started: systemd.unit(5) "Requires=": "If one of the other units
        fails to activate, and an ordering dependency After= on the failing unit is set,
        this unit will not be started" (its job ends with result "dependency")."""
        start = _directive(text, "ExecStart")
        command = shlex.split(start) if start else []
        if not command:
            return None
        after = _directive(text, "After").split()
        broken = [u for u in _directive(text, "Requires").split() if u in failed and u in after]
        if broken:
            failed.add(unit)
            host.state.boot_log.append({"unit": unit, "exit": None, "result": "dependency",
                                  "stdout": "", "stderr": f"dependency failed: {broken[0]}\n"})  # fmt: skip
            return None
        result = await self.run(host, host.files.get(command[0], ""), *command[1:])
        if result.exit_status != 0:
            failed.add(unit)
        host.state.boot_log.append(
            {
                "unit": unit,
                "exit": result.exit_status,
                "stdout": result.stdout,
                "stderr": result.stderr,
            }
        )
        return result


def _directive(unit_text: str, key: str) -> str:
    """The values of ``key=`` lines of a unit file, joined by spaces."""
    return " ".join(
        line.split("=", 1)[1].strip()
        for line in unit_text.splitlines()
        if line.strip().startswith(f"{key}=")
    )
