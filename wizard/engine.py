"""The engine: walks the plan's phases in order, across the site's nodes, checkpointing.

Rules it keeps (DESIGN.md, "State survives anything"):

- every transition is written to the checkpoint *before* the next action starts;
- a step recorded as done or skipped is not run again (checks run again only when the
  operator asks for that step or phase explicitly);
- a step found ``running`` or ``waiting`` (the process died in it) first re-verifies: if
  the change is already in place it is done, otherwise it is offered again;
- a failed step is offered again;
- a step whose prerequisites are not done is blocked, with the reason;
- a phase with a failure stops the flow on that target: later steps on it are blocked;
- nothing is applied before the front end answered ``proceed`` to a decision showing the
  diffs; maintenance steps also need the window confirmed with the node name typed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from wizard.artifacts import unified_diff
from wizard.checkpoint import Checkpoint, changed_sections
from wizard.errors import WizardError
from wizard.events import (
    Answer,
    ArtifactDiff,
    Decision,
    DecisionKind,
    Event,
    FrontEnd,
    Notice,
    PhaseStarted,
    Reply,
    StepCompleted,
    StepFinished,
    StepStarted,
)
from wizard.model import Finding, Severity, StepKind, StepState, worst
from wizard.plan import CLUSTER, Change, NotAutomated, Plan, Scope, Services, Step, StepContext
from wizard.site import Site
from wizard.transports.base import (
    AuthenticationError,
    CommandFailedError,
    CommandTimeoutError,
    HostKeyError,
    TransportError,
)


class Aborted(WizardError):
    """The operator aborted the run at a decision."""

    exit_code = 1


class DecisionRequired(WizardError):
    """A non-interactive front end met a decision it has no standing answer for."""

    exit_code = 1

    def __init__(self, decision: Decision, how: str) -> None:
        self.decision = decision
        super().__init__(
            f"stopped at step {decision.step} on {decision.target}: "
            f"{decision.kind.value} needs an answer ({how})"
        )


@dataclass
class RunSummary:
    """What one engine run did: the state of every (step, target) it touched."""

    results: dict[tuple[str, str], StepState] = field(default_factory=dict)
    findings: dict[tuple[str, str], list[Finding]] = field(default_factory=dict)
    stopped: str | None = None  # why the run ended early, if it did
    reset: list[tuple[str, str]] = field(default_factory=list)

    @property
    def failed(self) -> list[tuple[str, str]]:
        return [k for k, s in self.results.items() if s in (StepState.FAILED, StepState.BLOCKED)]

    @property
    def ok(self) -> bool:
        return not self.failed and self.stopped is None


class Engine:
    def __init__(
        self,
        site: Site,
        plan: Plan,
        checkpoint: Checkpoint,
        frontend: FrontEnd,
        services: Services | None = None,
        *,
        waivers: dict[str, str] | None = None,
    ) -> None:
        self.site = site
        self.plan = plan
        self.checkpoint = checkpoint
        self.frontend = frontend
        self.services = services or Services()
        self._waivers = {w["check"]: w["reason"] for w in checkpoint.state.get("waivers", [])}
        for check, reason in (waivers or {}).items():
            if not reason.strip():
                raise WizardError(f"waiver for {check} needs a reason")
            checkpoint.add_waiver(check, reason)
            self._waivers[check] = reason
        self._decision_lock = asyncio.Lock()
        self._approved: dict[str, tuple[tuple[str, str], ...]] = {}  # step -> same change
        self._shared_reads: dict[tuple[str, str], asyncio.Future[Any]] = {}
        self._ignore_requires = False
        self._node_slots = asyncio.Semaphore(site.max_parallel_nodes)

    # -- front-end plumbing --------------------------------------------------------------

    def emit(self, event: Event) -> None:
        self.frontend.emit(event)

    def journal(self, entry: dict[str, Any]) -> None:
        self.checkpoint.journal(entry)

    # -- resume ----------------------------------------------------------------------------

    def reconcile_site(self) -> list[tuple[str, str]]:
        """Reset the steps that a changed site file invalidates; return them."""
        changed = changed_sections(self.checkpoint.state, self.site)
        if not changed:
            return []
        recorded = self.checkpoint.state["steps"]
        reset = [
            (step, target)
            for step, target in self.plan.invalidated(changed, self.site)
            if target in recorded.get(step, {})
        ]
        for step, target in reset:
            self.checkpoint.reset(step, target)
        self.checkpoint.adopt_site(self.site)
        if reset:
            listing = ", ".join(f"{s} on {t}" for s, t in reset)
            self.emit(Notice(f"site file changed ({', '.join(changed)}); reset: {listing}"))
        return reset

    # -- running ---------------------------------------------------------------------------

    async def run(
        self,
        *,
        phase: str | None = None,
        step: str | None = None,
        only: list[str] | None = None,
        ignore_requires: bool = False,
    ) -> RunSummary:
        """Run the whole plan, one phase, one step, or the listed steps (``only``).

        ``ignore_requires`` is for read-only runs (``check``): every listed check runs even
        when an earlier step has not been done.
        """
        summary = RunSummary(reset=self.reconcile_site())
        explicit = phase is not None or step is not None or only is not None
        self._ignore_requires = ignore_requires
        try:
            for current in self.plan.phases:
                if phase is not None and phase not in (current.id, str(current.number)):
                    continue
                steps = [
                    s
                    for s in current.steps
                    if (step is None or s.id == step) and (only is None or s.id in only)
                ]
                if not steps:
                    continue
                self.emit(PhaseStarted(current.id, f"{current.number}. {current.title}"))
                for each in steps:
                    await self._run_step(each, summary, explicit=explicit)
                if not explicit and any(
                    summary.results.get((s.id, t)) in (StepState.FAILED, StepState.BLOCKED)
                    for s in steps
                    for t in self.plan.targets(s, self.site)
                ):
                    summary.stopped = f"phase {current.number} ({current.title}) did not pass"
                    break
        except Aborted as exc:
            summary.stopped = str(exc)
        return summary

    async def shared_read(self, key: tuple[str, str], read: Callable[[], Awaitable[Any]]) -> Any:
        """One answer per key for the current run of a step (see StepContext.shared);
        concurrent callers wait for the same request."""
        future = self._shared_reads.get(key)
        if future is None:
            future = self._shared_reads[key] = asyncio.ensure_future(read())
        return await asyncio.shield(future)

    async def _run_step(self, step: Step, summary: RunSummary, *, explicit: bool) -> None:
        targets = self.plan.targets(step, self.site)
        # A shared read answers one run of a step: the next run reads afresh.
        for key in [k for k in self._shared_reads if k[0] == step.id]:
            del self._shared_reads[key]

        async def one(target: str) -> None:
            if step.scope == Scope.NODE:
                async with self._node_slots:
                    state, findings = await self._run_target(step, target, explicit)
            else:
                state, findings = await self._run_target(step, target, explicit)
            summary.results[(step.id, target)] = state
            summary.findings[(step.id, target)] = findings

        for batch in self._batches(step, targets):
            failed_before = self._failed_nodes(summary, step)
            limit = self.site.rollout.failure_limit(len(targets))
            if failed_before > limit and step.kind in _CHANGING:
                for target in batch:
                    reason = (
                        f"rollout stopped: {failed_before} node(s) failed this step, more than "
                        f"rollout.max_failed_nodes={self.site.rollout.max_failed_nodes}"
                        + (
                            f" ({limit} of {len(targets)})"
                            if limit != self.site.rollout.max_failed_nodes
                            else ""
                        )
                    )
                    self.checkpoint.set_step(step.id, target, StepState.BLOCKED, message=reason)
                    self.emit(StepFinished(step.id, target, StepState.BLOCKED, reason))
                    summary.results[(step.id, target)] = StepState.BLOCKED
                    summary.findings[(step.id, target)] = []
                continue
            results = await asyncio.gather(*(one(t) for t in batch), return_exceptions=True)
            self.checkpoint.flush()  # the batch's read-only results, in one write
            for result in results:
                if isinstance(result, BaseException):
                    raise result
        self.emit(
            StepCompleted(step.id, tuple((t, summary.results[(step.id, t)]) for t in targets))
        )

    def _batches(self, step: Step, targets: list[str]) -> list[list[str]]:
        """Maintenance never runs on every node at once: it rolls in batches, each with its
        own window gate; apply steps too when rollout.apply_batch is set; measurements
        against the shared peer take turns; checks fan out."""
        if step.scope == Scope.NODE and step.one_node_at_a_time:
            return [[target] for target in targets]
        if step.scope != Scope.NODE or step.kind not in _CHANGING:
            return [targets]
        rollout = self.site.rollout
        size = (
            rollout.maintenance_size(len(targets))
            if step.kind is StepKind.MAINTENANCE
            else rollout.apply_size(len(targets))
        )
        return [targets[i : i + size] for i in range(0, len(targets), size)]

    @staticmethod
    def _failed_nodes(summary: RunSummary, step: Step) -> int:
        return sum(
            1
            for (s, _), state in summary.results.items()
            if s == step.id and state is StepState.FAILED
        )

    async def _run_target(
        self, step: Step, target: str, explicit: bool
    ) -> tuple[StepState, list[Finding]]:
        cp = self.checkpoint
        previous = cp.step_state(step.id, target)
        node = None if target == CLUSTER else self.site.node(target)
        ctx = StepContext(self.site, step, target, node, self.services, self)

        rerun_check = explicit and step.kind in (StepKind.CHECK, StepKind.MEASURE)
        if previous.settled and not rerun_check:
            findings = cp.findings(step.id, target)
            self.emit(StepFinished(step.id, target, previous, "already done (checkpoint)"))
            return previous, findings

        blocker = self._blocker(step, target, explicit)
        if blocker:
            cp.set_step(step.id, target, StepState.BLOCKED, message=blocker)
            self.emit(StepFinished(step.id, target, StepState.BLOCKED, blocker))
            return StepState.BLOCKED, []

        self.emit(StepStarted(step.id, target, step.title))
        try:
            if previous in (StepState.RUNNING, StepState.WAITING):
                done = await self._reverify(step, ctx)
                if done is not None:
                    return done
            return await self._dispatch(step, ctx)
        except TransportError as exc:
            finding = _transport_finding(step, exc)
            return self._finish(ctx, StepState.FAILED, [finding], str(exc))

    async def _reverify(self, step: Step, ctx: StepContext) -> tuple[StepState, list] | None:
        """After an interruption: if the step's result is already in place, it is done."""
        self.emit(Notice(f"{step.id} was interrupted on {ctx.target}; verifying first"))
        try:
            findings = self._waive(await step.verify(ctx))
        except NotAutomated:
            return None
        if findings and worst(findings) != Severity.FAIL:
            if step.kind is StepKind.MAINTENANCE:
                await step.finish(ctx, True)  # e.g. uncordon what the interrupted run cordoned
            return self._finish(ctx, StepState.DONE, findings, "verified after interruption")
        return None

    async def _dispatch(self, step: Step, ctx: StepContext) -> tuple[StepState, list[Finding]]:
        kind = step.kind
        if kind == StepKind.CHECK:
            return await self._check(step, ctx)
        if kind == StepKind.MEASURE:
            self.checkpoint.set_step(step.id, ctx.target, StepState.RUNNING)
            try:
                findings = self._waive(await step.measure(ctx))
            except NotAutomated:
                return self._not_automated(step, ctx)
            return self._finish(ctx, _state_for(findings), findings)
        if kind == StepKind.MANUAL:
            text = step.instructions(self.site, ctx.node)
            reply = await self._ask(
                Decision(DecisionKind.MANUAL_DONE, step.id, step.title, ctx.target, text)
            )
            if reply is Answer.SKIP:
                return self._finish(ctx, StepState.SKIPPED, [], "skipped by the operator")
            return await self._check(step, ctx)
        return await self._apply(step, ctx)

    async def _check(self, step: Step, ctx: StepContext) -> tuple[StepState, list[Finding]]:
        # A read-only check has no effect to protect, so no 'running' record is written
        # before it (on a fleet that halves the checkpoint writes); a change's verification
        # runs after apply() has already recorded 'running'.
        try:
            findings = self._waive(await step.verify(ctx))
        except NotAutomated:
            return self._not_automated(step, ctx)
        return self._finish(ctx, _state_for(findings), findings)

    async def _apply(self, step: Step, ctx: StepContext) -> tuple[StepState, list[Finding]]:
        refusals = self._waive(await step.preconditions(ctx))
        if worst(refusals) is Severity.FAIL:
            return self._finish(ctx, StepState.FAILED, refusals, "refused: a precondition failed")
        try:
            changes = await step.changes(ctx)
        except NotAutomated:
            return self._not_automated(step, ctx)
        pending = [c for c in changes if c.changed]
        if not pending:
            if changes:
                self.emit(Notice(f"{step.id}: already in place, nothing to change", ctx.target))
            return await self._check(step, ctx)
        maintenance = step.kind is StepKind.MAINTENANCE
        decision = Decision(
            DecisionKind.CONFIRM_APPLY,
            step.id,
            step.title,
            ctx.target,
            f"{len(pending)} change(s) on {ctx.target}",
            diffs=tuple(_diff(c) for c in changes),
            rollback=step.rollback(self.site, ctx.node),
            other_nodes=0 if maintenance else self._other_nodes(step, ctx.target),
        )
        if step.kind == StepKind.MAINTENANCE:
            window = Decision(
                DecisionKind.MAINTENANCE_WINDOW,
                step.id,
                step.title,
                ctx.target,
                f"{step.title} disrupts traffic on {ctx.target}. Confirm the maintenance "
                f"window is open by typing the node name.",
                diffs=decision.diffs,
                rollback=decision.rollback,
                confirm_text=ctx.target,
            )
            if await self._ask(window) is Answer.SKIP:
                return self._finish(ctx, StepState.SKIPPED, [], "maintenance window not confirmed")
        if not await self._confirmed(step, decision):
            return self._finish(ctx, StepState.SKIPPED, [], "skipped by the operator")
        self.checkpoint.set_step(step.id, ctx.target, StepState.RUNNING)
        try:
            await step.apply(ctx, pending)
        except NotAutomated:
            return self._not_automated(step, ctx)
        except TransportError as exc:
            if step.kind is not StepKind.MAINTENANCE:
                raise
            # A maintenance change that broke off part-way must not leave the node half done.
            failed = [_transport_finding(step, exc)]
            return await self._offer_rollback(
                step, ctx, decision, failed, "the change failed part-way"
            )
        if step.kind is not StepKind.MAINTENANCE:
            return await self._check(step, ctx)
        return await self._verify_maintenance(step, ctx, decision)

    async def _verify_maintenance(
        self, step: Step, ctx: StepContext, decision: Decision
    ) -> tuple[StepState, list[Finding]]:
        """Verify; on failure offer the rollback; then let the step finish (uncordon...)."""
        findings = self._waive(await step.verify(ctx))
        ok = worst(findings) is not Severity.FAIL
        if ok:
            await step.finish(ctx, True)
            return self._finish(ctx, StepState.DONE, findings)
        return await self._offer_rollback(step, ctx, decision, findings, "verification failed")

    async def _offer_rollback(
        self, step: Step, ctx: StepContext, decision: Decision, findings: list[Finding], why: str
    ) -> tuple[StepState, list[Finding]]:
        offer = Decision(
            DecisionKind.ROLLBACK,
            step.id,
            step.title,
            ctx.target,
            f"{why} on {ctx.target}; roll back to the captured previous state?",
            rollback=decision.rollback,
        )
        message = why
        if await self._ask(offer) is Answer.PROCEED:
            try:
                findings = findings + self._waive(await step.undo(ctx))
                message = f"{why}; rolled back"
            except NotAutomated:
                message = f"{why}; no automated rollback: use the rollback script"
            except TransportError as exc:
                findings = [*findings, _transport_finding(step, exc)]
                message = f"{why}; the rollback failed too: use the rollback script by hand"
        await step.finish(ctx, False)
        return self._finish(ctx, StepState.FAILED, findings, message)

    # -- helpers -----------------------------------------------------------------------------

    async def _confirmed(self, step: Step, decision: Decision) -> bool:
        """Ask before a change, unless the operator approved this very change for the step's
        other nodes (never for maintenance: each window is confirmed on its own).

        The approval is looked up under the decision lock: on a fleet the other nodes are
        already queued for the operator while the first review is open.
        """
        same = _same_change(decision)
        approvable = step.kind is not StepKind.MAINTENANCE
        async with self._decision_lock:
            if approvable and self._approved.get(step.id) == same:
                self.emit(
                    Notice(
                        f"{step.id}: the same change as approved earlier; applying without asking",
                        decision.target,
                    )
                )
                self.journal(
                    {"target": decision.target, "step": step.id, "decision": decision.kind.value,
                     "answer": "approved-as-same-change"}
                )  # fmt: skip
                return True
            reply = await self.frontend.decide(decision)
        answer = self._answer(decision, reply)
        if answer is Answer.PROCEED_SAME and approvable:
            self._approved[step.id] = same
        return answer is not Answer.SKIP

    def _other_nodes(self, step: Step, target: str) -> int:
        """The step's other nodes that are not done yet (in this run or an earlier one)."""
        return sum(
            1
            for other in self.plan.targets(step, self.site)
            if other != target and not self.checkpoint.step_state(step.id, other).settled
        )

    async def _ask(self, decision: Decision) -> Answer:
        async with self._decision_lock:
            reply = await self.frontend.decide(decision)
        return self._answer(decision, reply)

    def _answer(self, decision: Decision, reply: Reply) -> Answer:
        """The operator's reply as the engine acts on it (abort raises; a maintenance
        window needs the node name typed), journaled."""
        if reply.answer is Answer.ABORT:
            raise Aborted(f"aborted by the operator at {decision.step} on {decision.target}")
        answer = reply.answer
        if answer is Answer.PROCEED_SAME and (
            decision.kind is not DecisionKind.CONFIRM_APPLY or decision.confirm_text is not None
        ):
            answer = Answer.PROCEED  # "the same change elsewhere" only means something for a review
        if (
            decision.confirm_text is not None
            and answer is Answer.PROCEED
            and reply.typed.strip() != decision.confirm_text
        ):
            self.emit(
                Notice(
                    f"typed {reply.typed!r}, expected {decision.confirm_text!r}: not confirmed",
                    decision.target,
                )
            )
            return Answer.SKIP
        self.journal(
            {
                "target": decision.target,
                "step": decision.step,
                "decision": decision.kind.value,
                "answer": answer.value,
            }
        )
        return answer

    def _blocker(self, step: Step, target: str, explicit: bool) -> str | None:
        if self._ignore_requires:
            return None
        required = list(step.requires)
        if not explicit:
            required += self._earlier_steps(step)
        for req_id in required:
            req = self.plan.step(req_id)
            req_targets = (
                [CLUSTER]
                if req.scope == Scope.CLUSTER
                else ([target] if target != CLUSTER else self.plan.targets(req, self.site))
            )
            for req_target in req_targets:
                state = self.checkpoint.step_state(req_id, req_target)
                if not state.settled:
                    where = "" if req_target == target else f" on {req_target}"
                    return f"requires {req_id} ({req.title}){where}, which is {state.value}"
        return None

    def _earlier_steps(self, step: Step) -> list[str]:
        """Steps of earlier phases on the same target scope (phase order is the spine)."""
        current = self.plan.phase_of(step.id)
        earlier = []
        for phase in self.plan.phases:
            if phase.number >= current.number:
                break
            earlier += [
                s.id for s in phase.steps if step.scope == Scope.NODE or s.scope == Scope.CLUSTER
            ]
        return earlier

    def _waive(self, findings: list[Finding]) -> list[Finding]:
        result = []
        for finding in findings:
            reason = self._waivers.get(finding.check)
            if reason and finding.severity is Severity.FAIL and not finding.waived:
                self.emit(Notice(f"{finding.check} failed but is waived: {reason}"))
                finding = Finding(**{**finding.__dict__, "waived": reason})
            result.append(finding)
        return result

    def _not_automated(self, step: Step, ctx: StepContext) -> tuple[StepState, list[Finding]]:
        finding = Finding(
            check=f"{step.id}.manual",
            gate=step.gates[0] if step.gates else "",
            severity=Severity.SKIP,
            message="this step is not automated yet: run its runbook commands by hand",
            remediation="see RUNBOOK.md from `gpu-node-wizard export`",
        )
        return self._finish(ctx, StepState.DONE, [finding], "not automated")

    def _finish(
        self, ctx: StepContext, state: StepState, findings: list[Finding], message: str = ""
    ) -> tuple[StepState, list[Finding]]:
        measurements = None
        if ctx.measurements:
            measurements = {
                m.name: {"value": m.value, "unit": m.unit, "labels": m.labels}
                for m in ctx.measurements
            }
        self.checkpoint.set_step(
            ctx.step.id,
            ctx.target,
            state,
            message=message,
            findings=findings,
            measurements=measurements,
            extra=ctx.data or None,
            # A check's result is group-committed (cheap to redo); anything that guards an
            # effect or an operator's answer is written before the run goes on.
            durable=ctx.step.kind is not StepKind.CHECK,
        )
        self.emit(StepFinished(ctx.step.id, ctx.target, state, message, tuple(findings)))
        return state, findings


