"""An asyncssh server on loopback in front of one simulated host.

Keys are generated in memory; only the lab's client key is authorised. Faults that live
in the transport (slow SSH, a connection dropped mid-command, a reboot that takes the
host away for a while) are played here.
"""

from __future__ import annotations

import asyncio
import contextlib

import asyncssh

from wizard.lab.host import LabHost
from wizard.transports.base import WRITE_FILE_SCRIPT

SLOW_SSH_DELAY_S = 1.0


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
    ) -> None:
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

        self._acceptor = await asyncssh.listen(
            self.address,
            port,
            server_host_keys=[self.host_key],
            authorized_client_keys=asyncssh.import_authorized_keys(self.client_public_key),
            process_factory=self._handle,
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
        command = process.command or ""
        stdin = ""
        if WRITE_FILE_SCRIPT in command:
            stdin = await process.stdin.read()
        if "slow-ssh" in self.host.faults and self.host.role == "gpu":
            await asyncio.sleep(self.slow_seconds)
        if self._drop_pending and self.host.role == "gpu":
            self._drop_pending = False
            process.stdout.write("partial output before the connection dropped\n")
            await asyncio.sleep(0.05)
            process.get_extra_info("connection").abort()
            return
        if command.strip() in ("systemctl reboot", "sudo -n -- systemctl reboot", "reboot"):
            process.exit(0)
            self._reboot_task = asyncio.get_running_loop().create_task(self._reboot())
            return
        result = self.host.execute(command, stdin)
        if result.stdout:
            process.stdout.write(result.stdout)
        if result.stderr:
            process.stderr.write(result.stderr)
        process.exit(result.exit_status)

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
        await asyncio.sleep(self.reboot_seconds)
        await self.start(port)
