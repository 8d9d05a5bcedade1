"""The SSH transport (asyncssh): one reused connection per host, bounded channels, typed
errors worded for an operator.

- Host keys are verified against known_hosts. An unknown key is refused unless the site
  opted into trust-on-first-use for that host; a *changed* key is always refused.
- ``~/.ssh/config`` is honoured (asyncssh reads it unless told otherwise), ProxyJump comes
  from the site's ``proxy_jump`` (asyncssh's ``tunnel``).
- Non-root users run commands through ``sudo -n``; sudo asking for a password is a clear
  error, never a hang.
- A key file (``ssh.key``) is read by the wizard itself, so that each way it can be
  unusable gets its own message: missing, unreadable, not a key, or protected by a
  passphrase. A passphrase-protected key is used through the ssh-agent when one runs
  (``SSH_AUTH_SOCK``), else with the passphrase from ``ssh.key_passphrase_env``, else by
  asking on the terminal (``PASSPHRASE_PROMPT``, set by the command line when it has one).
  The answer decrypts the key in memory and is dropped: never stored, logged or journaled.
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
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

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
from wizard.transports.batch import (
    NO_SCRATCH_STATUS,
    BatchFormatError,
    BatchPart,
    batch_command,
    decode_batch_output,
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


class KeyFileError(AuthenticationError):
    """``ssh.key`` cannot be used: missing, unreadable, not a key, or locked."""


# How the front end asks for a key's passphrase: called with the key's path (in a worker
# thread), returns the passphrase or None (no one to ask). The command line sets a
# terminal prompt (getpass) when stdin is a terminal; the TUI leaves it unset, so a
# locked key without an agent is a clear error there rather than a prompt under the TUI.
PassphrasePrompt = Callable[[Path], "str | None"]
PASSPHRASE_PROMPT: PassphrasePrompt | None = None

# Keys decrypted in this process, by path and file stamp: a fleet's nodes share one key,
# which is then asked for once. Only the key object is kept, never the passphrase.
_KEYS: dict[tuple[Path, int, int], asyncssh.SSHKey] = {}
# One lock per event loop (an asyncio.Lock belongs to the loop it first waited on; the TUI
# runs its engine in its own loop, tests run many): concurrent connections of one run ask
# for a key once.
_KEYS_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


def _keys_lock() -> asyncio.Lock:
    loop = asyncio.get_running_loop()
    lock = _KEYS_LOCKS.get(loop)
    if lock is None:
        lock = _KEYS_LOCKS[loop] = asyncio.Lock()
    return lock


def _agent_available() -> bool:
    sock = os.environ.get("SSH_AUTH_SOCK")
    return bool(sock) and os.path.exists(sock)


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

    async def _client_keys(self) -> list[asyncssh.SSHKey] | None:
        """The key to offer for ``ssh.key``: decrypted here, or None to leave it to the
        ssh-agent (asyncssh then offers the agent's keys). Raises KeyFileError."""
        path = self.key_path
        if path is None:
            return None
        try:
            info = path.stat()
        except FileNotFoundError:
            raise KeyFileError(self.name, f"the SSH key {path} (ssh.key) does not exist") from None
        except OSError as exc:
            raise KeyFileError(
                self.name, f"the SSH key {path} (ssh.key) cannot be read: {exc.strerror or exc}"
            ) from None
        if not path.is_file():
            raise KeyFileError(self.name, f"the SSH key {path} (ssh.key) is not a regular file")
        stamp = (path, info.st_mtime_ns, info.st_size)
        async with _keys_lock():
            if stamp in _KEYS:
                return [_KEYS[stamp]]
            key = await self._load_key(path, None)
            if key is None:  # encrypted
                if _agent_available():
                    return None
                passphrase = self._passphrase_from_env()
                if passphrase is None and PASSPHRASE_PROMPT is not None:
                    passphrase = await asyncio.to_thread(PASSPHRASE_PROMPT, path)
                if not passphrase:
                    raise KeyFileError(
                        self.name,
                        f"the SSH key {path} is protected by a passphrase and there is no way "
                        "to ask for it: load it into the ssh-agent (`ssh-add "
                        f"{path}`, with SSH_AUTH_SOCK set), or name an environment variable "
                        "holding the passphrase in ssh.key_passphrase_env, or run in a "
                        "terminal to be asked",
                    )
                key = await self._load_key(path, passphrase)
                del passphrase
                if key is None:
                    raise KeyFileError(self.name, f"the passphrase for the SSH key {path} is wrong")
            _KEYS[stamp] = key
            return [key]

    def _passphrase_from_env(self) -> str | None:
        var = self.settings.key_passphrase_env
        if var is None:
            return None
        value = os.environ.get(var)
        if not value:
            raise KeyFileError(
                self.name,
                f"ssh.key_passphrase_env names {var}, which is not set in the environment",
            )
        return value

    async def _load_key(self, path: Path, passphrase: str | None) -> asyncssh.SSHKey | None:
        """The private key in ``path``; None when it needs a (different) passphrase."""
        try:
            return await asyncio.to_thread(asyncssh.read_private_key, str(path), passphrase)
        except asyncssh.KeyEncryptionError:
            return None  # a wrong passphrase
        except asyncssh.KeyImportError as exc:
            if "passphrase" in str(exc).lower():
                return None
            raise KeyFileError(
                self.name,
                f"the SSH key {path} (ssh.key) is not a private key asyncssh can read: {exc}",
            ) from None
        except OSError as exc:
            raise KeyFileError(
                self.name, f"the SSH key {path} (ssh.key) cannot be read: {exc.strerror or exc}"
            ) from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise KeyFileError(
                self.name, f"the SSH key {path} (ssh.key) is not a private key: {exc}"
            ) from None

    def _options(self, known_hosts: object, client_keys: list[Any] | None = None) -> dict:
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
        if client_keys is not None:
            options["client_keys"] = client_keys
        if self.settings.proxy_jump:
            options["tunnel"] = self.settings.proxy_jump
        if self.ssh_config is not None:
            options["config"] = self.ssh_config
        return options

    async def _connect(self) -> asyncssh.SSHClientConnection:
        known = self._read_known_hosts() or ()
        keys = await self._client_keys()
        try:
            return await asyncssh.connect(**self._options(known, keys))
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
            return await self._trust_on_first_use(keys)
        except asyncssh.PermissionDenied as exc:
            if self.key_path is None:
                key = "the SSH agent's keys"
            elif keys is None:
                key = f"the SSH agent's keys (key {self.key_path} is passphrase-protected)"
            else:
                key = f"key {self.key_path}"
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

    def _read_known_hosts(self) -> asyncssh.SSHKnownHosts | None:
        try:
            return _known_hosts(self.known_hosts_path)
        except (OSError, ValueError) as exc:  # a folder, binary junk, unreadable
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise HostKeyError(
                self.name,
                f"the known_hosts file {self.known_hosts_path} (ssh.known_hosts) cannot be "
                f"used: {str(reason)[:200]}",
            ) from None

    def _host_is_known(self) -> bool:
        known = self._read_known_hosts()
        if known is None:
            return False
        trusted = known.match(self.address, self.address, self.settings.port)
        return bool(trusted[0] or trusted[1])

    def _known_hosts_name(self) -> str:
        if self.settings.port == 22:
            return self.address
        return f"[{self.address}]:{self.settings.port}"

    async def _trust_on_first_use(self, keys: list[Any] | None) -> asyncssh.SSHClientConnection:
        conn = await asyncssh.connect(**self._options(None, keys))
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

    def host_key_fingerprint(self) -> str | None:
        """The SHA256 fingerprint of the host key of the open connection (None if none):
        part of the machine's identity that a checkpoint is bound to."""
        if self._conn is None:
            return None
        key = self._conn.get_server_host_key()
        return key.get_fingerprint() if key is not None else None

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
        timeout = timeout or self.settings.command_timeout
        started = time.monotonic()
        stdout, stderr, status = await self._exec(
            _remote(command, sudo),
            f"`{text}`",
            timeout,
            lambda partial: f"; last output: {partial[-300:]!r}" if partial else "",
            stdin=stdin,
            on_line=on_line,
        )
        result = CommandResult(self.name, text, status, stdout, stderr, time.monotonic() - started)
        self._refuse_sudo_password(result, sudo)
        if check and status != 0:
            raise CommandFailedError(result)
        return result

    async def run_many(
        self,
        commands: Sequence[str | Sequence[str]],
        *,
        sudo: bool = False,
        timeout: float | None = None,
    ) -> list[CommandResult]:
        """Run read-only commands one after another in a single exec (see batch.py).

        Each result has its own exit status, stdout and stderr; the duration is the
        batch's. Falls back to one exec per command when the host cannot run the batch
        script (no scratch directory, an unexpected shell).
        """
        texts = [render_command(c) for c in commands]
        if len(texts) < 2:
            return [await self.run(c, sudo=sudo, timeout=timeout) for c in commands]
        timeout = timeout or self.settings.command_timeout
        started = time.monotonic()

        def running_when_stopped(partial: bytes) -> str:
            done = len(_complete_parts(partial))
            return f" (`{texts[min(done, len(texts) - 1)]}` was running, {done} done)"

        stdout, stderr, status = await self._exec(
            shlex.join(batch_command([_remote(c, sudo) for c in commands])),
            f"a batch of {len(texts)} reads ({'; '.join(texts)})",
            timeout,
            running_when_stopped,
            binary=True,
        )
        parts = _complete_parts(stdout)
        if len(parts) != len(texts):
            if status == NO_SCRATCH_STATUS or not parts:
                return [await self.run(c, sudo=sudo, timeout=timeout) for c in commands]
            raise CommandFailedError(
                CommandResult(self.name, "; ".join(texts), status, "",
                              stderr.decode("utf-8", "replace"), time.monotonic() - started)
            )  # fmt: skip
        elapsed = time.monotonic() - started
        results = [
            CommandResult(
                self.name,
                text,
                part.exit_status,
                part.stdout.decode("utf-8", "replace"),
                part.stderr.decode("utf-8", "replace"),
                elapsed,
            )
            for text, part in zip(texts, parts, strict=True)
        ]
        for result in results:
            self._refuse_sudo_password(result, sudo)
        return results

    def _refuse_sudo_password(self, result: CommandResult, sudo: bool) -> None:
        if sudo and result.exit_status != 0 and any(s in result.stderr for s in _SUDO_PASSWORD):
            raise SudoPasswordError(
                self.name,
                f"sudo on {self.address} asks {self.settings.user} for a password; the wizard "
                "never types one. Allow passwordless sudo (NOPASSWD) for this user, or connect "
                "as root.",
            )

    async def _exec(
        self,
        remote: str,
        what: str,
        timeout: float,
        explain_timeout: Callable[[Any], str],
        *,
        stdin: str | None = None,
        on_line: LineCallback | None = None,
        binary: bool = False,
    ) -> tuple[Any, Any, int | None]:
        """One exec on the shared connection, within the per-host channel limit, with the
        transport's errors worded for ``what`` ran."""
        conn = await self.connection()
        async with self._channels:
            try:
                return await self._stream(conn, remote, stdin, timeout, on_line, binary)
            except _Timeout as exc:
                raise CommandTimeoutError(
                    self.name,
                    f"{what} did not finish within {timeout:g}s{explain_timeout(exc.partial)}",
                ) from None
            except asyncssh.ChannelOpenError as exc:
                # The shared connection was closed under us (the host rebooted while the
                # wizard was paused): the command never started; the next one reconnects.
                self._conn = None
                raise ConnectionDroppedError(
                    self.name,
                    f"the connection to {self.where} was closed before {what} started ({exc})",
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
                    f"the connection to {self.where} dropped while running {what} "
                    f"({exc}); it may or may not have completed",
                ) from None

    async def _stream(
        self,
        conn: asyncssh.SSHClientConnection,
        command: str,
        stdin: str | None,
        timeout: float,
        on_line: LineCallback | None,
        binary: bool,
    ) -> tuple[Any, Any, int | None]:
        encoding = None if binary else "utf-8"
        channel, session = await conn.create_session(
            lambda: _CollectingSession(on_line), command, encoding=encoding, errors="replace"
        )
        if stdin is not None:
            channel.write(stdin)
        channel.write_eof()
        empty = b"" if binary else ""
        try:
            lost = await asyncio.wait_for(asyncio.shield(session.closed), timeout)
        except TimeoutError:
            # Ask the remote side to stop, then close the channel without waiting for the
            # command: a hung command must not hang the wizard.
            with contextlib.suppress(asyncssh.Error, OSError):
                channel.send_signal("KILL")
            channel.close()
            raise _Timeout(empty.join(session.out)) from None
        status = channel.get_exit_status()
        signal = channel.get_exit_signal()
        if status is None and signal is None and (lost is not None or conn.is_closed()):
            raise asyncssh.ConnectionLost("connection closed before the exit status")
        if status is None and signal is not None:
            status = -1
        return empty.join(session.out), empty.join(session.err), status


# Parsed known_hosts files by path, with the (mtime, size) they were read at: a fleet's
# nodes share one file, which is then parsed once instead of once per connection. A
# changed file (trust on first use appended a key) is read again.
_KNOWN_HOSTS: dict[Path, tuple[tuple[int, int], asyncssh.SSHKnownHosts]] = {}


def _known_hosts(path: Path) -> asyncssh.SSHKnownHosts | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    stamp = (stat.st_mtime_ns, stat.st_size)
    cached = _KNOWN_HOSTS.get(path)
    if cached is None or cached[0] != stamp:
        cached = (stamp, asyncssh.read_known_hosts(str(path)))
        _KNOWN_HOSTS[path] = cached
    return cached[1]


def _remote(command: str | Sequence[str], sudo: bool) -> str:
    """The command line sent to the host: under ``sudo -n`` when asked (a string command
    runs through ``sh -c`` there, so that its pipes and redirections stay under sudo)."""
    text = render_command(command)
    if not sudo:
        return text
    inner = text if not isinstance(command, str) else f"sh -c {shlex.quote(text)}"
    return f"sudo -n -- {inner}"


def _complete_parts(output: bytes) -> list[BatchPart]:
    try:
        return decode_batch_output(output)
    except BatchFormatError:
        return []


class _CollectingSession(asyncssh.SSHClientSession[Any]):
    """Collects one command's stdout and stderr as the channel delivers them.

    A plain session rather than asyncssh's process and stream readers: a fleet check opens
    thousands of channels, and the reader machinery costs an await per read. Complete lines
    go to ``on_line`` when someone watches (the TUI's live log, --verbose).
    """

    def __init__(self, on_line: LineCallback | None) -> None:
        self.out: list[Any] = []  # str, or bytes for a batch
        self.err: list[Any] = []
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
    def __init__(self, partial: str | bytes) -> None:
        self.partial = partial