_CHANGING = (StepKind.APPLY, StepKind.MAINTENANCE)


def _transport_finding(step: Step, exc: TransportError) -> Finding:
    """A failure to reach or use a host/cluster, as a finding that says what to do."""
    gate = step.gates[0] if step.gates else "T00"
    if isinstance(exc, CommandFailedError):
        name, fix = (
            "command",
            "read the command's error above, fix the cause on the host, then retry",
        )
    elif isinstance(exc, HostKeyError):
        name, fix = "reachable", "verify the host key and update known_hosts (see the message)"
    elif isinstance(exc, AuthenticationError):
        name, fix = "reachable", "check ssh.user / ssh.key in the site file and sudo rights"
    elif isinstance(exc, CommandTimeoutError):
        name, fix = (
            "timeout",
            "the host is slow or the command hangs; raise ssh.command_timeout or check the host",
        )
    else:
        name, fix = (
            "reachable",
            "check the address, the network path and that sshd / the API server runs",
        )
    return Finding(f"{gate}.{name}", gate, Severity.FAIL, str(exc), fix)


def _state_for(findings: list[Finding]) -> StepState:
    return StepState.FAILED if worst(findings) is Severity.FAIL else StepState.DONE


def _same_change(decision: Decision) -> tuple[tuple[str, str], ...]:
    """A decision's diffs with the node's own name set aside: equal for two nodes when the
    change is the same on both."""
    node = decision.target
    return tuple(
        (d.destination.replace(node, "<node>"), d.diff.replace(node, "<node>"))
        for d in decision.diffs
    )


def _diff(change: Change) -> ArtifactDiff:
    artifact = change.artifact
    return ArtifactDiff(
        artifact.path,
        artifact.destination,
        unified_diff(change.live, artifact.content, artifact.destination),
        change.changed,
    )
