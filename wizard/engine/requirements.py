"""Whether a step may run on a target: what it requires and needs from earlier steps,
and the skip that follows a skipped provider (never a change built on one not made).
"""

from __future__ import annotations

from wizard.checkpoint import who_am_i
from wizard.model import Finding, Severity, StepState, skipped_finding
from wizard.plan import CLUSTER, Scope, Step, StepContext


class RequirementsMixin:
    """Engine._blocker / _skipped_provider: what must be settled before a step runs.

    A part of Engine (wizard/engine/core.py): it uses the engine's site, plan,
    checkpoint, front end and run state set in Engine.__init__."""

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
        for provider, key in step.needs:
            record = self.checkpoint.record(provider, target)
            if record.get("extra", {}).get(key) is None:
                state = record.get("state", StepState.PENDING.value)
                return (
                    f"needs {key} from {provider} ({self.plan.step(provider).title}), which "
                    f"did not record it (it is {state}); run {provider} on {target} first"
                )
        return None

    def _skipped_provider(self, step: Step, target: str) -> str | None:
        """A step whose needed result comes from a step that was skipped is skipped too,
        with the reason: it must not act as though the change it builds on was made (the
        boot unit re-applying a QoS nobody confirmed, a "with QoS" measurement without QoS).
        A provider that failed or was refused blocks it instead (``_blocker``)."""
        for provider, key in step.needs:
            record = self.checkpoint.record(provider, target)
            if record.get("state") == StepState.SKIPPED.value:
                why = record.get("message") or "skipped"
                return (
                    f"skipped because {provider} ({self.plan.step(provider).title}) was "
                    f"skipped ({why}); {step.id} needs its {key}"
                )
        return None

    def _upstream_cause(self, step: Step, target: str) -> tuple[str, str] | None:
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
                state = record.get("state")
                if state not in (StepState.SKIPPED.value, StepState.FAILED.value):
                    continue
                why = record.get("message") or state
                on = "" if where == CLUSTER else f" on {where}"
                said = f"{up.id} ({up.title}){on} was {state}, and {step.id} builds on it ({why})"
                if state == StepState.SKIPPED.value:
                    todo = f"let {up.id} run first: `run SITE --redo {up.id}@{where}`"
                else:
                    todo = f"fix {up.id}{on} first (it failed), then retry this step"
                return said, todo
        return None

    def _skipped(
        self, step: Step, ctx: StepContext, why: str, *, by: str | None = None
    ) -> tuple[StepState, list[Finding]]:
        """The step did not run: recorded with who/why as a skip finding on each of its
        gates, so no gate it belongs to can pass without it (``model.verdict``). Who is
        kept apart from the message (``skipped_by``: the operator's user@host, or the
        wizard when a step it needs was skipped) for the report's "Skipped and waived"."""
        ctx.data["skipped_by"] = by or who_am_i()
        # A skip is settled: a resume keeps it; starting over asks again.
        remedy = (
            f"a resume keeps this skip: to let {step.id} run on {ctx.target}, "
            f"`run SITE --redo {step.id}@{ctx.target}` (or start over)"
        )
        findings = [skipped_finding(step.id, gate, ctx.target, why, remedy) for gate in step.gates]
        return self._finish(ctx, StepState.SKIPPED, findings, why)

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

    def _not_automated(self, step: Step, ctx: StepContext) -> tuple[StepState, list[Finding]]:
        finding = Finding(
            check=f"{step.id}.manual",
            gate=step.gates[0] if step.gates else "",
            severity=Severity.SKIP,
            message="this step is not automated yet: run its runbook commands by hand",
            remediation="see RUNBOOK.md from `gpu-node-wizard export`",
        )
        return self._finish(ctx, StepState.DONE, [finding], "not automated")
