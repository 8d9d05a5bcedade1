"""The host transport protocol, command results and the transport errors.

Errors are typed and worded for an operator: which host, which address, what happened.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from wizard.errors import WizardError

LineCallback = Callable[[str, str], None]  # (stream, line)

# Writes standard input to "$2" atomically with mode "$1": a temp file beside it, then a
# rename, so that a dropped connection never leaves a half-written file on the host.
WRITE_FILE_SCRIPT = (
    'umask 077; tmp="$2.gnw-tmp"; cat > "$tmp" && chmod "$1" "$tmp" && mv -f "$tmp" "$2"'
)


# Writes "$1" into the pseudo-file "$2" (configfs, sysfs): these cannot be replaced by a
# rename, so the value is written in place.
WRITE_VALUE_SCRIPT = 'printf "%s\\n" "$1" > "$2"'


def read_file_command(path: str) -> list[str]:
    """The argv that reads a file (``StepContext.read_file``)."""
    return ["cat", path]


# ``cat``'s exit status 1 (GNU coreutils: "an error occurred", here the file is missing):
# ``read_file`` reads it as "not there yet", the state before a step writes the file.
READ_FILE_EXITS = {1: "not there yet"}


def write_value_command(path: str, value: str) -> list[str]:
    """The argv that writes one value into a configfs/sysfs attribute."""
    return ["sh", "-c", WRITE_VALUE_SCRIPT, "sh", value, path]


def write_file_command(path: str, mode: int | str) -> list[str]:
    """The argv that writes stdin to ``path`` with ``mode`` (see WRITE_FILE_SCRIPT); a
    string mode is written as given (the runbook's ``MODE``)."""
    shown = mode if isinstance(mode, str) else f"{mode:04o}"
    return ["sh", "-c", WRITE_FILE_SCRIPT, "sh", shown, path]


def render_command(command: str | Sequence[str]) -> str:
    """An argv list becomes a shell-quoted string; a string is used as written.

    Steps build commands as argv lists wherever they can, so every value is quoted. A
    string is for pipelines the step composed itself from already-quoted parts.
    """
    if isinstance(command, str):
        return command
    return shlex.join(str(part) for part in command)


@dataclass(frozen=True)
class CommandResult:
    target: str
    command: str
    exit_status: int | None
    stdout: str
    stderr: str
    duration_s: float = 0.0
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    def excerpt(self, limit: int = 2000) -> str:
        text = self.stdout if self.stdout.strip() else self.stderr
        return text if len(text) <= limit else text[:limit] + "\n[... truncated]"


class TransportError(WizardError):
    """A host or the cluster could not be used; the message says which and why."""

    def __init__(self, target: str, message: str) -> None:
        self.target = target
        super().__init__(f"{target}: {message}")


class UnreachableError(TransportError):
    pass


class AuthenticationError(TransportError):
    pass


class HostKeyError(TransportError):
    pass


class CommandTimeoutError(TransportError):
    pass


class CommandFailedError(TransportError):
    """A command exited non-zero where the caller required success."""

    def __init__(self, result: CommandResult) -> None:
        self.result = result
        stderr = result.stderr.strip() or "(no stderr)"
        super().__init__(
            result.target,
            f"`{result.command}` exited with status {result.exit_status}: {stderr}",
        )


class HostTransport(Protocol):
    """Runs commands on one host."""

    name: str

    async def run(
        self,
        command: str | Sequence[str],
        *,
        sudo: bool = False,
        timeout: float | None = None,
        on_line: LineCallback | None = None,
        check: bool = False,
        stdin: str | None = None,
    ) -> CommandResult: ...

    async def run_many(
        self,
        commands: Sequence[str | Sequence[str]],
        *,
        sudo: bool = False,
        timeout: float | None = None,
    ) -> list[CommandResult]:
        """Independent read-only commands, in order, one result each (the SSH transport
        sends them in one exec)."""
        ...

    async def close(self) -> None: ...
