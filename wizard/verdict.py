"""One verdict function: a gate's verdict from the steps that prove it and their findings.

The headless outcome (and the demo's gate table), the report files, ``status`` and the
TUI's report all call ``judge_gates`` (through ``wizard.runview.RunView``), over the
checkpoint's records (so a resumed run shows
the verdicts of steps settled earlier too). A gate passes only when every step that proves
it ran on every target it runs on: a run stopped in phase 1 has T11 "partial" (the IOMMU/ACS
preflight passed, the GPU-memory RDMA measurements never ran), never "pass".
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

from wizard.checkpoint import StepRecord
from wizard.model import GATES, Finding, Severity, StepState, is_skipped_step, verdict
from wizard.plan import Plan
from wizard.site import Site


class GateVerdict(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"  # a step that proves it was skipped (by the operator or with its provider)
    PARTIAL = "partial"  # some of the steps that prove it ran, not all: nothing failed so far
    NOT_RUN = "not run"  # none of the steps that prove it ran yet

    @property
    def complete(self) -> bool:
        """Judged from every step that proves the gate (pass, warn, fail or skip)."""
        return self not in (GateVerdict.PARTIAL, GateVerdict.NOT_RUN)


# A (step, target) ran when it reached one of these: its findings are its verdict.
RAN = (StepState.DONE, StepState.FAILED, StepState.SKIPPED)

Records = Mapping[tuple[str, str], StepRecord]


def judge_gates(plan: Plan, site: Site, records: Records) -> dict[str, GateVerdict]:
    """Every gate's verdict: fail as soon as an unwaived failure is recorded; otherwise
    "not run" until a step that proves it ran, "partial" until all of them ran on every
    target, then the worst unwaived finding (a waived failure is a warning; a skipped step
    makes an otherwise passing gate skip)."""
    by_gate: dict[str, list[Finding]] = {}
    for record in records.values():
        for finding in record.findings:
            by_gate.setdefault(finding.gate, []).append(finding)
    result = {}
    for gate in GATES:
        provers = [
            (step.id, target)
            for step in plan.steps()
            if gate in step.gates
            for target in plan.targets(step, site)
        ]
        ran = [key for key in provers if key in records and records[key].state in RAN]
        findings = by_gate.get(gate, [])
        judged = verdict(findings) if findings else None
        if judged is Severity.FAIL:
            result[gate] = GateVerdict.FAIL
        elif any(is_skipped_step(f) for f in findings):
            # A step that proves it was skipped: it cannot pass, whatever runs after.
            result[gate] = GateVerdict.SKIP
        elif not ran and not findings:
            result[gate] = GateVerdict.NOT_RUN
        elif len(ran) < len(provers) or judged is None:
            result[gate] = GateVerdict.PARTIAL
        else:
            result[gate] = GateVerdict(judged.value)
    return result


class RunVerdict(StrEnum):
    """A run's outcome as a whole: what the exit code and ``status`` say."""

    OK = "ok"
    FAILED = "failed"  # a check failed, a step was blocked, the run stopped or left a change
    UNREACHABLE = "unreachable"  # a node could not be reached: the site file or the network
    INTERNAL_ERROR = "internal error"  # a bug of the wizard, not a condition of the site


_CONNECTION_CHECKS = (".reachable",)


def judge_run(
    records: Records,
    *,
    stopped: bool = False,
    in_flight: bool = False,
    cordoned: bool = False,
) -> RunVerdict:
    """The run's verdict from its records: a bug of the wizard first, then an unreachable
    node, then any unwaived failure (also one a later skip took the place of: the step
    failed, nothing since proved it), blocked step (it did not run: not a success), stop,
    change left in flight or node the wizard left cordoned (out of service: not ready).
    ``status``, the report's verdict line and every exit code read this one verdict."""
    findings = [f for record in records.values() for f in record.findings]
    if any(is_internal_error(f) for f in findings):
        return RunVerdict.INTERNAL_ERROR
    if any(is_unreachable(f) for f in findings):
        return RunVerdict.UNREACHABLE
    failed = any(f.severity is Severity.FAIL and not f.waived for f in findings)
    failed = failed or any(
        e.state == StepState.FAILED.value for r in records.values() for e in r.earlier
    )
    blocked = any(r.state is StepState.BLOCKED for r in records.values())
    if failed or blocked or stopped or in_flight or cordoned:
        return RunVerdict.FAILED
    return RunVerdict.OK


def is_internal_error(finding: Finding) -> bool:
    return finding.check.endswith(".internal-error")


def is_unreachable(finding: Finding) -> bool:
    return finding.check.endswith(_CONNECTION_CHECKS)
