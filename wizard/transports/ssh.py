"""The SSH transport (asyncssh): one reused connection per host, bounded channels, typed
errors worded for an operator.

- Host keys are verified against known_hosts. An unknown key is refused unless the site
  opted into trust-on-first-use for that host; a *changed* key is always refused.
- ``~/.ssh/config`` is honoured (asyncssh reads it unless told otherwise), ProxyJump comes
  from the site's ``proxy_jump`` (asyncssh's ``tunnel``).
- Non-root users run commands through ``sudo -n``; sudo asking for a password is a clear
  error, never a hang.
- A connection that dropped is re-established, with backoff, for the *next* command; the
  command that was running when it dropped is reported as such (it may or may not have
  completed), so the engine re-verifies instead of repeating a change blindly.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import time
from collections.abc import Sequence
from pathlib import Path

import asyncssh

from wizard.site import SshSettings
from wizard.transports.base import (
    AuthenticationError,
    CommandFailedError,
    CommandResult,
    CommandTimeoutError,
    HostKeyError,
    LineCallback,
    TransportError,
    UnreachableError,
    render_command,
)

# OpenSSH's MaxSessions defaults to 10 channels per connection: stay below it.
MAX_CHANNELS_PER_HOST = 8
KEEPALIVE_INTERVAL_S = 15
RECONNECT_DELAYS_S = (0.5, 1.0, 2.0)
# AES-GCM first (AES-NI makes it the cheapest per packet, which counts when one wizard talks
# to 64 nodes at once), then asyncssh's own defaults. Unless the operator's ssh_config sets
# Ciphers, which then wins.
PREFERRED_CIPHERS = [
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes256-ctr",
    "aes192-ctr",
    "aes128-ctr",
]
DEFAULT_SSH_CONFIG = "~/.ssh/config"
_SUDO_PASSWORD = ("a password is required", "a terminal is required", "no tty present")


class ConnectionDroppedError(TransportError):
    """The connection died while a command ran: its effect is unknown."""


class SudoPasswordError(AuthenticationError):
    """sudo wanted a password; the wizard never types one."""


class SshHost:
    """Runs commands on one host over a single, reused SSH connection."""

    def __init__(
        self,
        name: str,
        address: str,
        settings: SshSettings,
        *,
        key_path: Path | None = None,
        known_hosts_path: Path | None = None,
        ssh_config: list[str] | None = None,
        max_channels: int = MAX_CHANNELS_PER_HOST,
    ) -> None:
        self.name = name
        self.address = address
        self.settings = settings
        self.key_path = key_path
        self.known_hosts_path = known_hosts_path or Path(os.path.expanduser(settings.known_hosts))
        self.ssh_config = ssh_config
        self._channels = asyncio.Semaphore(max_channels)
        self._connect_lock = asyncio.Lock()
        self._conn: asyncssh.SSHClientConnection | None = None
        self._ever_connected = False

    # -- connection ------------------------------------------------------------------------

    @property
    def where(self) -> str:
        return f"{self.settings.user}@{self.address}:{self.settings.port}"

    async def connection(self) -> asyncssh.SSHClientConnection:
        async with self._connect_lock:
            if self._conn is not None and not self._conn.is_closed():
                return self._conn
            self._conn = None
            delays = RECONNECT_DELAYS_S if self._ever_connected else ()
            for attempt in range(len(delays) + 1):
                try:
                    self._conn = await self._connect()
                    self._ever_connected = True
                    return self._conn
                except UnreachableError:
                    if attempt >= len(delays):
                        raise
                    await asyncio.sleep(delays[attempt])
            raise AssertionError("unreachable")  # pragma: no cover

    def _options(self, known_hosts: object) -> dict:
        options: dict = {
            "host": self.address,
            "port": self.settings.port,
            "username": self.settings.user,
            "known_hosts": known_hosts,
            "connect_timeout": self.settings.connect_timeout,
            "login_timeout": self.settings.connect_timeout,
            "keepalive_interval": KEEPALIVE_INTERVAL_S,
        }
        if not self._config_names_ciphers():
            options["encryption_algs"] = PREFERRED_CIPHERS
        if self.key_path is not None:
            options["client_keys"] = [str(self.key_path)]
        if self.settings.proxy_jump:
            options["tunnel"] = self.settings.proxy_jump
        if self.ssh_config is not None:
            options["config"] = self.ssh_config
        return options

    async def _connect(self) -> asyncssh.SSHClientConnection:
        known = str(self.known_hosts_path) if self.known_hosts_path.exists() else ()
        try:
            return await asyncssh.connect(**self._options(known))
        except asyncssh.HostKeyNotVerifiable:
            if self._host_is_known():
                raise HostKeyError(
                    self.name,
                    f"the host key of {self.address} does not match the one in "
                    f"{self.known_hosts_path}: refusing to connect (possible man-in-the-middle). "
                    f"If the host was reinstalled, remove the old entry with "
                    f"`ssh-keygen -R {self._known_hosts_name()}` and verify the new key.",
                ) from None
            if not self.settings.trust_on_first_use:
                raise HostKeyError(
                    self.name,
                    f"the host key of {self.address} is unknown (not in {self.known_hosts_path}). "
                    "Verify it and add it (ssh-keyscan), or set ssh.trust_on_first_use: true "
                    "for this host in the site file.",
                ) from None
            return await self._trust_on_first_use()
        except asyncssh.PermissionDenied as exc:
            key = f"key {self.key_path}" if self.key_path else "the SSH agent's keys"
            raise AuthenticationError(
                self.name, f"authentication failed for {self.where} with {key}: {exc.reason}"
            ) from None
        except TimeoutError:
            raise UnreachableError(
                self.name,
                f"timed out connecting to {self.where} after {self.settings.connect_timeout:g}s",
            ) from None
        except OSError as exc:
            raise UnreachableError(
                self.name, f"cannot reach {self.where}: {exc.strerror or exc}"
            ) from None
        except asyncssh.Error as exc:
            raise UnreachableError(self.name, f"SSH to {self.where} failed: {exc.reason}") from None

    def _config_names_ciphers(self) -> bool:
        """Whether the operator's ssh_config chooses ciphers (then it is followed as is)."""
        paths = self.ssh_config if self.ssh_config is not None else [DEFAULT_SSH_CONFIG]
        for path in paths:
            try:
                text = Path(path).expanduser().read_text(errors="replace")
            except OSError:
                continue
            if re.search(r"^\s*ciphers\b", text, re.IGNORECASE | re.MULTILINE):
                return True
        return False

    def _host_is_known(self) -> bool:
        if not self.known_hosts_path.exists():
            return False
        known = asyncssh.read_known_hosts(str(self.known_hosts_path))
        trusted = known.match(self.address, self.address, self.settings.port)
        return bool(trusted[0] or trusted[1])

    def _known_hosts_name(self) -> str:
        if self.settings.port == 22:
            return self.address
        return f"[{self.address}]:{self.settings.port}"

    async def _trust_on_first_use(self) -> asyncssh.SSHClientConnection:
        conn = await asyncssh.connect(**self._options(None))
        key = conn.get_server_host_key()
        if key is None:  # pragma: no cover - asyncssh always has one after kex
            conn.close()
            raise HostKeyError(self.name, "the server presented no host key")
        line = f"{self._known_hosts_name()} {key.export_public_key().decode().strip()}\n"
        self.known_hosts_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.known_hosts_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a") as handle:
            handle.write(line)
        return conn

    async def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            await self._conn.wait_closed()
            self._conn = None

    # -- commands --------------------------------------------------------------------------

    async def run(
        self,
        command: str | Sequence[str],
        *,
        sudo: bool = False,
        timeout: float | None = None,
        on_line: LineCallback | None = None,
        check: bool = False,
        stdin: str | None = None,
    ) -> CommandResult:
        text = render_command(command)
        remote = text
        if sudo:
            inner = text if not isinstance(command, str) else f"sh -c {shlex.quote(text)}"
            remote = f"sudo -n -- {inner}"
        timeout = timeout or self.settings.command_timeout
        conn = await self.connection()
        started = time.monotonic()
        async with self._channels:
            try:
                stdout, stderr, status = await self._stream(conn, remote, stdin, timeout, on_line)
            except _Timeout as exc:
                raise CommandTimeoutError(
                    self.name,
                    f"`{text}` did not finish within {timeout:g}s"
                    + (f"; last output: {exc.partial[-300:]!r}" if exc.partial else ""),
                ) from None
            except (
                asyncssh.ConnectionLost,
                asyncssh.DisconnectError,
                BrokenPipeError,
                ConnectionResetError,
            ) as exc:
                self._conn = None
                raise ConnectionDroppedError(
                    self.name,
                    f"the connection to {self.where} dropped while running `{text}` "
                    f"({exc}); it may or may not have completed",
                ) from None
        result = CommandResult(self.name, text, status, stdout, stderr, time.monotonic() - started)
        if sudo and status != 0 and any(s in stderr for s in _SUDO_PASSWORD):
            raise SudoPasswordError(
                self.name,
                f"sudo on {self.address} asks {self.settings.user} for a password; the wizard "
                "never types one. Allow passwordless sudo (NOPASSWD) for this user, or connect "
                "as root.",
            )
        if check and status != 0:
            raise CommandFailedError(result)
        return result

    async def _stream(
        self,
        conn: asyncssh.SSHClientConnection,
        command: str,
        stdin: str | None,
        timeout: float,
        on_line: LineCallback | None,
    ) -> tuple[str, str, int | None]:
        channel, session = await conn.create_session(
            lambda: _CollectingSession(on_line), command, encoding="utf-8", errors="replace"
        )
        if stdin is not None:
            channel.write(stdin)
        channel.write_eof()
        try:
            lost = await asyncio.wait_for(asyncio.shield(session.closed), timeout)
        except TimeoutError:
            # Ask the remote side to stop, then close the channel without waiting for the
            # command: a hung command must not hang the wizard.
            with contextlib.suppress(asyncssh.Error, OSError):
                channel.send_signal("KILL")
            channel.close()
            raise _Timeout("".join(session.out)) from None
        status = channel.get_exit_status()
        signal = channel.get_exit_signal()
        if status is None and signal is None and (lost is not None or conn.is_closed()):
            raise asyncssh.ConnectionLost("connection closed before the exit status")
        if status is None and signal is not None:
            status = -1
        return "".join(session.out), "".join(session.err), status


class _CollectingSession(asyncssh.SSHClientSession[str]):
    """Collects one command's stdout and stderr as the channel delivers them.

    A plain session rather than asyncssh's process and stream readers: a fleet check opens
    thousands of channels, and the reader machinery costs an await per read. Complete lines
    go to ``on_line`` when someone watches (the TUI's live log, --verbose).
    """

    def __init__(self, on_line: LineCallback | None) -> None:
        self.out: list[str] = []
        self.err: list[str] = []
        self._on_line = on_line
        self._partial = {"stdout": "", "stderr": ""}
        self.closed: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: str, datatype: asyncssh.DataType) -> None:
        name = "stderr" if datatype == asyncssh.EXTENDED_DATA_STDERR else "stdout"
        (self.err if name == "stderr" else self.out).append(data)
        if self._on_line is not None:
            *lines, self._partial[name] = (self._partial[name] + data).split("\n")
            for line in lines:
                self._on_line(name, line)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._on_line is not None:
            for name, rest in self._partial.items():
                if rest:
                    self._on_line(name, rest)
        if not self.closed.done():
            self.closed.set_result(exc)


class _Timeout(Exception):
    def __init__(self, partial: str) -> None:
        self.partial = partial
