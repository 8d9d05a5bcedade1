"""Probes: a command plus its parser, run on a host, kept with the evidence it gives.

A finding always carries the command and the output lines it was drawn from, so an
operator can see *why* the wizard says what it says.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from wizard.facts import ParseError, parse
from wizard.model import Evidence, Finding, Severity
from wizard.plan import StepContext
from wizard.transports.base import CommandResult

EXCERPT_LINES = 14


@dataclass
class Probe:
    """What one probe produced: the fact, or why there is none."""

    command: str
    result: CommandResult
    fact: Any = None
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


async def probe(
    ctx: StepContext,
    command: str | Sequence[str],
    kind: str,
    *,
    on: str | None = None,
    keep: Callable[[str], bool] | None = None,
    sudo: bool | None = None,
) -> Probe:
    """Run ``command`` and parse its output as ``kind`` (``keep`` filters lines first)."""
    return _parsed(await ctx.run(command, on=on, sudo=sudo), kind, keep)


@dataclass(frozen=True)
class Read:
    """One of a step's independent reads: a command and the kind its output is parsed as
    (None: the raw output is wanted, in ``Probe.result``)."""

    command: str | Sequence[str]
    kind: str | None = None
    keep: Callable[[str], bool] | None = None
    note: str = ""  # shown after the command in the runbook (e.g. which lines are kept)


async def read_all(ctx: StepContext, *reads: Read, on: str | None = None) -> list[Probe]:
    """Run a step's independent reads together (one SSH exec) and parse each.

    For steps whose probes do not depend on one another: on a 64-node fleet, one exec per
    step instead of one per command is most of the difference in wall time.
    """
    results = await ctx.run_many([r.command for r in reads], on=on)
    return [
        _parsed(result, read.kind, read.keep)
        if read.kind is not None
        else Probe(result.command, result)
        for read, result in zip(reads, results, strict=True)
    ]


def _parsed(result: CommandResult, kind: str, keep: Callable[[str], bool] | None) -> Probe:
    text = result.stdout
    if keep is not None:
        text = "\n".join(line for line in text.splitlines() if keep(line))
    try:
        fact = parse(kind, text)
    except ParseError as exc:
        if result.exit_status not in (0, None):
            first = (result.stderr.strip() or result.stdout.strip()).splitlines()
            reason = first[0] if first else "no output"
            return Probe(result.command, result, None, f"exited {result.exit_status}: {reason}")
        return Probe(result.command, result, None, f"could not read the output ({exc.reason})")
    except Exception as exc:
        return Probe(
            result.command, result, None,
            f"could not read the output (the {kind} parser failed: {type(exc).__name__}: "
            f"{str(exc)[:120]}; this is a bug, the journal has the output)",
        )  # fmt: skip
    return Probe(result.command, result, fact)


@dataclass
class Report:
    """Collects the findings of one step on one target."""

    gate: str
    findings: list[Finding] = field(default_factory=list)

    def add(
        self,
        name: str,
        severity: Severity,
        message: str,
        remediation: str = "",
        *evidence: Evidence,
        gate: str | None = None,
    ) -> None:
        gate = gate or self.gate
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
