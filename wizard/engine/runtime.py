"""The step runtime: what a step's ``ctx`` is while the engine runs it on one target.

A step sees the ``StepContext`` protocol (wizard/plan.py) and nothing of the engine; this
class implements it over the engine's checkpoint, journal and front end. It lives in the
engine so that the plan never imports the engine (the import contract "plan-no-engine" in
pyproject.toml): the issue's audit found an import circle of eight files through
``plan.py``, whose context reached into the engine.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from wizard.events import (
    CommandFinished,
    CommandStarted,
    Event,
    OutputLine,
    WaitEnded,
    Waiting,
)
from wizard.model import Measurement, StepState
from wizard.plan import CLUSTER, Scope, Services, Step
from wizard.result_keys import MissingResultError, ResultKey
from wizard.site import Node, Site
from wizard.transports.base import (
    READ_FILE_EXITS,
    CommandResult,
    HostTransport,
    read_file_command,
    render_command,
    write_file_command,
)

if TYPE_CHECKING:
    from wizard.engine.core import Engine

T = TypeVar("T")


def _meaning(expected: Mapping[int, str] | None, status: int | None) -> str:
    """What ``status`` means when the command's definition expects it ("" otherwise)."""
    if not expected or status in (0, None):
        return ""
    return expected.get(status, "")


