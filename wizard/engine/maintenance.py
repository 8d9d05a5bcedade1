"""The maintenance sequence, one for every step that takes a node out of service: window
gate -> capture persisted with the intent -> cordon/drain -> apply -> verify -> rollback
from the persisted capture on failure -> uncordon only when verified. Each stage is in
the checkpoint before it starts, so a kill anywhere resumes into finish or roll back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from wizard.checkpoint import now
from wizard.engine.results import artifact_diff, transport_finding
from wizard.events import Answer, Decision, DecisionKind, Notice
from wizard.model import Finding, Severity, StepState, worst
from wizard.plan import NotAutomated, Step, StepContext
from wizard.transports.base import TransportError

# What a node is like while its maintenance is at a stage (for notices and a quit warning).
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


class MaintenanceMixin:
    """Engine._maintain and its stages; the only way a node is taken out of service.

    A part of Engine (wizard/engine/core.py): it uses the engine's site, plan,
    checkpoint, front end and run state set in Engine.__init__."""

    async def _maintain(self, step: Step, ctx: StepContext) -> tuple[StepState, list[Finding]]:
        """Capture, gate, persist, then the sequence (``_sequence``)."""
        try:
            capture = await step.capture(ctx)
        except NotAutomated:
            return self._not_automated(step, ctx)
        ctx.data["capture"] = capture
        changes, result = await self._changes_to_make(step, ctx)
        if result is not None:
            return result
        window = Decision(
            DecisionKind.MAINTENANCE_WINDOW,
            step.id,
            step.title,
            ctx.target,
            self._window_text(step, ctx),
            diffs=tuple(artifact_diff(c) for c in changes),
            rollback=self._rollback_text(step, ctx, capture),
            confirm_text=ctx.target,
            actions=tuple(self._actions(step, ctx)),
            reversible=step.reversible,
        )
        # One screen for a maintenance change: the window gate shows the ordered actions,
        # the diffs and the rollback computed from the capture; no second review.
        if await self._ask(window) is Answer.SKIP:
            return self._skipped(
                step, ctx, "skipped by the operator: the maintenance window was not confirmed"
            )
        # Intent before effect: the capture is durable before the node is touched.
        self.checkpoint.set_step(
            step.id,
            ctx.target,
            StepState.RUNNING,
            extra={
                **ctx.data,
                "maintenance": {"stage": "confirmed", "capture": capture, "at": now()},
            },
        )
        self.journal(
            {"target": ctx.target, "step": step.id, "maintenance": "begin", "capture": capture}
        )
        return await self._sequence(step, ctx)

    async def _resume_maintenance(
        self, step: Step, ctx: StepContext, inflight: dict[str, Any]
    ) -> tuple[StepState, list[Finding]]:
        """A maintenance change interrupted part-way: finish it or roll it back, from the
        capture persisted before its first effect (never a second capture)."""
        record = self.checkpoint.record(step.id, ctx.target)
        ctx.data.update(record.get("extra", {}))
        capture = inflight.get("capture", {})
        ctx.data["capture"] = capture
        stage = inflight.get("stage", "confirmed")
        state = STAGE_STATE.get(stage, stage)
        self.emit(
            Notice(
                f"{step.id} was interrupted on {ctx.target} ({state}); it resumes from the "
                f"state captured at {inflight.get('at', '?')}",
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
            actions=tuple(self._actions(step, ctx)),
            reversible=step.reversible,
        )
        if stage == "rolling-back" or await self._ask(resume) is Answer.SKIP:
            # An interrupted rollback is finished, not turned into the change again.
            self._inflight[ctx.target] = state
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
            try:
                with effects(ctx):
                    await kube.cordon(node)
                    ctx.data["evicted"] = await kube.drain(node, progress=ctx.wait_begins)
            except TransportError as exc:
                # Nothing on the host changed yet: no rollback (it would bounce the bond
                # under pods that still run); the node is made schedulable again.
                finding = transport_finding(step, exc)
                with contextlib.suppress(TransportError), effects(ctx):
                    await kube.cordon(node, False)
                ctx.data["cordoned"] = None
                self._end_maintenance(step, ctx)
                return self._finish(
                    ctx, StepState.FAILED, [finding],
                    "the drain failed before any change: nothing was changed on the host; "
                    "uncordoned",
                )  # fmt: skip
        try:
            self._stage(step, ctx, "applying")
            with effects(ctx):
                await step.apply(ctx, [])
        except NotAutomated:
            self._inflight.pop(node, None)
            return self._not_automated(step, ctx)
        except TransportError as exc:
            # A change that broke off part-way must not leave the node half done.
            return await self._offer_rollback(
                step, ctx, [transport_finding(step, exc)], "the change failed part-way"
            )
        self._stage(step, ctx, "verifying")
        try:
            findings = self._waive(await step.verify(ctx))
        except TransportError as exc:
            findings = [transport_finding(step, exc)]
        if worst(findings) is Severity.FAIL:
            return await self._offer_rollback(step, ctx, findings, "verification failed")
        if step.drains:
            self._stage(step, ctx, "uncordoning")
            with effects(ctx):
                await kube.cordon(node, False)
            ctx.data["cordoned"] = None  # schedulable again
        self._end_maintenance(step, ctx)
        return self._finish(ctx, StepState.DONE, findings)

    def _end_maintenance(self, step: Step, ctx: StepContext) -> None:
        """The sequence is over (done or failed): nothing is in flight any more."""
        self._inflight.pop(ctx.target, None)
        ctx.data.pop("maintenance", None)
        self.checkpoint.record(step.id, ctx.target).get("extra", {}).pop("maintenance", None)

    def _stage(self, step: Step, ctx: StepContext, stage: str) -> None:
        """Persist the stage the maintenance sequence is about to enter."""
        record = self.checkpoint.record(step.id, ctx.target)
        inflight = dict(record.get("extra", {}).get("maintenance") or {})
        inflight.update(stage=stage, at_stage=now())
        self._inflight[ctx.target] = STAGE_STATE.get(stage, stage)
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
                + "; roll back to the state captured before the change?",
                rollback=self._rollback_text(step, ctx, ctx.data.get("capture", {})),
                findings=failing,
            )
            if await self._ask(offer) is Answer.PROCEED:
                self._stage(step, ctx, "rolling-back")
                try:
                    with effects(ctx):
                        findings = findings + self._waive(await step.undo(ctx))
                    message = f"{why}; rolled back"
                except NotAutomated:
                    message = f"{why}; no automated rollback: use the rollback script"
                except TransportError as exc:
                    findings = [*findings, transport_finding(step, exc)]
                    message = f"{why}; the rollback failed too: use the rollback script by hand"
        if step.drains:
            message += f"; {node} stays cordoned until the change verifies"
            # Kept in the record until an uncordon: status, the report and the TUI name it.
            ctx.data["cordoned"] = {"by": step.id, "why": message, "since": now()}
        self._end_maintenance(step, ctx)
        return self._finish(ctx, StepState.FAILED, findings, message)

    def _window_text(self, step: Step, ctx: StepContext) -> str:
        drain = (
            f"{ctx.target} is cordoned and drained first (pods evicted, PodDisruptionBudgets "
            "respected) and uncordoned only once the change verifies. "
            if step.drains
            else ""
        )
        return (
            f"{step.title} takes {ctx.target} out of service. {drain}"
            "Confirm the maintenance window is open by typing the node name."
        )

    def _actions(self, step: Step, ctx: StepContext) -> list[str]:
        actions = step.actions(self.site, ctx.node)
        if step.drains:
            name = ctx.target
            actions = [
                f"kubectl cordon {name}",
                f"kubectl drain {name} --ignore-daemonsets --delete-emptydir-data",
                *actions,
                f"kubectl uncordon {name}   (only once verified)",
            ]
        return actions

    def _rollback_text(self, step: Step, ctx: StepContext, capture: dict[str, Any]) -> str | None:
        if not step.reversible:
            return step.rollback(self.site, ctx.node)
        return step.rollback_plan(self.site, ctx.node, capture)
