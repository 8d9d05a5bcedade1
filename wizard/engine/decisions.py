"""The operator's decisions: reviews, windows, rollbacks and failed steps put to the front
end one at a time, the answers journaled; waivers recorded and applied to findings.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from wizard.checkpoint import Checkpoint
from wizard.engine.results import Aborted, RunSummary
from wizard.errors import WizardError
from wizard.events import Answer, Decision, DecisionKind, Event, FrontEnd, Notice, Reply
from wizard.fleet import targets_text
from wizard.model import Finding, Severity, StepKind, StepState
from wizard.plan import Plan, Step
from wizard.site import Site

# Failures a waiver must not hide: the host could not be reached or used (the last part
# of the check's name, see transport_finding).
NOT_WAIVABLE = frozenset({"reachable", "timeout", "command"})
MAX_RETRY_FINDINGS = 50  # a fleet's failures in one dialog: the first ones, the count in the title


def same_change(decision: Decision) -> tuple[tuple[str, str], ...]:
    """A decision's diffs with the node's own name set aside: equal for two nodes when the
    change is the same on both."""
    node = decision.target
    return tuple(
        (d.destination.replace(node, "<node>"), d.diff.replace(node, "<node>"))
        for d in decision.diffs
    )


class Decisions:
    """The engine's questions to the front end, one at a time (the decision lock), each
    answer journaled; the approvals of "the same change" for a step's other nodes; and
    the waivers, recorded in the checkpoint and applied to findings (``waive``)."""

    def __init__(
        self,
        site: Site,
        plan: Plan,
        checkpoint: Checkpoint,
        frontend: FrontEnd,
        emit: Callable[[Event], None],
        waivers: dict[str, str] | None = None,
    ) -> None:
        self.site = site
        self.plan = plan
        self.checkpoint = checkpoint
        self.frontend = frontend
        self.emit = emit
        self._waivers = {w.check: w.reason for w in checkpoint.waivers()}
        for check, reason in (waivers or {}).items():
            if not reason.strip():
                raise WizardError(f"waiver for {check} needs a reason")
            if (hard := plan.hard_requirement(check)) is not None:
                raise WizardError(f"{check} cannot be waived, it is a hard requirement: {hard}")
            checkpoint.add_waiver(check, reason)
            self._waivers[check] = reason
        self._decision_lock = asyncio.Lock()
        self._approved: dict[str, tuple[tuple[str, str], ...]] = {}  # step -> same change

    def journal(self, entry: dict[str, Any]) -> None:
        self.checkpoint.journal(entry)

    async def offer_retry(self, step: Step, targets: list[str], summary: RunSummary) -> list[str]:
        """The targets to run again after the operator's answer to a failed step (none: the
        failure stands and the run stops after this phase, as without a front end that
        offers it). One question per step, for all of its failed targets, so that a fleet
        is not a dialog per node."""
        if not getattr(self.frontend, "offers_retry", False):
            return []
        failed = [t for t in targets if summary.results.get((step.id, t)) is StepState.FAILED]
        if not failed:
            return []
        # The nodes the rollout held back after too many failures run again with them.
        held_back = [
            t
            for t in targets
            if summary.results.get((step.id, t)) is StepState.BLOCKED
            and self.checkpoint.record(step.id, t).message.startswith("rollout stopped")
        ]
        failing = [
            finding
            for target in failed
            for finding in summary.findings.get((step.id, target), [])
            if finding.severity is Severity.FAIL and not finding.waived
        ]
        if any(f.check.endswith(".internal-error") for f in failing):
            return []  # a bug in the wizard: the run ends on the error screen (exit 70)
        checks = sorted({f.check for f in failing})
        hard = [(c, why) for c in checks if (why := self.plan.hard_requirement(c)) is not None]
        waivable = (
            step.kind in (StepKind.CHECK, StepKind.MEASURE)
            and bool(failing)
            and not any(f.check.rsplit(".", 1)[-1] in NOT_WAIVABLE for f in failing)
            and not hard
        )
        not_waivable = "; ".join(f"{c} is a hard requirement: {why}" for c, why in hard)
        decision = Decision(
            kind=DecisionKind.RETRY_FAILED,
            step=step.id,
            title=f"{step.title} failed",
            target=targets_text(failed),
            summary=(
                f"{step.id} failed on {targets_text(failed)}"
                + (f": {', '.join(checks)}" if checks else "")
                + ". Retry runs it again there, once the cause is fixed"
                + (
                    "; waive records your reason for these checks (as --waive does) and "
                    "judges them again with it"
                    if waivable
                    else ""
                )
                + "; leaving it stops the run after this phase (the checkpoint keeps it)."
            ),
            findings=tuple(failing[:MAX_RETRY_FINDINGS]),
            waivable=waivable,
            not_waivable=not_waivable,
        )
        async with self._decision_lock:
            reply = await self.frontend.decide(self.checkpoint.redactor.value(decision))
        answer = self._answer(decision, reply)
        if answer is Answer.WAIVE:
            reason = reply.reason.strip()
            if not waivable or not reason:
                why = (
                    (not_waivable or "these checks cannot be waived")
                    if not waivable
                    else "a waiver needs a reason"
                )
                self.emit(Notice(f"{step.id}: not waived: {why}", decision.target))
                return await self.offer_retry(step, targets, summary)
            for check in checks:
                self.checkpoint.add_waiver(check, reason)
                self._waivers[check] = reason
            self.journal({"event": "waived", "step": step.id, "checks": checks, "reason": reason})
            return failed + held_back
        if answer is Answer.PROCEED:
            return failed + held_back
        return []

    async def confirmed(self, step: Step, decision: Decision) -> bool:
        """Ask before a change, unless the operator approved this very change for the step's
        other nodes (never for maintenance: each window is confirmed on its own).

        The approval is looked up under the decision lock: on a fleet the other nodes are
        already queued for the operator while the first review is open.
        """
        same = same_change(decision)
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
            reply = await self.frontend.decide(self.checkpoint.redactor.value(decision))
        answer = self._answer(decision, reply)
        if answer is Answer.PROCEED_SAME and approvable:
            self._approved[step.id] = same
        return answer is not Answer.SKIP

    def other_nodes(self, step: Step, target: str) -> int:
        """The step's other nodes that are not done yet (in this run or an earlier one)."""
        return sum(
            1
            for other in self.plan.targets(step, self.site)
            if other != target and not self.checkpoint.step_state(step.id, other).settled
        )

    async def ask(self, decision: Decision) -> Answer:
        return (await self.ask_for_reply(decision))[0]

    async def ask_for_reply(self, decision: Decision) -> tuple[Answer, Reply]:
        """The operator's answer as the engine acts on it, and the reply it came from (its
        typed reason, for a record of who approved what)."""
        async with self._decision_lock:
            reply = await self.frontend.decide(self.checkpoint.redactor.value(decision))
        return self._answer(decision, reply), reply

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

    def waive(self, findings: list[Finding]) -> list[Finding]:
        """The findings with each failure the operator waived marked so (and said)."""
        result = []
        for finding in findings:
            reason = self._waivers.get(finding.check)
            hard = self.plan.hard_requirement(finding.check) if reason else None
            if hard is not None and finding.severity is Severity.FAIL:
                # A waiver recorded before the check was declared hard: it passes nothing.
                self.emit(Notice(f"{finding.check} is not waived (a hard requirement): {hard}"))
            elif reason and finding.severity is Severity.FAIL and not finding.waived:
                self.emit(Notice(f"{finding.check} failed but is waived: {reason}"))
                finding = Finding(**{**finding.__dict__, "waived": reason})
            result.append(finding)
        return result
