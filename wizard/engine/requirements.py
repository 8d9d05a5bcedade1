"""Whether a step may run on a target: what it requires and needs from earlier steps,
and the skip that follows a skipped provider (never a change built on one not made).
"""

from __future__ import annotations

from wizard.checkpoint import Checkpoint
from wizard.model import StepState
from wizard.plan import CLUSTER, Plan, Scope, Step
from wizard.result_keys import missing_result
from wizard.site import Site


class Requirements:
    """What must be settled before a step runs, read from the checkpoint: the engine
    asks ``blocker`` and ``skipped_provider`` before a step, ``upstream_cause`` when it
    failed. It reads the plan, the site and the records, and changes nothing."""

    def __init__(self, plan: Plan, site: Site, checkpoint: Checkpoint) -> None:
        self.plan = plan
        self.site = site
        self.checkpoint = checkpoint
        # A read-only run (``check``) runs every listed check, done or not before it.
        self.ignore_requires = False

    def blocker(self, step: Step, target: str, explicit: bool) -> str | None:
        """Why ``step`` may not run on ``target`` yet (None: it may)."""
        if self.ignore_requires:
            return None
        required = list(step.requires)
        if not explicit:
            required += self.earlier_steps(step)
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
        nodes = [n.name for n in self.site.nodes]
        return missing_result(self.plan, step, target, nodes, self.checkpoint.record)

    def skipped_provider(self, step: Step, target: str) -> str | None:
        """A step whose needed result comes from a step that was skipped is skipped too,
        with the reason: it must not act as though the change it builds on was made (the
        boot unit re-applying a QoS nobody confirmed, a "with QoS" measurement without QoS).
        A provider that failed or was refused blocks it instead (``blocker``)."""
        for key in step.needs:
            provider = key.provider
            record = self.checkpoint.record(provider, target)
            if record.state is StepState.SKIPPED:
                why = record.message or "skipped"
                return (
                    f"skipped because {provider} ({self.plan.step(provider).title}) was "
                    f"skipped ({why}); {step.id} needs its {key.name}"
                )
        return None

    def upstream_cause(self, step: Step, target: str) -> tuple[str, str] | None:
        """A step this one builds on that was skipped or failed, as (what to say first,
        what to do first): a failure here is most likely its consequence (skipped labels
        -> the RDMA plugin's DaemonSet selects no node -> no rdma/e810 advertised)."""
        for up in self.plan.upstream(step.id):
            if up.scope == Scope.CLUSTER:
                targets = [CLUSTER]
            elif target != CLUSTER:
                targets = [target]
            else:
                targets = self.plan.targets(up, self.site)
            for where in targets:
                record = self.checkpoint.record(up.id, where)
                state = record.state.value
                if record.state not in (StepState.SKIPPED, StepState.FAILED):
                    continue
                why = record.message or state
                on = "" if where == CLUSTER else f" on {where}"
                said = f"{up.id} ({up.title}){on} was {state}, and {step.id} builds on it ({why})"
                if state == StepState.SKIPPED.value:
                    todo = f"let {up.id} run first: `run SITE --redo {up.id}@{where}`"
                else:
                    todo = f"fix {up.id}{on} first (it failed), then retry this step"
                return said, todo
        return None

    def earlier_steps(self, step: Step) -> list[str]:
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