@dataclass
class StepRuntime:
    """Everything a step needs while it runs on one target: the engine's implementation of
    ``wizard.plan.StepContext``, the one interface a step sees."""

    site: Site
    step: Step
    target: str
    node: Node | None
    services: Services
    engine: Engine
    measurements: list[Measurement] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)  # stored with the step record
    use_oob: bool = False  # reach the node through its out-of-band address
    # Set by the engine while the step applies or rolls back: every command is then an
    # effect, journaled ahead (intent fsynced before it runs, outcome after).
    effects: bool = False

    @property
    def host(self) -> HostTransport:
        return self.host_for(self.target)

    def host_for(self, name: str) -> HostTransport:
        if self.use_oob and name in getattr(self.services, "oob_hosts", {}):
            return self.services.oob_hosts[name]
        try:
            return self.services.hosts[name]
        except KeyError:
            raise KeyError(f"no transport for host {name!r}") from None

    def waiting(self, message: str) -> None:
        """Record 'waiting' (e.g. for a reboot) with the data so far; resumable elsewhere."""
        self.engine.checkpoint.set_step(
            self.step.id, self.target, StepState.WAITING, message=message, extra=dict(self.data)
        )

    def wait_begins(self, message: str, timeout_s: float) -> None:
        """Tell the front end that this step now waits (at most ``timeout_s``) for
        something outside the wizard, so that the operator sees a countdown, not a hang."""
        self.engine.emit(Waiting(self.step.id, self.target, message, timeout_s))

    def wait_ends(self) -> None:
        """The wait of ``wait_begins`` is over, and the step goes on (its StepFinished ends
        a wait too)."""
        self.engine.emit(WaitEnded(self.step.id, self.target))

    async def run(
        self,
        command: str | Sequence[str],
        *,
        on: str | None = None,
        sudo: bool | None = None,
        timeout: float | None = None,
        check: bool = False,
        stdin: str | None = None,
        expected: Mapping[int, str] | None = None,
    ) -> CommandResult:
        """Run a command on this target (or host ``on``): journaled, streamed as events.
        ``expected``: the non-zero exit statuses the command's definition expects, each
        with what it means (``EXPECTED_EXITS``), so that a front end shows no error."""
        name = on or self.target
        host = self.host_for(name)
        text = render_command(command)
        if sudo is None:
            sudo = self._sudo_default(name)
        emit = self.engine.emit
        intent = (
            self.engine.checkpoint.intent({"target": name, "step": self.step.id, "command": text})
            if self.effects
            else None
        )
        emit(CommandStarted(name, text))
        started = time.monotonic()
        try:
            result = await host.run(
                command,
                sudo=sudo,
                timeout=timeout,
                check=check,
                stdin=stdin,
                on_line=(
                    (lambda stream, line: emit(OutputLine(name, line, stream)))
                    if self.engine.frontend.wants_output_lines
                    else None
                ),
            )
        except BaseException as exc:
            entry = {"target": name, "step": self.step.id, "command": text, "error": str(exc)}
            if intent is not None:
                self.engine.checkpoint.outcome(intent, entry)
            else:
                self.engine.journal(entry)
            raise
        emit(
            CommandFinished(
                name, text, result.exit_status, time.monotonic() - started,
                _meaning(expected, result.exit_status),
            )
        )  # fmt: skip
        self._journal_result(name, result, intent=intent)
        return result

    async def run_many(
        self,
        commands: Sequence[str | Sequence[str]],
        *,
        on: str | None = None,
        sudo: bool | None = None,
        timeout: float | None = None,
        expected: Sequence[Mapping[int, str] | None] = (),
    ) -> list[CommandResult]:
        """Independent read-only commands on this target, sent together (one exec over
        SSH); each is journaled and shown as if it ran alone. ``expected``: per command,
        as ``run``'s."""
        name = on or self.target
        host = self.host_for(name)
        texts = [render_command(c) for c in commands]
        if sudo is None:
            sudo = self._sudo_default(name)
        emit = self.engine.emit
        checkpoint = self.engine.checkpoint
        intent = (
            checkpoint.intent({"target": name, "step": self.step.id, "commands": texts})
            if self.effects
            else None
        )
        for text in texts:
            emit(CommandStarted(name, text))
        try:
            results = await host.run_many(commands, sudo=sudo, timeout=timeout)
        except BaseException as exc:
            entry = {"target": name, "step": self.step.id, "commands": texts, "error": str(exc)}
            if intent is not None:
                checkpoint.outcome(intent, entry)
            else:
                self.engine.journal(entry)
            raise
        if intent is not None:
            checkpoint.outcome(
                intent, {"target": name, "step": self.step.id, "batch": len(results)}
            )
        meanings = list(expected) + [None] * (len(results) - len(expected))
        for result, wanted in zip(results, meanings, strict=False):
            if self.engine.frontend.wants_output_lines:
                for stream, output in (("stdout", result.stdout), ("stderr", result.stderr)):
                    for line in output.splitlines():
                        emit(OutputLine(name, line, stream))
            emit(
                CommandFinished(
                    name, result.command, result.exit_status, result.duration_s,
                    _meaning(wanted, result.exit_status),
                )
            )  # fmt: skip
            self._journal_result(name, result, batch=len(results))
        return results

    def _journal_result(
        self, name: str, result: CommandResult, batch: int = 1, intent: str | None = None
    ) -> None:
        entry = {
            "target": name,
            "step": self.step.id,
            "command": result.command,
            "exit": result.exit_status,
            "stdout": result.stdout,
            "stderr": result.stderr,
            "duration_s": round(result.duration_s, 3),
            "dry_run": result.dry_run,
        }
        if batch > 1:
            entry["batch_of"] = batch  # ran in one exec with others; duration is the batch's
        if intent is not None:
            self.engine.checkpoint.outcome(intent, entry)
        else:
            self.engine.journal(entry)

    async def shared(self, name: str, read: Callable[[], Awaitable[T]]) -> T:
        """A read whose answer is the same for every target of this step (e.g. the
        cluster's node list): made once per step run and shared by the whole fan-out,
        instead of once per node."""
        return await self.engine.shared_read((self.step.id, name), read)

    def need(self, key: ResultKey[T], *, on: str | None = None) -> T:
        """A result this step declared in ``needs``, typed (the engine blocked the step if
        the providing step did not record it). ``on``: the node whose result a
        cluster-scope step reads (it needs it from every node)."""
        if key not in self.step.needs:
            raise KeyError(f"{self.step.id} reads {key} without declaring it in `needs`")
        value = self._recorded(key, on)
        if value is None:
            raise MissingResultError(self.step.id, key)
        return key.check(value, self.step.id)

    def result_if_any(self, key: ResultKey[T], *, on: str | None = None) -> T | None:
        """A result this step declared in ``uses``: typed, or None when its provider did
        not record it (the step then says what it does without it)."""
        if key not in self.step.uses:
            raise KeyError(f"{self.step.id} reads {key} without declaring it in `uses`")
        value = self._recorded(key, on)
        return None if value is None else key.check(value, self.step.id)

    def provide(self, key: ResultKey[T], value: T) -> None:
        """Record a result this step declared in ``provides`` for the steps that need it."""
        if key not in self.step.provides or key.provider != self.step.id:
            raise KeyError(f"{self.step.id} records {key} without declaring it in `provides`")
        self.data[key.name] = key.check(value, self.step.id)

    def _recorded(self, key: ResultKey[Any], on: str | None) -> Any:
        provider = self.engine.plan.step(key.provider)
        target = CLUSTER if provider.scope == Scope.CLUSTER else (on or self.target)
        return key.read(self.engine.checkpoint.record(key.provider, target))

    async def read_file(self, path: str, *, on: str | None = None) -> str | None:
        """A file's content on the host, or None when it does not exist."""
        result = await self.run(read_file_command(path), on=on, expected=READ_FILE_EXITS)
        return result.stdout if result.exit_status == 0 else None

    async def write_file(
        self, path: str, content: str, mode: int = 0o644, *, on: str | None = None
    ) -> None:
        """Write a file on the host atomically (temp file + rename); raises on failure."""
        await self.run(write_file_command(path, mode), on=on, stdin=content, check=True)

    def record(self, name: str, value: float, unit: str, **labels: str) -> None:
        """Record a measurement for this step and target."""
        self.measurements.append(Measurement(name, value, unit, dict(labels)))

    def _sudo_default(self, name: str) -> bool:
        try:  # the site's index: a scan per command was O(nodes) each, O(nodes^2) a run
            return self.site.node(name).ssh.use_sudo
        except KeyError:
            pass
        for peer in self.site.aistor.peers:
            if peer.name == name:
                return peer.ssh.use_sudo
        return False

    # -- what a step reaches of the engine (the StepContext protocol, nothing more) ---------

    def emit(self, event: Event) -> None:
        """Show an event to the operator (redacted, as every event)."""
        self.engine.emit(event)

    def journal(self, entry: dict[str, Any]) -> None:
        """Append an entry to the run's journal (a tool's run the step made itself)."""
        self.engine.journal(entry)

    @property
    def wants_output_lines(self) -> bool:
        """Whether the front end shows commands' output line by line."""
        return self.engine.frontend.wants_output_lines

    def note_boot(self, boot_id: str) -> None:
        """This target booted anew (the reboot step): that boot is the known one."""
        self.engine.note_boot(self.target, boot_id)

    def state_of(self, step_id: str) -> StepState:
        """The recorded state of another step on this target."""
        return self.engine.checkpoint.step_state(step_id, self.target)

    def plan_step(self, step_id: str) -> Step:
        """Another step of the plan, by id."""
        return self.engine.plan.step(step_id)

    def as_step(self, step: Step, data: dict[str, Any]) -> StepRuntime:
        """This target's context running ``step`` with ``data`` as its record (the reboot
        step re-verifying what held before it)."""
        return replace(self, step=step, data=data)

    def unfinished(self) -> list[dict[str, Any]]:
        """The journal's intents without an outcome: effects a kill interrupted."""
        return list(getattr(self.engine.checkpoint, "unfinished", []) or [])
