"""An asyncssh server on loopback in front of one simulated host.

Keys are generated in memory; only the lab's client key is authorised. Faults that live
in the transport (slow SSH, a connection dropped mid-command, a reboot that takes the
host away for a while) are played here.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect

import asyncssh
from asyncssh.constants import EXTENDED_DATA_STDERR
from asyncssh.stream import SSHReader, SSHWriter

from simulator.effects import EffectLog, changes_host
from simulator.host import LabHost, Result
from simulator.host.dispatch import in_process
from simulator.perf import (
    PERFTEST,
    Broker,
    check_iperf3_args,
    iperf3_bitrate,
    iperf3_json,
    run_perftest,
    split_prefixes,
)
from simulator.shell import LabShell
from wizard.transports.base import WRITE_FILE_SCRIPT

SLOW_SSH_DELAY_S = 1.0


class _LabSession(asyncssh.SSHServerProcess):
    """A session that takes the ``sftp`` subsystem as a process, which the host's shell
    serves with OpenSSH's sftp-server (LabShell.sftp)."""

    def subsystem_requested(self, subsystem: str) -> bool:
        return subsystem == "sftp"

    def session_started(self) -> None:
        # asyncssh would start its own SFTP server for "sftp"; the process handler instead
        # (what its session_started does for a command).
        chan = self._chan
        if chan is None or chan.get_subsystem() != "sftp" or self._session_factory is None:
            super().session_started()
            return
        chan.set_encoding(None)  # the SFTP protocol is bytes (before any data is read)
        self._encoding = None  # the stream session's copy of it
        stdin = SSHReader(self, chan)
        handler = self._session_factory(
            stdin, SSHWriter(self, chan), SSHWriter(self, chan, EXTENDED_DATA_STDERR)
        )
        if inspect.isawaitable(handler) and self._conn is not None:
            self._conn.create_task(handler, stdin.logger)


