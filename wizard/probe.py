"""Probes: a command plus its parser, run on a host, kept with the evidence it gives.

A finding always carries the command and the output lines it was drawn from, so an
operator can see *why* the wizard says what it says. Given a ``Command`` (the command and
its parser declared once, wizard/facts/command.py), a probe's fact has the parser's type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, overload

from wizard.facts import Command, Fact, ParseError, kind_of, parse
from wizard.model import Evidence, Finding, Severity, gate_id
from wizard.plan import StepContext
from wizard.transports.base import CommandResult

EXCERPT_LINES = 14

F = TypeVar("F", bound=Fact)


@dataclass
class Probe(Generic[F]):
    """What one probe produced: the fact (typed by its Command's parser), or why there is
    none (``fact`` is then None and ``ok`` False: read it behind ``ok``)."""

    command: str
    result: CommandResult
    fact: F = None  # type: ignore[assignment]  # None only when not ok
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.fact is not None

    def evidence(self, match: Callable[[str], bool] | None = None) -> Evidence:
        text = self.result.stdout if self.result.stdout.strip() else self.result.stderr
        lines = [line for line in text.splitlines() if match is None or match(line)]
        if len(lines) > EXCERPT_LINES:
            lines = [*lines[:EXCERPT_LINES], f"[... {len(lines) - EXCERPT_LINES} more lines]"]
        return Evidence(self.command, "\n".join(lines))


@overload
async def probe(
    ctx: StepContext,
    command: Command[F],
    parser: None = None,
    *,
    on: str | None = None,
    keep: Callable[[str], bool] | None = None,
    sudo: bool | None = None,
) -> Probe[F]: ...
@overload
async def probe(
    ctx: StepContext,
    command: str | Sequence[str],
    parser: Callable[[str], F],
    *,
    on: str | None = None,
    keep: Callable[[str], bool] | None = None,
    sudo: bool | None = None,
) -> Probe[F]: ...
async def probe(
    ctx: StepContext,
    command: Command[Any] | str | Sequence[str],
    parser: Callable[[str], Any] | None = None,
    *,
    on: str | None = None,
    keep: Callable[[str], bool] | None = None,
    sudo: bool | None = None,
) -> Probe[Any]:
    """Run ``command`` and parse its output (``keep`` filters lines first): a ``Command``
    by its own parser, a command line by ``parser`` (a registered one, wizard.facts: the
    probe's fact has its type; a kind's name is refused)."""
    if isinstance(command, Command):
        command, parser = list(command.argv), command.parser
    if parser is None:
        raise TypeError("probe() of a command line needs the parser its output is read by")
    kind_of(parser)  # a kind's name, or an unregistered function, is a bug here
    return _parsed(await ctx.run(command, on=on, sudo=sudo), parser, keep)


@dataclass(frozen=True)
class Read(Generic[F]):
    """One of a step's independent reads: a command and the parser its output is read by
    (a registered one, wizard.facts; None: the raw output is wanted, in ``Probe.result``).
    ``Read(COMMAND)`` takes both (and the runbook note) from a declared ``Command``."""

    command: str | Sequence[str] | Command[F]
    parser: Callable[[str], F] | None = None
    keep: Callable[[str], bool] | None = None
    note: str = ""  # shown after the command in the runbook (e.g. which lines are kept)
    # Non-zero exit statuses this read expects, each with its meaning (not an error).
    expected: Mapping[int, str] | None = None

    def __post_init__(self) -> None:
        declared = self.command
        if isinstance(declared, Command):
            object.__setattr__(self, "command", list(declared.argv))
            object.__setattr__(self, "parser", declared.parser)
            object.__setattr__(self, "note", self.note or declared.note)
        if self.parser is not None:
            kind_of(self.parser)  # a kind's name, or an unregistered function, is a bug here

    @property
    def kind(self) -> str | None:
        """The kind its parser reads (the facts contract's name), None for a raw read."""
        return None if self.parser is None else kind_of(self.parser)


async def read_all(ctx: StepContext, *reads: Read, on: str | None = None) -> list[Probe]:
    """Run a step's independent reads together (one SSH exec) and parse each.

    For steps whose probes do not depend on one another: on a 64-node fleet, one exec per
    step instead of one per command is most of the difference in wall time.
    """
    results = await ctx.run_many(
        [r.command for r in reads], on=on, expected=[r.expected for r in reads]
    )
    return [
        _parsed(result, read.parser, read.keep)
        if read.parser is not None
        else Probe(result.command, result)
        for read, result in zip(reads, results, strict=True)
    ]


def _parsed(
    result: CommandResult, parser: Callable[[str], F], keep: Callable[[str], bool] | None
) -> Probe[F]:
    text = result.stdout
    if keep is not None:
        text = "\n".join(line for line in text.splitlines() if keep(line))
    try:
        fact = parse(parser, text)
    except ParseError as exc:
        if result.exit_status not in (0, None):
            first = (result.stderr.strip() or result.stdout.strip()).splitlines()
            reason = first[0] if first else "no output"
            return Probe(result.command, result, None, f"exited {result.exit_status}: {reason}")
        return Probe(result.command, result, None, f"could not read the output ({exc.reason})")
    except Exception as exc:
        return Probe(
            result.command, result, None,
            f"could not read the output (the {kind_of(parser)} parser failed: {type(exc).__name__}: "
            f"{str(exc)[:120]}; this is a bug, the journal has the output)",
        )  # fmt: skip
    return Probe(result.command, result, fact)


@dataclass
class Report:
    """Collects the findings of one step on one target."""

    gate: str
    findings: list[Finding] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.gate = gate_id(self.gate)

    def add(
        self,
        name: str,
        severity: Severity,
        message: str,
        remediation: str = "",
        *evidence: Evidence,
        gate: str | None = None,
    ) -> None:
        gate = gate_id(gate or self.gate)  # a misspelt gate is a bug, not a new gate
        self.findings.append(
            Finding(f"{gate}.{name}", gate, severity, message, remediation, tuple(evidence))
        )

    def ok(self, name: str, message: str, *evidence: Evidence, gate: str | None = None) -> None:
        self.add(name, Severity.PASS, message, "", *evidence, gate=gate)

    def warn(
        self, name: str, message: str, fix: str, *evidence: Evidence, gate: str | None = None
    ) -> None:
        self.add(name, Severity.WARN, message, fix, *evidence, gate=gate)

    def fail(
        self, name: str, message: str, fix: str, *evidence: Evidence, gate: str | None = None
    ) -> None:
        self.add(name, Severity.FAIL, message, fix, *evidence, gate=gate)

    def skip(self, name: str, message: str, *evidence: Evidence, gate: str | None = None) -> None:
        self.add(name, Severity.SKIP, message, "", *evidence, gate=gate)

    def unreadable(self, name: str, p: Probe, what: str, *, gate: str | None = None) -> None:
        """A probe that produced no fact: a failure with the command's own words."""
        self.fail(
            name,
            f"cannot read {what}: `{p.command}` {p.problem}",
            "run the command on the node by hand and check the tool is installed",
            p.evidence(),
            gate=gate,
        )
