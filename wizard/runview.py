"""The one fold over a run: what every reader of a run shows, from the checkpoint's typed
state (``wizard.checkpoint.RunState``) and, while a run goes on, the engine's events.

``status``, the report files, the headless outcome and its exit code, the TUI's main
screen, its fleet view and its report all read a ``RunView``: each (step, target)'s
record, the findings in the order they were found, the gates' verdicts (from
``wizard.verdict``, the one verdict function), the cordoned nodes and the changes in
flight. A record replaces the one before it, as it does in the checkpoint: a retry's
result takes the place of the failure it retried (a superseded failure must not stand
beside its waiver), so no front end keeps a retry rule of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from wizard.approvals import Addition, Approval
from wizard.checkpoint import CordonMark, Maintenance, RunState, StepRecord, Waiver
from wizard.events import Event, StepFinished, StepStarted
from wizard.model import Finding, StepState
from wizard.plan import Plan
from wizard.site import Site
from wizard.verdict import GateVerdict, RunVerdict, judge_gates, judge_run


@dataclass(frozen=True)
class Cordon:
    """A node the wizard cordoned and has not uncordoned (a change in flight, or one that
    failed to verify): nothing new is scheduled there until it is uncordoned. Recorded by
    the maintenance sequence beside the step records (``RunState.cordons``), before the
    cordon, and cleared when any step's uncordon of the node returned."""

    node: str
    step: str
    why: str
    since: str
    stage: str = "cordoned"

    @property
    def remedy(self) -> str:
        return (
            f"`run SITE --redo {self.step}@{self.node}` finishes the change and uncordons the "
            f"node once it verifies; or fix it by hand, then `kubectl uncordon {self.node}`"
        )

    def text(self) -> str:
        being = {"cordoning": " (being cordoned)", "uncordoning": " (being uncordoned)"}
        return (
            f"{self.node} is cordoned{being.get(self.stage, '')} (by {self.step}, since "
            f"{self.since}): {self.why}"
        )


Key = tuple[str, str]