class LabSshServer:
    def __init__(
        self,
        host: LabHost,
        address: str,
        host_key: asyncssh.SSHKey,
        client_public_key: str,
        *,
        reboot_seconds: float = 2.0,
        slow_seconds: float = SLOW_SSH_DELAY_S,
        broker: Broker | None = None,
        effects: EffectLog | None = None,
        shell: LabShell | None = None,
    ) -> None:
        self.broker = broker
        self.effects = effects
        self.shell = shell
        if shell is not None:
            shell.special[host.name] = self._benchmark
        self.slow_seconds = slow_seconds
        self.host = host
        self.address = address
        self.host_key = host_key
        self.client_public_key = client_public_key
        self.reboot_seconds = reboot_seconds
        self.port = 0
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self._connections: set[asyncssh.SSHServerConnection] = set()
        self._drop_pending = "ssh-drop" in host.faults
        self._reboot_task: asyncio.Task | None = None

    async def start(self, port: int = 0) -> int:
        server = self

        class Server(asyncssh.SSHServer):
            def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
                server._connections.add(conn)
                self._conn = conn

            def connection_lost(self, exc: Exception | None) -> None:
                server._connections.discard(self._conn)

            def session_requested(self) -> asyncssh.SSHServerSession:
                # Every session is a process (_handle), the sftp subsystem too: asyncssh's
                # process_factory= refuses a subsystem it has no sftp_factory for.
                return _LabSession(server._handle, None, 3, False)

        self._acceptor = await asyncssh.listen(
            self.address,
            port,
            server_host_keys=[self.host_key],
            authorized_client_keys=asyncssh.import_authorized_keys(self.client_public_key),
            server_factory=Server,
            encoding="utf-8",
            keepalive_interval=0,
        )
        self.port = self._acceptor.get_port()
        return self.port

    async def stop(self) -> None:
        if self._reboot_task is not None:
            self._reboot_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reboot_task
        for conn in list(self._connections):
            conn.abort()
        if self._acceptor is not None:
            self._acceptor.close()
            await self._acceptor.wait_closed()
            self._acceptor = None

    async def _handle(self, process: asyncssh.SSHServerProcess) -> None:
        if process.subsystem == "sftp":
            # Ansible's file transfer (and scp's, OpenSSH 9's default): the real sftp-server,
            # when the host has a filesystem view to serve.
            status = await self.shell.sftp(self.host, process) if self.shell else None
            if status is None:
                process.stderr.write("sftp: this lab host has no filesystem view (bwrap)\n")
            process.exit(127 if status is None else status)
            return
        command = process.command or ""
        stdin = ""
        if WRITE_FILE_SCRIPT in command:
            stdin = await process.stdin.read()
        slow = "slow-ssh" if self.host.role == "gpu" else "peer-slow-ssh"
        if slow in self.host.faults:
            await asyncio.sleep(self.slow_seconds)
        # The drop lands in a step's command: the engine's identity read at the start of a
        # run (machine-id, boot id) is not what the fault is about.
        if self._drop_pending and self.host.role == "gpu" and "/etc/machine-id" not in command:
            self._drop_pending = False
            process.stdout.write("partial output before the connection dropped\n")
            await asyncio.sleep(0.05)
            process.get_extra_info("connection").abort()
            return
        if command.strip() in ("systemctl reboot", "sudo -n -- systemctl reboot", "reboot"):
            self._record(command)
            process.exit(0)
            self._reboot_task = asyncio.get_running_loop().create_task(self._reboot())
            return
        result = await self._run(process, command, stdin)
        if changes_host(command):
            self._record(command)  # may kill the wizard before it sees the answer
        if result.stdout:
            process.stdout.write(result.stdout)
        if result.stderr:
            process.stderr.write(result.stderr)
        process.exit(result.exit_status)

    async def _run(self, process: asyncssh.SSHServerProcess, command: str, stdin: str) -> Result:
        """The command in the host's real shell (simulator/shell.py), fed the channel's
        stdin; the wizard's fixed transport scripts in-process (the fast path)."""
        if self.shell is None or in_process(command):
            return self.host.execute(command, stdin)
        self.host.commands.append(command)
        # The channel's stdin fed to the shell while it runs: `ssh node 'sh -s' < script`.
        env = {"SSH_CONNECTION": self.host.dispatch.ssh_connection()}
        source = stdin.encode() if stdin else process.stdin
        ran = await self.shell.exec(self.host, command, source, env=env)
        return Result(ran.stdout, ran.stderr, ran.exit_status)

    def _record(self, command: str) -> None:
        if self.effects is not None:
            self.effects.record(self.host.name, command)

    async def _benchmark(self, argv: list[str]) -> tuple[str, str, int] | None:
        """perftest and iperf3 pair up across hosts through the lab's broker (the shell's
        tool calls of this host come here first)."""
        if self.broker is None:
            return None
        argv = split_prefixes(argv)
        if not argv:
            return None
        if argv[0] in PERFTEST:
            return await run_perftest(argv, self.host, self.broker)
        if argv[0] == "pkill":
            port = next((int(a.split("-p ", 1)[1].split()[0]) for a in argv if "-p " in a), None)
            stopped = self.broker.stop(port)
            return "", "", 0 if stopped else 1
        if argv[0] == "iperf3":
            return await self._iperf3(argv)
        return None

    async def _iperf3(self, argv: list[str]) -> tuple[str, str, int]:
        if (refusal := check_iperf3_args(argv)) is not None:
            return "", refusal + "\n", 1
        port = int(argv[argv.index("-p") + 1]) if "-p" in argv else 5201
        if "-s" in argv:
            future = self.broker.listen(self.host.state.rdma_ip, port)
            try:
                await asyncio.wait_for(future, 60)
            except TimeoutError:
                return "", "iperf3: error - no client within 60 s\n", 1
            except asyncio.CancelledError:
                return "", "", 143
            return f"{'-' * 59}\nServer listening on {port}\n", "", 0
        target = argv[argv.index("-c") + 1]
        listener = self.broker.connect(target, port)
        if listener is None:
            return (
                "",
                "iperf3: error - unable to connect to server - server may have stopped running or use a different port, firewall issue, etc.: Connection refused\n",
                1,
            )
        listener.set_result(self.host.name)
        streams = int(argv[argv.index("-P") + 1]) if "-P" in argv else 1
        return iperf3_json(streams, "-R" in argv, iperf3_bitrate(argv)) + "\n", "", 0

    async def _reboot(self) -> None:
        """Go away like a rebooting machine, then come back on the same port."""
        await asyncio.sleep(0.2)
        port = self.port
        for conn in list(self._connections):
            conn.abort()
        if self._acceptor is not None:
            self._acceptor.close()
            self._acceptor = None
        self.host.reboot()
        if self.shell is not None:
            await self.shell.boot(self.host)  # early units, the bond forms, late units
        else:
            self.host.network.form_bond()
        await asyncio.sleep(self.reboot_seconds)
        await self.start(port)
