"""What a checkpoint holds, for `status` and the TUI's start screen (no lock needed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wizard.checkpoint import (
    EarlierResult,
    Waiver,
    changed_sections,
    finish_command,
    foreign_site_file,
    load_run,
    site_state_dir,
)
from wizard.fleet import group_targets, targets_text
from wizard.model import Finding, StepState, worst
from wizard.plan import Plan
from wizard.runview import Cordon, fold
from wizard.site import Site
from wizard.verdict import GateVerdict, RunVerdict


@dataclass
class StepStatus:
    step: str
    title: str
    phase: str
    target: str
    state: StepState
    message: str = ""
    severity: str = ""
    finished: str | None = None
    findings: list[Finding] = field(default_factory=list)
    earlier: tuple[EarlierResult, ...] = ()  # failures a skip replaced


@dataclass
class Status:
    directory: Path
    exists: bool
    created: str | None = None
    updated: str | None = None
    steps: list[StepStatus] = field(default_factory=list)
    changed_sections: list[str] = field(default_factory=list)
    would_reset: list[tuple[str, str]] = field(default_factory=list)
    waivers: tuple[Waiver, ...] = ()
    # Maintenance changes begun and neither finished nor rolled back, with what finishes them.
    in_flight: list[str] = field(default_factory=list)
    gates: dict[str, GateVerdict] = field(default_factory=dict)
    cordoned: list[Cordon] = field(default_factory=list)
    # The run's verdict as a whole, the one the exit code of a run is (wizard/verdict.py).
    verdict: RunVerdict | None = None
    # Another site file's checkpoint (the same name:): why it is not this one's.
    foreign: str | None = None

    @property
    def interrupted(self) -> list[StepStatus]:
        return [s for s in self.steps if s.state in (StepState.RUNNING, StepState.WAITING)]

    def to_json(self) -> dict[str, Any]:
        return {
            "checkpoint": str(self.directory),
            "exists": self.exists,
            "belongs_to_another_site_file": self.foreign,
            "created": self.created,
            "updated": self.updated,
            "site_changed": self.changed_sections,
            "would_reset": [{"step": s, "target": t} for s, t in self.would_reset],
            "waivers": [w.to_json() for w in self.waivers],
            "verdict": self.verdict.value if self.verdict is not None else None,
            "in_flight": self.in_flight,
            "gates": {gate: v.value for gate, v in self.gates.items()},
            "cordoned": [
                {
                    "node": c.node,
                    "step": c.step,
                    "why": c.why,
                    "since": c.since,
                    "uncordon": c.remedy,
                }
                for c in self.cordoned
            ],
            "steps": [
                {
                    "step": s.step,
                    "phase": s.phase,
                    "target": s.target,
                    "state": s.state.value,
                    "severity": s.severity,
                    "message": s.message,
                    "finished": s.finished,
                    "findings": [f.to_json() for f in s.findings],
                }
                for s in self.steps
            ],
        }


def load_status(state_dir: Path, site: Site, plan: Plan) -> Status:
    directory = site_state_dir(state_dir, site)
    run = load_run(directory)
    if run is None:
        return Status(directory, exists=False)
    foreign = foreign_site_file(run, site)
    if foreign is not None:  # never shown as this site's: its steps are another file's
        return Status(directory, exists=False, foreign=foreign)
    changed = changed_sections(run.site.sections, site)
    view = fold(run, plan, site)
    status = Status(
        directory,
        exists=True,
        created=run.created,
        updated=run.updated,
        changed_sections=changed,
        would_reset=[(s, t) for s, t in plan.invalidated(changed, site) if (s, t) in run.steps],
        waivers=run.waivers,
        gates=view.gates(),
        cordoned=view.cordoned(),
        verdict=view.verdict(),
    )
    command = finish_command(site, state_dir)
    for step, target, change in view.in_flight():
        status.in_flight.append(
            f"{step} on {target} (maintenance stage {change.stage:.40}, since "
            f"{change.since:.40}): {command} finishes it or rolls it back"
        )
    for phase in plan.phases:
        for step in phase.steps:
            for target in plan.targets(step, site):
                record = view.record(step.id, target)
                findings = list(record.findings)
                status.steps.append(
                    StepStatus(
                        step=step.id,
                        title=step.title,
                        phase=f"{phase.number}. {phase.title}",
                        target=target,
                        state=record.state,
                        message=record.message,
                        severity=worst(findings).value if findings else "",
                        finished=record.finished,
                        findings=findings,
                        earlier=record.earlier,
                    )
                )
    return status


def format_status(status: Status) -> str:
    if status.foreign is not None:
        return f"{status.directory}: {status.foreign}"
    if not status.exists:
        return f"no checkpoint yet for this site (would be {status.directory})"
    lines = [
        f"checkpoint: {status.directory}",
        f"created {status.created}, updated {status.updated}",
    ]
    if status.changed_sections:
        lines.append(
            "site file changed since the checkpoint: " + ", ".join(status.changed_sections)
        )
        if status.would_reset:
            lines.append(
                "  the next run resets: " + ", ".join(f"{s} on {t}" for s, t in status.would_reset)
            )
    for line in status.in_flight:
        lines.append(f"IN FLIGHT: {line}")
    for cordon in status.cordoned:
        lines.append(f"CORDONED: {cordon.text()}")
        lines.append(f"  to uncordon: {cordon.remedy}")
    if status.interrupted:
        lines.append(
            "interrupted (re-verified first on resume): "
            + ", ".join(f"{s.step} on {s.target}" for s in status.interrupted)
        )
    for waiver in status.waivers:
        lines.append(f"waived: {waiver.check} ({waiver.reason}; {waiver.by or '?'})")
    if status.gates:
        lines.append("gates: " + gates_text(status.gates))
    if status.verdict is not None:
        lines.append(f"verdict: {status.verdict.value}")
    phase = None
    steps: dict[str, list[StepStatus]] = {}
    for s in status.steps:
        steps.setdefault(s.step, []).append(s)
    for records in steps.values():
        if records[0].phase != phase:
            phase = records[0].phase
            lines.append(f"{phase}")
        # Nodes with the same outcome share a line: on a fleet the exceptions stand out.
        outcomes = group_targets(
            ((r.state.value, r.severity, r.message), r.target) for r in records
        )
        for (state, severity, message), targets in outcomes:
            detail = f" [{severity}]" if severity else ""
            said = f" - {message}" if message else ""
            lines.append(f"  {state:<8} {records[0].step} on {targets_text(targets)}{detail}{said}")
        for r in records:
            for before in r.earlier:
                lines.append(
                    f"           before that on {r.target}: {before.state} - "
                    f"{before.message} ({before.finished or '?'})"
                )
    return "\n".join(lines)


def gates_text(gates: dict[str, GateVerdict]) -> str:
    """``fail T03; pass T00 T01; partial T11; not run T12 T13``: worst first, one verdict
    a group (a gate is "pass" only when every step that proves it ran)."""
    order = ["fail", "warn", "skip", "partial", "not run", "pass"]
    groups: dict[str, list[str]] = {}
    for gate, v in gates.items():
        groups.setdefault(v.value, []).append(gate)
    return "; ".join(f"{v} {' '.join(groups[v])}" for v in order if v in groups)
