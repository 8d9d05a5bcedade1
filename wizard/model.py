"""The engine's vocabulary: gates, findings, step kinds and states.

Plain dataclasses and enums, serialisable to the checkpoint as JSON. Nothing here knows
how a finding was produced or how it will be shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Gate(StrEnum):
    """The acceptance gates, T00-T17 (DOMAIN.md). The value is the id the CLI, the JSON,
    the report and the runbook spell; a step's ``gates`` and a ``Report``'s gate must be
    one of them (a misspelt gate is refused, not a gate of its own)."""

    T00 = "T00"
    T01 = "T01"
    T02 = "T02"
    T03 = "T03"
    T04 = "T04"
    T05 = "T05"
    T06 = "T06"
    T07 = "T07"
    T08 = "T08"
    T09 = "T09"
    T10 = "T10"
    T11 = "T11"
    T12 = "T12"
    T13 = "T13"
    T14 = "T14"
    T15 = "T15"
    T16 = "T16"
    T17 = "T17"


def gate_id(gate: str) -> str:
    """``gate`` checked against ``Gate``, as its plain id (ValueError names the known)."""
    try:
        return Gate(gate).value
    except ValueError:
        raise ValueError(f"{gate!r} is no gate; the gates are T00-T17") from None


# The gate of a finding about a step that proves no gate (its ``gates`` is empty): such a
# finding counts against no gate's verdict, and its check is named after the step
# ("<step>.internal-error"), never after a gate it does not prove. The run's verdict still
# counts it (``wizard.verdict.judge_run``).
NO_GATE = ""


# What each gate checks, by id (plain strings: the form every output writes).
GATES: dict[str, str] = {
    "T00": "OS / Kubernetes / containerd",
    "T01": "GPU Operator 26.7",
    "T02": "E810 ice / irdma",
    "T03": "RDMA device plugin",
    "T04": "RDMA functional",
    "T05": "TCP baseline",
    "T06": "RDMA bandwidth",
    "T07": "QP scaling",
    "T08": "PFC / ECN",
    "T09": "Cilium coexistence",
    "T10": "LACP",
    "T11": "GPU-memory RDMA",
    "T12": "DMA-BUF GPUDirect",
    "T13": "AIStor TCP",
    "T14": "AIStor RDMA / direct path",
    "T15": "vLLM",
    "T16": "soak",
    "T17": "reboot / upgrade",
}


class Severity(StrEnum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"

    @property
    def rank(self) -> int:
        return {"skip": 0, "pass": 1, "warn": 2, "fail": 3}[self.value]


class StepKind(StrEnum):
    CHECK = "check"
    APPLY = "apply"
    MAINTENANCE = "maintenance"
    MEASURE = "measure"
    MANUAL = "manual"


class StepState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"  # e.g. for a rebooting node; resumable from another process
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"
    BLOCKED = "blocked"

    @property
    def settled(self) -> bool:
        """A state a resumed run does not repeat on its own."""
        return self in (StepState.DONE, StepState.SKIPPED)


@dataclass(frozen=True)
class Evidence:
    """What a finding was drawn from: the command and the output lines it read."""

    command: str
    excerpt: str = ""


@dataclass(frozen=True)
class Finding:
    """The result of one check on one target."""

    check: str  # stable name, e.g. "T00.containerd-version": waivers refer to it
    gate: str
    severity: Severity
    message: str
    remediation: str = ""
    evidence: tuple[Evidence, ...] = ()
    waived: str | None = None  # the waiver's reason, when an operator waived a failure

    def to_json(self) -> dict[str, Any]:
        # Spelled out rather than dataclasses.asdict (a deep copy by reflection): a fleet
        # run serialises tens of thousands of findings.
        return {
            "check": self.check,
            "gate": self.gate,
            "severity": self.severity.value,
            "message": self.message,
            "remediation": self.remediation,
            "evidence": [{"command": e.command, "excerpt": e.excerpt} for e in self.evidence],
            "waived": self.waived,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Finding:
        return cls(
            check=data["check"],
            gate=data["gate"],
            severity=Severity(data["severity"]),
            message=data["message"],
            remediation=data.get("remediation", ""),
            evidence=tuple(Evidence(**e) for e in data.get("evidence", [])),
            waived=data.get("waived"),
        )


# The check name's suffix of "this step was skipped" (by the operator, or because a step
# whose result it needs was skipped): such a finding turns its gate's verdict to skip.
SKIPPED_CHECK = ".skipped"


def skipped_finding(step: str, gate: str, target: str, why: str, remedy: str) -> Finding:
    """The record that ``step`` did not run on ``target``: its gate cannot pass without it."""
    return Finding(
        f"{step}{SKIPPED_CHECK}", gate, Severity.SKIP, f"{step} on {target}: {why}", remedy
    )


def is_skipped_step(finding: Finding) -> bool:
    return finding.severity is Severity.SKIP and finding.check.endswith(SKIPPED_CHECK)


def worst(findings: list[Finding]) -> Severity:
    """The most severe unwaived finding (a waived failure counts as a warning)."""
    result = Severity.SKIP if findings else Severity.PASS
    for finding in findings:
        severity = Severity.WARN if finding.waived else finding.severity
        if severity.rank > result.rank:
            result = severity
    return result


def verdict(findings: list[Finding]) -> Severity:
    """A gate's verdict from its findings: the worst unwaived one, except that a gate
    with a skipped step and nothing worse than passes is skipped, never passed: the
    other checks passing does not make up for a change that was not made."""
    result = worst(findings)
    if result is Severity.PASS and any(is_skipped_step(f) for f in findings):
        return Severity.SKIP
    return result


@dataclass
class Measurement:
    """A number a measure step recorded, with the unit and what it was measured as."""

    name: str
    value: float
    unit: str
    labels: dict[str, str] = field(default_factory=dict)
