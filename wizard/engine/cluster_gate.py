"""The gate before a change outside the new nodes (wizard/approvals.py).

After the review of a step's diff, each effect its pending changes declare is put to the
operator on its own, as a typed confirmation naming the change (headless: the named flag
``--allow-cluster-change NAME``, never implied by ``--yes``). An approval is recorded in the
checkpoint with who and when before the change is made; once the step has run, the pods on
existing nodes that were replaced or restarted are measured from the live objects (before
and after, by uid and restartCount) and recorded with it, for the report.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from wizard.approvals import (
    Addition,
    Approval,
    ClusterEffect,
    pods_on_existing_nodes,
    restarted_between,
)
from wizard.checkpoint import now, who_am_i
from wizard.events import Answer, Decision, DecisionKind

if TYPE_CHECKING:
    from wizard.engine.core import Engine
    from wizard.plan import Change, Step, StepContext


def effects_of(changes: list[Change]) -> list[ClusterEffect]:
    """The distinct effects of the pending changes, in order."""
    found: list[ClusterEffect] = []
    for change in changes:
        if change.changed and change.effect is not None and change.effect not in found:
            found.append(change.effect)
    return found


def outside_line(step: Step, effects: list[ClusterEffect], pending: Sequence[Change] = ()) -> str:
    """The review's line on what the change touches outside the new nodes, and the new
    objects it makes for them."""
    added = [c.adds[0] for c in pending if c.adds is not None]
    line = f"; added for the new nodes (listed in the report): {', '.join(added)}" if added else ""
    if effects:
        return line + "".join(
            f"; OUTSIDE THE NEW NODES ({e.change.value}, approved separately by name): {e.text()}"
            for e in effects
        )
    return line + "; outside the new nodes: nothing (no pod on an existing node restarts)"


async def confirm_effects(
    engine: Engine, step: Step, ctx: StepContext, effects: list[ClusterEffect]
) -> list[Approval] | None:
    """Each effect confirmed by name; the approvals (recorded), or None when one was not."""
    approvals = []
    for effect in effects:
        name = effect.change.value
        decision = Decision(
            DecisionKind.CLUSTER_CHANGE,
            step.id,
            f"Change outside the new nodes: {name}",
            ctx.target,
            f"{step.title} changes more than the new nodes: {effect.text()} "
            f"Type {name} to approve this change (headless: {effect.change.flag}).",
            rollback="the step's own rollback (see the review); restarted pods are not undone",
            confirm_text=name,
            actions=tuple(step.actions(ctx.site, ctx.node)),
        )
        answer, reply = await engine.decisions.ask_for_reply(decision)
        if answer is Answer.SKIP:
            return None
        how = reply.reason.strip() or f"typed {name}"
        approval = Approval(
            change=effect.change,
            step=step.id,
            target=ctx.target,
            by=f"{who_am_i()} ({how})",
            at=now(),
            effect=effect.text(),
            predicted=effect.restarts,
        )
        engine.checkpoint.add_approval(approval)
        engine.journal({"event": "cluster-change-approved", **approval.as_json()})
        approvals.append(approval)
    return approvals


async def existing_pods(ctx: StepContext) -> dict[str, tuple[str, int]]:
    """The pods on existing nodes now (uid -> name, restarts)."""
    new = {n.name for n in ctx.site.nodes}
    return pods_on_existing_nodes(await ctx.services.kube.pods(), new)


# How long the measurement waits for the change to settle outside the new nodes: the
# operands are rendered by the GPU Operator from the ClusterPolicy after `helm --wait`
# returned, and their DaemonSets rolled by the DaemonSet controller after that.
SETTLE_S = 240.0
SETTLE_POLL_S = 2.0


def _rolled_out(daemonset: dict) -> bool:
    """A DaemonSet whose controller saw its latest spec and updated every pod; one without
    a generation (no controller behind it) counts as rolled out."""
    meta, status = daemonset.get("metadata") or {}, daemonset.get("status") or {}
    generation = meta.get("generation")
    if generation is None:
        return True
    desired = status.get("desiredNumberScheduled", 0)
    return (
        status.get("observedGeneration", 0) >= generation
        and status.get("updatedNumberScheduled", 0) >= desired
        and status.get("numberAvailable", 0) >= desired
    )


async def settled_pods(
    ctx: StepContext, before: dict[str, tuple[str, int]], predicted: tuple[str, ...]
) -> tuple[dict[str, tuple[str, int]], bool]:
    """The pods on existing nodes once the change settled: every pod the review predicted
    replaced or restarted and every DaemonSet rolled out, or at ``SETTLE_S`` (then False:
    measured while the operator may still be rolling)."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        after = await existing_pods(ctx)
        done = set(predicted) <= set(restarted_between(before, after)) and all(
            _rolled_out(d) for d in await ctx.services.kube.daemonsets()
        )
        if done:
            return after, True
        if time.monotonic() > deadline:
            return after, False
        await asyncio.sleep(SETTLE_POLL_S)


def record_outcome(
    engine: Engine,
    approvals: list[Approval],
    before: dict[str, tuple[str, int]],
    after: dict[str, tuple[str, int]] | None,
    settled: bool = True,
) -> None:
    """The measured restarts written into each approval (None when the step raised before
    they could be read; ``settled`` False when measured before the change settled)."""
    restarted = None if after is None else restarted_between(before, after)
    for approval in approvals:
        done = Approval(**{**approval.__dict__, "restarted": restarted, "applied": True,
                           "settled": settled})  # fmt: skip
        engine.checkpoint.add_approval(done)
        engine.journal({"event": "cluster-change-made", **done.as_json()})


def record_additions(engine: Engine, step: Step, ctx: StepContext, made: list[Change]) -> None:
    """The new objects the applied changes made for the new nodes, for the report's "Added
    for the new nodes" (no approval: nothing that existed changed)."""
    for change in made:
        if change.adds is not None:
            obj, why = change.adds
            addition = Addition(obj, step.id, ctx.target, why, now())
            engine.checkpoint.add_addition(addition)
            engine.journal({"event": "added-for-new-nodes", **addition.as_json()})
