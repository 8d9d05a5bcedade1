"""Transports that record what would be run and connect to nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from wizard.transports.base import CommandResult, LineCallback, render_command


@dataclass
class DryRunHost:
    """Records every command; answers each with an empty, successful dry-run result."""

    name: str
    commands: list[str] = field(default_factory=list)

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
        if sudo:
            text = f"sudo -n -- {text}"
        self.commands.append(text)
        return CommandResult(self.name, text, 0, "", "", dry_run=True)

    async def run_many(
        self,
        commands: Sequence[str | Sequence[str]],
        *,
        sudo: bool = False,
        timeout: float | None = None,
    ) -> list[CommandResult]:
        return [await self.run(command, sudo=sudo) for command in commands]

    async def close(self) -> None:
        return None
