"""One verdict function: a gate's verdict from the steps that prove it and their findings.

The headless outcome (and the demo's gate table), the report files, ``status`` and the
TUI's report all call ``judge_gates``, over the checkpoint's records (so a resumed run shows
the verdicts of steps settled earlier too). A gate passes only when every step that proves
it ran on every target it runs on: a run stopped in phase 1 has T11 "partial" (the IOMMU/ACS
preflight passed, the GPU-memory RDMA measurements never ran), never "pass".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

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

Records = Mapping[tuple[str, str], tuple[StepState, Sequence[Finding]]]


def judge_gates(plan: Plan, site: Site, records: Records) -> dict[str, GateVerdict]:
    """Every gate's verdict: fail as soon as an unwaived failure is recorded; otherwise
    "not run" until a step that proves it ran, "partial" until all of them ran on every
    target, then the worst unwaived finding (a waived failure is a warning; a skipped step
    makes an otherwise passing gate skip)."""
    by_gate: dict[str, list[Finding]] = {}
    for _state, findings in records.values():
        for finding in findings:
            by_gate.setdefault(finding.gate, []).append(finding)
    result = {}
    for gate in GATES:
        provers = [
            (step.id, target)
            for step in plan.steps()
            if gate in step.gates
            for target in plan.targets(step, site)
        ]
        ran = [key for key in provers if key in records and records[key][0] in RAN]
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


def state_records(state: dict[str, Any] | None) -> dict[tuple[str, str], tuple[StepState, list]]:
    """The records ``judge_gates`` reads, from a checkpoint's state."""
    records = {}
    for step, targets in ((state or {}).get("steps") or {}).items():
        for target, record in targets.items():
            findings = [Finding.from_json(f) for f in record.get("findings", [])]
            records[(step, target)] = (StepState(record.get("state", "pending")), findings)
    return records


def checkpoint_findings(state: dict[str, Any] | None, plan: Plan) -> list[tuple[str, str, Finding]]:
    """(step, target, finding) for every finding the checkpoint holds, in plan order."""
    steps = (state or {}).get("steps", {})
    return [
        (step.id, target, Finding.from_json(data))
        for step in plan.steps()
        for target, record in steps.get(step.id, {}).items()
        for data in record.get("findings", [])
    ]
