"""The maintenance sequence, one for every step that takes a node out of service: window
gate -> capture persisted with the intent -> cordon/drain -> apply -> verify -> rollback
from the persisted capture on failure -> uncordon only when verified. Each stage is in
the checkpoint before it starts, so a kill anywhere resumes into finish or roll back.

Brownfield rules read before the gate and persisted with the capture (``Maintenance``):
a node someone else had cordoned already (spec.unschedulable, no cordon of the wizard's)
is left cordoned at the end, and said so; a pod with no controller on the node is never
deleted by the drain unless the operator approved it by name (kubectl drain refuses it
without --force: k8s.io/kubectl pkg/drain/filters.go unreplicatedFilter); by default the
step stops before the drain, naming the pods.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, Protocol

from wizard.checkpoint import CORDONED, Checkpoint, Maintenance, now
from wizard.drain import bare_pods, cordon_command, drain_command, uncordon_command
from wizard.engine.decisions import Decisions
from wizard.engine.results import artifact_diff, transport_finding
from wizard.events import Answer, Decision, DecisionKind, Event, Notice
from wizard.model import Finding, Severity, StepState, worst
from wizard.plan import Change, NotAutomated, Services, Step, StepContext
from wizard.site import Site
from wizard.transports.base import TransportError

Result = tuple[StepState, list[Finding]]

# What a node is like while its maintenance is at a stage (for notices and a quit warning).
# What the run says of a node whose cordon was there before the wizard's maintenance.
_LEFT_CORDONED = "left cordoned: it was cordoned before the wizard's maintenance"

STAGE_STATE = {
    "confirmed": "window confirmed, nothing changed yet",
    "draining": "cordoned, pods being evicted",
    "applying": "cordoned and drained; the change is being applied and may be half done",
    "verifying": "cordoned; the change was applied and is being verified",
    "uncordoning": "verified; being uncordoned",
    "rolling-back": "cordoned; being rolled back to the captured state",
}


@contextlib.contextmanager
def effects(ctx: StepContext) -> Iterator[None]:
    """Mark a step's commands as effects (journaled ahead) for the block's duration."""
    before, ctx.effects = ctx.effects, True
    try:
        yield
    finally:
        ctx.effects = before


class StepOutcomes(Protocol):
    """What the sequence needs of the engine: a step's changes, and its result recorded
    (the engine's one way to end a step: ``Engine.finish``)."""

    async def changes_to_make(
        self, step: Step, ctx: StepContext
    ) -> tuple[list[Change], Result | None]: ...

    def finish(
        self, ctx: StepContext, state: StepState, findings: list[Finding], message: str = ""
    ) -> Result: ...

    def skipped(
        self, step: Step, ctx: StepContext, why: str, *, by: str | None = None
    ) -> Result: ...

    def not_automated(self, step: Step, ctx: StepContext) -> Result: ...


class MaintenanceSequence:
    """``run`` and ``resume``: the only way a node is taken out of service. It asks the
    operator through ``decisions``, acts through the cluster client of ``services``,
    persists each stage in the checkpoint before it starts, and ends the step through
    ``outcomes``; ``in_flight`` says which node is where (for a front end's quit warning)."""

    def __init__(
        self,
        site: Site,
        checkpoint: Checkpoint,
        services: Services,
        decisions: Decisions,
        outcomes: StepOutcomes,
        emit: Callable[[Event], None],
    ) -> None:
        self.site = site
        self.checkpoint = checkpoint
        self.services = services
        self.decisions = decisions
        self.outcomes = outcomes
        self.emit = emit
        self.in_flight: dict[str, str] = {}  # target -> what its maintenance has done so far

    def journal(self, entry: dict[str, Any]) -> None:
        self.checkpoint.journal(entry)

    async def run(self, step: Step, ctx: StepContext) -> tuple[StepState, list[Finding]]:
        """Capture, the node's cordon and bare pods read, gate, persist, then the sequence
        (``_sequence``)."""
        try:
            capture = await step.capture(ctx)
        except NotAutomated:
            return self.outcomes.not_automated(step, ctx)
        ctx.data["capture"] = capture
        changes, result = await self.outcomes.changes_to_make(step, ctx)
        if result is not None:
            return result
        begins = Maintenance(stage="confirmed", capture=capture)
        if step.drains:
            read = await self._before_drain(step, ctx)
            if not isinstance(read, Maintenance):
                return read
            begins = replace(read, capture=capture)
        window = Decision(
            DecisionKind.MAINTENANCE_WINDOW,
            step.id,
            step.title,
            ctx.target,
            self._window_text(step, ctx, begins),
            diffs=tuple(artifact_diff(c) for c in changes),
            rollback=self._rollback_text(step, ctx, capture),
            confirm_text=ctx.target,
            actions=tuple(self._actions(step, ctx, begins)),
            reversible=step.reversible,
        )
        # One screen for a maintenance change: the window gate shows the ordered actions,
        # the diffs and the rollback computed from the capture; no second review.
        if await self.decisions.ask(window) is Answer.SKIP:
            return self.outcomes.skipped(
                step, ctx, "skipped by the operator: the maintenance window was not confirmed"
            )
        # Intent before effect: the capture (and whose cordon the node had, and which bare
        # pods may go) is durable before the node is touched.
        self.checkpoint.set_step(
            step.id,
            ctx.target,
            StepState.RUNNING,
            extra={**ctx.data, "maintenance": replace(begins, at=now()).to_json()},
        )
        self.journal(
            {"target": ctx.target, "step": step.id, "maintenance": "begin", "capture": capture}
        )
        return await self._sequence(step, ctx)

    async def resume(
        self, step: Step, ctx: StepContext, inflight: Maintenance
    ) -> tuple[StepState, list[Finding]]:
        """A maintenance change interrupted part-way: finish it or roll it back, from the
        capture persisted before its first effect (never a second capture)."""
        record = self.checkpoint.record(step.id, ctx.target)
        ctx.data.update(record.result)
        capture = dict(inflight.capture)
        ctx.data["capture"] = capture
        stage = inflight.stage
        state = STAGE_STATE.get(stage, stage)
        self.emit(
            Notice(
                f"{step.id} was interrupted on {ctx.target} ({state}); it resumes from the "
                f"state captured at {inflight.at or '?'}",
                ctx.target,
            )
        )
        resume = Decision(
            DecisionKind.MAINTENANCE_WINDOW,
            step.id,
            step.title,
            ctx.target,
            f"{step.title} was interrupted on {ctx.target}: {state}. Proceed finishes the change "
            "(each action checks what is live first); Cancel offers the rollback to the state "
            "captured before the change. Type the node name to confirm the window is open.",
            rollback=self._rollback_text(step, ctx, capture),
            confirm_text=ctx.target,
            actions=tuple(self._actions(step, ctx, inflight)),
            reversible=step.reversible,
        )
        if stage == "rolling-back" or await self.decisions.ask(resume) is Answer.SKIP:
            # An interrupted rollback is finished, not turned into the change again.
            self.in_flight[ctx.target] = state
            return await self._offer_rollback(
                step, ctx, [], "the interrupted change was not finished"
            )
        return await self._sequence(step, ctx)

    async def _sequence(self, step: Step, ctx: StepContext) -> tuple[StepState, list[Finding]]:
        """cordon/drain -> apply -> verify -> uncordon, or the rollback; each stage durable
        before it starts. Every piece is idempotent, so a resume may run it again."""
        node = ctx.target
        kube = self.services.kube
        if step.drains:
            self._stage(step, ctx, "draining")
            approved = self._maintenance(step, ctx).delete_bare
            try:
                await self._cordon(step, ctx)
                with effects(ctx):
                    ctx.data["evicted"] = await kube.drain(
                        node, progress=ctx.wait_begins, delete_bare=approved
                    )
                evicted = ctx.data["evicted"] or []
                drained = shlex.join(drain_command(node))
                self._log(node, f"drained: {len(evicted)} pod(s) evicted (`{drained}`)")
            except TransportError as exc:
                # Nothing on the host changed yet: no rollback (it would bounce the bond
                # under pods that still run); the node is made schedulable again (unless
                # someone else had cordoned it before).
                findings = [transport_finding(step, exc)]
                back = "uncordoned"
                with contextlib.suppress(TransportError):
                    kept = await self._uncordon(step, ctx)
                    findings += kept
                    back = _LEFT_CORDONED if kept else back
                self._end_maintenance(step, ctx)
                return self.outcomes.finish(
                    ctx, StepState.FAILED, findings,
                    f"the drain failed before any change: nothing was changed on the host; {back}",
                )  # fmt: skip
        try:
            self._stage(step, ctx, "applying")
            with effects(ctx):
                await step.apply(ctx, [])
        except NotAutomated:
            self.in_flight.pop(node, None)
            return self.outcomes.not_automated(step, ctx)
        except TransportError as exc:
            # A change that broke off part-way must not leave the node half done.
            return await self._offer_rollback(
                step, ctx, [transport_finding(step, exc)], "the change failed part-way"
            )
        self._stage(step, ctx, "verifying")
        try:
            findings = self.decisions.waive(await step.verify(ctx))
        except TransportError as exc:
            findings = [transport_finding(step, exc)]
        if worst(findings) is Severity.FAIL:
            return await self._offer_rollback(step, ctx, findings, "verification failed")
        message = ""
        if step.drains:
            self._stage(step, ctx, "uncordoning")
            # Schedulable again, whichever step of the wizard's cordoned it; a cordon that
            # was there before the wizard's maintenance stays (a finding says so).
            kept = await self._uncordon(step, ctx)
            findings = [*findings, *kept]
            message = _LEFT_CORDONED if kept else ""
        self._end_maintenance(step, ctx)
        return self.outcomes.finish(ctx, StepState.DONE, findings, message)

    def _maintenance(self, step: Step, ctx: StepContext) -> Maintenance:
        """The maintenance record in flight (what was read and approved before the gate)."""
        return self.checkpoint.record(step.id, ctx.target).maintenance or Maintenance()

    async def _before_drain(self, step: Step, ctx: StepContext) -> Maintenance | Result:
        """Before the gate, nothing changed yet: whose cordon the node has, and its pods
        with no controller, each put to the operator by name. The facts to persist with
        the capture, or the step's result when it stops here (a read failed, or a bare pod
        was not approved: the drain would delete it for good)."""
        node = ctx.target
        kube = self.services.kube
        try:
            live = await kube.node(node)
            pods = await kube.pods(field_selector=f"spec.nodeName={node}")
        except TransportError as exc:
            return self.outcomes.finish(
                ctx, StepState.FAILED, [transport_finding(step, exc)],
                f"{node}'s cordon and pods could not be read before the drain: nothing was changed",
            )  # fmt: skip
        # A cordon of the wizard's own (a failed change left it) is lifted once this change
        # verifies; any other cordon was someone else's before the wizard came.
        cordoned = bool(((live or {}).get("spec") or {}).get("unschedulable"))
        before = cordoned and self.checkpoint.cordon_of(node) is None
        bare = bare_pods(pods)
        approved: list[str] = []
        for who in bare:
            answer, reply = await self.decisions.ask_for_reply(
                self._bare_pod_decision(step, ctx, who, bare)
            )
            if answer is Answer.SKIP:
                return self._stopped_for_bare_pods(step, ctx, bare)
            approved.append(who)
            self.journal({"target": node, "step": step.id, "event": "bare-pod-deletion-approved",
                          "pod": who, "how": reply.reason.strip() or f"typed {who}"})  # fmt: skip
        return Maintenance(cordoned_before=before, delete_bare=tuple(approved))

    def _bare_pod_decision(
        self, step: Step, ctx: StepContext, who: str, bare: list[str]
    ) -> Decision:
        node = ctx.target
        return Decision(
            DecisionKind.DELETE_BARE_POD,
            step.id,
            f"Delete the pod {who}? It declares no controller",
            node,
            f"{step.title} drains {node}, where {who} runs with no controller (no "
            "ownerReference with controller: true): its eviction deletes it for good, nothing "
            "recreates it, and its work and emptyDir data are lost (kubectl drain refuses such "
            "a pod without --force). Pods with no controller on "
            f"{node}: {', '.join(bare)}. Type {who} to approve its deletion (headless: "
            f"--delete-bare-pod {who}); Cancel stops {step.id} before the drain, with nothing "
            "changed: move or delete the pod yourself, then run again.",
            rollback="A deleted pod cannot be brought back: recreate it from its own manifest.",
            confirm_text=who,
            actions=(f"evict {who} (deleted for good) in the drain of {node}",),
            reversible=False,
        )

    def _stopped_for_bare_pods(self, step: Step, ctx: StepContext, bare: list[str]) -> Result:
        node = ctx.target
        finding = Finding(
            *step.engine_check("bare-pods"),
            Severity.FAIL,
            f"stopped before the drain of {node}: {', '.join(bare)} declare no controller; "
            "the drain would delete them for good (nothing recreates them), so it was not "
            "started and nothing was changed",
            "move or delete them yourself, then run again; or approve each one's deletion by "
            "name (the typed confirmation; headless: --delete-bare-pod NAMESPACE/NAME)",
        )
        return self.outcomes.finish(
            ctx, StepState.FAILED, [finding],
            f"stopped before the drain: pods with no controller on {node}: {', '.join(bare)}",
        )  # fmt: skip

    async def _cordon(self, step: Step, ctx: StepContext) -> None:
        """Cordon the node, its mark in the checkpoint first (intent before effect): a kill
        at any instant leaves the node named cordoned until an uncordon returned. A node
        cordoned before the wizard's maintenance is left as it is: not the wizard's cordon."""
        node = ctx.target
        if self._maintenance(step, ctx).cordoned_before:
            self._log(node, f"already cordoned before {step.id}, not by the wizard: it stays "
                            "cordoned after the change")  # fmt: skip
            return
        held = self.checkpoint.cordon_of(node)
        why = f"taken out of service for {step.id}; the change is in flight"
        if held is None and await self._cordoned_since_the_read(step, ctx):
            self._log(node, f"cordoned by someone else since the maintenance gate read it, "
                            f"not by the wizard: it stays cordoned after {step.id}")  # fmt: skip
            return
        if held is None:
            self.checkpoint.cordoning(node, step.id, why)
        with effects(ctx):
            await self.services.kube.cordon(node)
        if held is None or held.by == step.id:
            self.checkpoint.cordon_held(node, why)
        # else: still the cordon another step left; this step's uncordon lifts it.
        command = shlex.join(cordon_command(node))
        self._log(node, f"cordoned for {step.id} (`{command}`): nothing new is scheduled")

    async def _cordoned_since_the_read(self, step: Step, ctx: StepContext) -> bool:
        """Whether the node became cordoned after the read before the gate (the gate may
        stay open for long, a resume comes hours later): a cordon has no owner
        (kubectl cordon.go sets only spec.unschedulable), so whose it is can be told only
        right before the wizard's own patch. Such a cordon is recorded as someone else's
        (durable, before anything else is done) and never lifted."""
        live = await self.services.kube.node(ctx.target)
        if not ((live or {}).get("spec") or {}).get("unschedulable"):
            return False
        record = self._maintenance(step, ctx)
        self.checkpoint.annotate(
            step.id,
            ctx.target,
            message="maintenance: cordoned by someone else before the wizard's cordon",
            extra={**ctx.data, "maintenance": replace(record, cordoned_before=True).to_json()},
        )
        return True

    async def _uncordon(self, step: Step, ctx: StepContext) -> list[Finding]:
        """Uncordon the node and clear its mark, whichever step set it (the reboot's
        uncordon puts back in service a node a failed QoS change left cordoned). A node
        cordoned before the wizard's maintenance stays cordoned: the finding it returns
        says so (nothing when it was uncordoned)."""
        node = ctx.target
        if self._maintenance(step, ctx).cordoned_before:
            self._log(node, _LEFT_CORDONED)
            return [self._kept_finding(step, node)]
        held = self.checkpoint.cordon_of(node)
        self.checkpoint.uncordoning(node)
        with effects(ctx):
            await self.services.kube.cordon(node, False)
        self.checkpoint.uncordoned(node)
        ctx.data.pop(CORDONED, None)  # an older checkpoint's mark in this record
        lifted = f" (lifts the cordon {held.by} left)" if held and held.by != step.id else ""
        uncordon = shlex.join(uncordon_command(node))
        self._log(node, f"uncordoned by {step.id} (`{uncordon}`){lifted}")
        return []

    def _kept_finding(self, step: Step, node: str) -> Finding:
        return Finding(
            *step.engine_check("cordon-kept"),
            Severity.WARN,
            f"{node} {_LEFT_CORDONED}: someone else's cordon (spec.unschedulable was true "
            "and the wizard had not set it), so the wizard did not lift it",
            f"once whoever cordoned it is done: `{shlex.join(uncordon_command(node))}`",
        )

    def _log(self, node: str, text: str) -> None:
        """A change to the Node object, in the log: when it left and re-entered service."""
        self.emit(Notice(f"{node}: {text}", node))

    def _end_maintenance(self, step: Step, ctx: StepContext) -> None:
        """The sequence is over (done or failed): nothing is in flight any more."""
        self.in_flight.pop(ctx.target, None)
        ctx.data.pop("maintenance", None)
        self.checkpoint.end_maintenance(step.id, ctx.target)

    def _stage(self, step: Step, ctx: StepContext, stage: str) -> None:
        """Persist the stage the maintenance sequence is about to enter."""
        before = self.checkpoint.record(step.id, ctx.target).maintenance or Maintenance()
        inflight = replace(before, stage=stage, at_stage=now()).to_json()
        self.in_flight[ctx.target] = STAGE_STATE.get(stage, stage)
        self.checkpoint.annotate(
            step.id,
            ctx.target,
            message=f"maintenance: {stage}",
            extra={**ctx.data, "maintenance": inflight},
        )

    async def _offer_rollback(
        self, step: Step, ctx: StepContext, findings: list[Finding], why: str
    ) -> tuple[StepState, list[Finding]]:
        """Name what failed, offer the rollback to the persisted capture (when the change can
        be undone), and leave the node cordoned: it is uncordoned only once verified."""
        node = ctx.target
        failing = tuple(f for f in findings if f.severity is Severity.FAIL and not f.waived)
        message = why
        if step.reversible:
            named = "; ".join(f"{f.check}: {f.message.splitlines()[0]}" for f in failing[:6])
            offer = Decision(
                DecisionKind.ROLLBACK,
                step.id,
                step.title,
                node,
                f"{why} on {node}"
                + (f" ({named})" if named else "")
                + "; roll back to the state captured before the change?"
                + (
                    f" {node} stays cordoned either way, until the change verifies."
                    if step.drains and not self._maintenance(step, ctx).cordoned_before
                    else f" {node} stays cordoned either way: it was cordoned before the "
                    "wizard's maintenance."
                    if step.drains
                    else ""
                ),
                rollback=self._rollback_text(step, ctx, ctx.data.get("capture", {})),
                findings=failing,
            )
            if await self.decisions.ask(offer) is Answer.PROCEED:
                self._stage(step, ctx, "rolling-back")
                try:
                    with effects(ctx):
                        findings = findings + self.decisions.waive(await step.undo(ctx))
                    message = f"{why}; rolled back"
                except NotAutomated:
                    message = f"{why}; no automated rollback: use the rollback script"
                except TransportError as exc:
                    findings = [*findings, transport_finding(step, exc)]
                    message = f"{why}; the rollback failed too: use the rollback script by hand"
        if step.drains and self._maintenance(step, ctx).cordoned_before:
            # Not the wizard's cordon: no mark of its own, and no uncordon ever.
            message += f"; {node} {_LEFT_CORDONED}"
            findings = [*findings, self._kept_finding(step, node)]
        elif step.drains:
            message += f"; {node} stays cordoned until the change verifies"
            # Kept beside the records until an uncordon: status, the report and the TUI name it.
            self.checkpoint.cordon_held(node, message, by=step.id)
        self._end_maintenance(step, ctx)
        return self.outcomes.finish(ctx, StepState.FAILED, findings, message)

    def _window_text(self, step: Step, ctx: StepContext, begins: Maintenance) -> str:
        drain = (
            f"{ctx.target} is cordoned and drained first (pods evicted, PodDisruptionBudgets "
            "respected) and uncordoned only once the change verifies. "
            if step.drains
            else ""
        )
        held = self.checkpoint.cordon_of(ctx.target)
        if held is not None and step.drains:
            lifts = (
                "its uncordon, once this change verifies, puts it back in service"
                if held.by != step.id
                else "it is uncordoned once this change verifies"
            )
            drain += f"It is already cordoned (by {held.by}: {held.why}): {lifts}. "
        elif begins.cordoned_before and step.drains:
            drain += (
                "It is cordoned already, and not by the wizard: that cordon stays after the "
                "change (the wizard never lifts a cordon it did not set). "
            )
        if begins.delete_bare:
            drain += f"Approved for deletion (no controller): {', '.join(begins.delete_bare)}. "
        return (
            f"{step.title} takes {ctx.target} out of service. {drain}"
            "Confirm the maintenance window is open by typing the node name."
        )

    def _actions(self, step: Step, ctx: StepContext, begins: Maintenance) -> list[str]:
        """The engine's own actions, in order, as kubectl commands (wizard/drain.py)."""
        actions = step.actions(self.site, ctx.node)
        if step.drains:
            name = ctx.target
            uncordon = shlex.join(uncordon_command(name))
            actions = [
                shlex.join(cordon_command(name)),
                shlex.join(drain_command(name)),
                *actions,
                f"{uncordon}   (not run: {name} was cordoned before this maintenance)"
                if begins.cordoned_before
                else f"{uncordon}   (only once verified)",
            ]
        return actions

    def _rollback_text(self, step: Step, ctx: StepContext, capture: dict[str, Any]) -> str | None:
        if not step.reversible:
            return step.rollback(self.site, ctx.node)
        return step.rollback_plan(self.site, ctx.node, capture)
