"""`run SITE --redo STEP[@NODE]`: forget one step's result so that this run does it again.

A skip is settled: a resume keeps it, so that an operator's "not now" is not asked again on
every resume. Without this the only way back to a skipped maintenance window was to start
over and redo every phase. The steps that were skipped *because* of it (a boot unit for a
QoS nobody confirmed, a "with QoS" measurement) are forgotten with it, so they run again
after it. A change in the middle of its maintenance sequence is never forgotten: its
capture is what a resume finishes or rolls back from.
"""

from __future__ import annotations

from dataclasses import dataclass

from wizard.checkpoint import Checkpoint
from wizard.errors import UsageError
from wizard.model import StepState
from wizard.plan import CLUSTER, Plan, Scope
from wizard.site import Site


@dataclass(frozen=True)
class Redo:
    step: str
    target: str | None  # None: every target of the step


def parse_redo(text: str, plan: Plan, site: Site) -> Redo:
    """``STEP`` or ``STEP@NODE``, checked against the plan and the site."""
    step_id, at, target = text.partition("@")
    if at and not target:
        raise UsageError(f"--redo {text!r}: a node after the @ (or no @ for every node)")
    try:
        step = plan.step(step_id)
    except KeyError:
        raise UsageError(
            f"--redo {text!r}: no step {step_id!r}; `gpu-node-wizard status SITE` lists them"
        ) from None
    if not target:
        return Redo(step.id, None)
    targets = plan.targets(step, site)
    if target not in targets:
        where = "the cluster (no @NODE)" if step.scope == Scope.CLUSTER else ", ".join(targets)
        raise UsageError(f"--redo {text!r}: {step.id} runs on {where}, not on {target!r}")
    return Redo(step.id, target)


def forget_for_redo(checkpoint: Checkpoint, plan: Plan, site: Site, redo: Redo) -> list[str]:
    """Forget ``redo``'s step (on its target, or all) and what was skipped because of it;
    return what was forgotten as ``step@target`` lines (for the operator and the journal)."""
    step = plan.step(redo.step)
    targets = [redo.target] if redo.target else plan.targets(step, site)
    for target in targets:
        if checkpoint.record(step.id, target).in_flight:
            raise UsageError(
                f"--redo {step.id}: its maintenance change on {target} is in flight (a capture "
                "is recorded); run without --redo first, so that the change is finished or "
                "rolled back from that capture"
            )
    forgotten = []
    for target in targets:
        forgotten += _forget(checkpoint, plan, step.id, target)
    if forgotten:
        checkpoint.journal({"event": "redo", "forgotten": forgotten})
    return forgotten


def _forget(checkpoint: Checkpoint, plan: Plan, step_id: str, target: str) -> list[str]:
    if not checkpoint.record(step_id, target).recorded:
        return []
    checkpoint.reset(step_id, target)
    forgotten = [f"{step_id}@{target}"]
    for dependent in plan.steps():
        if not any(key.provider == step_id for key in dependent.needs):
            continue
        # A need is read on the same node (Requirements.skipped_provider).
        if target != CLUSTER and checkpoint.step_state(dependent.id, target) is StepState.SKIPPED:
            forgotten += _forget(checkpoint, plan, dependent.id, target)
    return forgotten