@dataclass
class RunView:
    """Every (step, target) record of a run, and what is derived from them."""

    # A front end built before the plan is known (the headless one) folds the events
    # alone: without a plan no step proves a gate, so ``gates`` judges the findings only.
    plan: Plan = field(default_factory=lambda: Plan(()))
    site: Site | None = None
    records: dict[Key, StepRecord] = field(default_factory=dict)
    waivers: tuple[Waiver, ...] = ()
    updated: str | None = None  # when the checkpoint was last written
    # The changes outside the new nodes the operator approved by name (wizard/approvals.py).
    approvals: tuple[Approval, ...] = ()
    # Counts the changes folded in: a screen fed this view redraws when it moved (and
    # only then), whoever folded the change in.
    revision: int = field(default=0, compare=False)
    # node -> the wizard's own cordon of it, not yet uncordoned (``RunState.cordons``).
    cordons: Mapping[str, CordonMark] = field(default_factory=dict)
    # The objects made for the new nodes only, listed by name (wizard/approvals.py).
    additions: tuple[Addition, ...] = ()
    _findings: list[tuple[str, str, Finding]] | None = field(default=None, repr=False)

    # -- building -------------------------------------------------------------------------

    def put(self, step: str, target: str, record: StepRecord) -> None:
        """Record the latest result of ``step`` on ``target`` (it replaces the one before)."""
        key = (step, target)
        self.revision += 1
        before = self.records.pop(key, None)
        self.records[key] = record  # a replaced record moves last: found again, just now
        if self._findings is None:
            return
        if before is not None and before.findings:
            self._findings = None  # rebuilt on the next read (a retry: rare)
        else:
            self._findings.extend((step, target, f) for f in record.findings)

    def apply(self, event: Event) -> bool:
        """Fold one of the engine's events into the view, as the engine records the same
        transition in the checkpoint (``Checkpoint.set_step``); whether it changed it."""
        match event:
            case StepStarted(step=step, target=target):
                # Running again: the earlier findings stay until the new result replaces them.
                before = self.records.get((step, target), StepRecord(recorded=True))
                self.records[(step, target)] = replace(before, state=StepState.RUNNING)
                self.revision += 1
                return True
            case StepFinished(step=step, target=target, state=state, message=msg, findings=fs):
                self.put(
                    step,
                    target,
                    StepRecord(state=state, message=msg, findings=tuple(fs), recorded=True),
                )
                return True
        return False

    # -- reading ---------------------------------------------------------------------------

    def record(self, step: str, target: str) -> StepRecord:
        return self.records.get((step, target)) or StepRecord()

    def state(self, step: str, target: str) -> StepState | None:
        """The step's state on the target; None when it has no record yet."""
        record = self.records.get((step, target))
        return record.state if record is not None else None

    @property
    def states(self) -> dict[Key, StepState]:
        return {key: record.state for key, record in self.records.items()}

    @property
    def findings(self) -> list[tuple[str, str, Finding]]:
        """(step, target, finding) of every record, in the order they were found."""
        if self._findings is None:
            self._findings = [
                (step, target, finding)
                for (step, target), record in self.records.items()
                for finding in record.findings
            ]
        return self._findings

    def plan_findings(self) -> list[tuple[str, str, Finding]]:
        """The same findings in plan order (the report's)."""
        order = {step.id: i for i, step in enumerate(self.plan.steps())}
        keyed = [item for item in self.findings if item[0] in order]
        return sorted(keyed, key=lambda item: order[item[0]])

    def gates(self) -> dict[str, GateVerdict]:
        if self.site is None and self.plan.phases:
            raise ValueError("the gates of a plan are judged on a site: the view has none")
        return judge_gates(self.plan, self.site, self.records)

    def verdict(self, *, stopped: bool = False, in_flight: bool | None = None) -> RunVerdict:
        """The one verdict over these records. ``in_flight``: whether a change is left in
        flight, when the caller knows better than the records (a run's summary, whose
        records carry no maintenance stage); by default, from the records."""
        if in_flight is None:
            in_flight = bool(self.in_flight())
        return judge_run(
            self.records, stopped=stopped, in_flight=in_flight, cordoned=bool(self.cordons)
        )

    def in_flight(self) -> list[tuple[str, str, Maintenance]]:
        return [
            (step, target, record.maintenance)
            for (step, target), record in self.records.items()
            if record.maintenance is not None and record.in_flight
        ]

    def cordoned(self) -> list[Cordon]:
        """Every node the wizard holds cordoned: one per node, whichever step did it."""
        return [
            Cordon(node, mark.by, mark.why, mark.since, mark.stage)
            for node, mark in sorted(self.cordons.items())
        ]

    def waiting(self) -> list[tuple[str, str, str]]:
        """(step, target, what it waits for) of every step waiting on the operator or on
        the node: the decision pending when the run stopped."""
        return [
            (step, target, record.message)
            for (step, target), record in self.records.items()
            if record.state is StepState.WAITING
        ]


def fold(run: RunState | None, plan: Plan, site: Site) -> RunView:
    """The view of a checkpoint's state (an empty view when there is none)."""
    if run is None:
        return RunView(plan, site)
    return RunView(
        plan,
        site,
        dict(run.steps),
        run.waivers,
        run.updated,
        run.approvals,
        cordons=dict(run.cordons),
        additions=run.additions,
    )


def of_results(
    plan: Plan,
    site: Site,
    states: Mapping[Key, StepState],
    findings: Iterable[tuple[str, str, Finding]],
) -> RunView:
    """A view of results known without a checkpoint (a run's summary, a test's screen): a
    finding without a state is of a step that is done."""
    grouped: dict[Key, list[Finding]] = {}
    for step, target, finding in findings:
        grouped.setdefault((step, target), []).append(finding)
    view = RunView(plan, site)
    for key in [*states, *(k for k in grouped if k not in states)]:
        state = states.get(key, StepState.DONE)
        view.put(*key, StepRecord(state=state, findings=tuple(grouped.get(key, ())), recorded=True))
    return view
