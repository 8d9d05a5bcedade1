"""One verdict function: a gate's verdict from the findings behind it.

The headless outcome, the report files and the TUI's report all call it, over the
checkpoint's findings (so a resumed run shows the verdicts of steps settled earlier too).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from wizard.model import GATES, Finding, Severity, verdict
from wizard.plan import Plan


def gate_verdicts(findings: Iterable[Finding]) -> dict[str, Severity | None]:
    """Every gate's verdict: the worst unwaived finding (a waived failure is a warning;
    a skipped step makes an otherwise passing gate skip); None for a gate nothing judged."""
    by_gate: dict[str, list[Finding]] = {}
    for finding in findings:
        by_gate.setdefault(finding.gate, []).append(finding)
    return {gate: (verdict(by_gate[gate]) if gate in by_gate else None) for gate in GATES}


def checkpoint_findings(state: dict[str, Any] | None, plan: Plan) -> list[tuple[str, str, Finding]]:
    """(step, target, finding) for every finding the checkpoint holds, in plan order."""
    steps = (state or {}).get("steps", {})
    return [
        (step.id, target, Finding.from_json(data))
        for step in plan.steps()
        for target, record in steps.get(step.id, {}).items()
        for data in record.get("findings", [])
    ]
