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
  diffs; maintenance steps need the window confirmed with the node name typed.

Maintenance is one engine sequence (``_maintain``), whatever the step: window gate ->
capture the live state and persist it with the intent (before the first effect) ->
cordon/drain -> apply -> verify -> on failure roll back from the persisted capture ->
uncordon only when verified. Each stage is written to the checkpoint before it starts, so
a kill anywhere resumes into "finish or roll back" from the persisted capture, never a
second capture. Every effect is journaled ahead (wizard/journal.py).

A checkpoint knows its machines: at the start of a run each node's identity (machine-id,
SSH host key, boot id) and the cluster's (API server, kube-system UID, node UIDs) are
compared with what the results were recorded on; a different machine resets the node's
steps, a reboot re-verifies its settled results before they are trusted.
"""

from __future__ import annotations

import asyncio
import contextlib
import traceback
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from wizard import identity, journal
from wizard.artifacts import unified_diff
from wizard.checkpoint import Checkpoint, changed_sections, now, who_am_i
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
from wizard.fleet import targets_text
from wizard.model import Finding, Severity, StepKind, StepState, skipped_finding, worst
from wizard.plan import (
    CLUSTER,
    Change,
    NotAutomated,
    Plan,
    Scope,
    Services,
    Step,
    StepContext,
    describe_waves,
    measurement_waves,
)
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
            f"{decision.kind.value} needs an answer ({how}): {decision.summary}"
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
        self._inflight: dict[str, str] = {}  # target -> what its maintenance has done so far
        self._rebooted: set[str] = set()  # nodes rebooted since their results were recorded
        self._boots: dict[str, str] = {}  # node -> its boot id as read at the start of the run
        self._unreachable: set[str] = set()  # nodes whose identity could not be read

    def maintenance_in_flight(self) -> dict[str, str]:
        """Nodes in the middle of a maintenance change, and the state each is in (for a
        front end that must warn before quitting)."""
        return dict(self._inflight)

    # -- front-end plumbing --------------------------------------------------------------

    def emit(self, event: Event) -> None:
        # One redactor on every path to the operator: the terminal (--verbose prints each
        # command line), the TUI's log and its finding panel see what the journal keeps.
        self.frontend.emit(self.checkpoint.redactor.value(event))

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

    def _report_journal(self) -> None:
        """What the journal says about the end of the last run (a torn line, effects that
        may have happened without their outcome being recorded)."""
        cp = self.checkpoint
        if getattr(cp, "torn_journal_bytes", 0):
            self.emit(
                Notice(
                    f"the journal's last line ({cp.torn_journal_bytes} bytes) was cut off by a "
                    "crash; it is kept but not read as an entry"
                )
            )
        unfinished = list(getattr(cp, "unfinished", []))
        if unfinished:
            # Reported once: later runs do not repeat them.
            self.journal({"event": "intents-reported", "ids": [e["intent"] for e in unfinished]})
        for entry in unfinished:
            what = entry.get("command") or entry.get("api") or entry.get("commands")
            self.emit(
                Notice(
                    f"the last run was stopped during {entry.get('step')} on "
                    f"{entry.get('target') or entry.get('for')}: `{what}` may or may not have "
                    "taken effect; the step re-verifies before it acts",
                    str(entry.get("for") or ""),
                )
            )

    async def reconcile_identity(self) -> list[tuple[str, str]]:
        """Compare the machines and the cluster with what the results were recorded on.

        A different machine (or cluster) under the same name resets what was recorded for
        it; a reboot marks the node's settled results for re-verification. The live
        identities are stored for the next run. A node that cannot be reached now is left
        as it is: its steps will say so.
        """
        cp = self.checkpoint
        known = cp.state.setdefault("identity", {"nodes": {}, "cluster": None})
        nodes = known.setdefault("nodes", {})
        recorded_steps = cp.state["steps"]
        reset: list[tuple[str, str]] = []

        def has_results(target: str) -> bool:
            return any(target in targets for targets in recorded_steps.values())

        async def read_node(name: str) -> dict[str, str] | None:
            # None: no transport to ask; {}: a transport that could not reach the node.
            host = self.services.hosts.get(name) if self.services.hosts else None
            if host is None:
                return None
            try:
                results = await host.run_many(
                    [["cat", identity.MACHINE_ID], ["cat", identity.BOOT_ID]], sudo=False
                )
            except (TransportError, OSError):
                return {}  # reachable never: an empty identity
            live = {
                "machine_id": results[0].stdout.strip() if results[0].ok else "",
                "boot_id": results[1].stdout.strip() if results[1].ok else "",
            }
            fingerprint = getattr(host, "host_key_fingerprint", None)
            if fingerprint is not None:
                live["host_key"] = fingerprint() or ""
            return live

        names = [n.name for n in self.site.nodes]
        lives = await asyncio.gather(*(read_node(n) for n in names))
        join_phase = next((p.number for p in self.plan.phases if p.id == "join"), None)
        for name, live in zip(names, lives, strict=True):
            if live is None:
                continue  # no transport for it (nothing to compare)
            if not live:
                self._unreachable.add(name)
                if has_results(name):
                    self.emit(
                        Notice(
                            f"{name} could not be reached to check which machine it is; its "
                            "recorded results stand until a step reaches it",
                            name,
                        )
                    )
                continue
            live = {
                key: value for key, value in live.items() if value
            }  # a failed read keeps the old
            if live.get("boot_id"):
                self._boots[name] = live["boot_id"]
            before = nodes.get(name)
            if has_results(name) and before:
                mismatch = identity.compare(before, live, identity.MACHINE_FIELDS)
                if mismatch is not None:
                    reset += self._reset_target(
                        name, f"{name} is not the machine its results were recorded on ({mismatch})"
                    )
                elif identity.compare(before, live, identity.BOOT_FIELDS) is not None:
                    self._rebooted.add(name)
                    self.emit(
                        Notice(
                            f"{name} rebooted since its results were recorded: settled steps "
                            "are re-verified before they are trusted",
                            name,
                        )
                    )
            nodes[name] = {**(before or {}), **live, "seen": now()}
        cluster = await self._cluster_identity()
        if cluster is not None:
            before = known.get("cluster")
            mismatch = identity.compare(before, cluster, identity.CLUSTER_FIELDS)
            if mismatch is not None:
                reason = f"the cluster is not the one the results were recorded on ({mismatch})"
                reset += self._reset_target(CLUSTER, reason)
                for name in names:
                    reset += self._reset_target(name, reason, from_phase=join_phase, quiet=True)
            else:
                for name, uid in cluster.get("node_uids", {}).items():
                    old = ((before or {}).get("node_uids") or {}).get(name)
                    if old and uid and old != uid:
                        reset += self._reset_target(
                            name,
                            f"the Kubernetes node {name} is a new object (uid {identity.short(old)}"
                            f" -> {identity.short(uid)}): it was deleted and joined again",
                            from_phase=join_phase,
                        )
            known["cluster"] = cluster
        cp.save()
        return reset

    async def _cluster_identity(self) -> dict[str, Any] | None:
        try:
            kube = self.services.kube if self.services else None
            if kube is None or not hasattr(kube, "request"):
                return None
            namespace = await kube.request("GET", "/api/v1/namespaces/kube-system")
            node_uids = {}
            for name in (n.name for n in self.site.nodes):
                obj = await kube.node(name)
                if obj:
                    node_uids[name] = obj["metadata"].get("uid", "")
        except (TransportError, OSError, KeyError, TypeError):
            return None
        return {
            "server": getattr(kube, "server", ""),
            "kube_system_uid": (namespace or {}).get("metadata", {}).get("uid", ""),
            "node_uids": node_uids,
        }

    def _reset_target(
        self, target: str, reason: str, *, from_phase: int | None = None, quiet: bool = False
    ) -> list[tuple[str, str]]:
        """Forget what was recorded for ``target`` (from phase ``from_phase`` on)."""
        steps = self.checkpoint.state["steps"]
        reset = []
        for phase in self.plan.phases:
            if from_phase is not None and phase.number < from_phase:
                continue
            for step in phase.steps:
                if target in steps.get(step.id, {}):
                    del steps[step.id][target]
                    reset.append((step.id, target))
        if reset and not quiet:
            self.emit(Notice(f"{reason}: {len(reset)} recorded step result(s) reset", target))
        if reset:
            self.journal({"event": "reset", "target": target, "why": reason, "steps": len(reset)})
        return reset

    def note_boot(self, target: str, boot_id: str) -> None:
        """A step saw the node boot anew (the reboot step): that boot is the known one."""
        nodes = self.checkpoint.state.setdefault("identity", {}).setdefault("nodes", {})
        nodes.setdefault(target, {})["boot_id"] = boot_id
        self._boots[target] = boot_id
        self._rebooted.discard(target)

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
        self._report_journal()
        summary.reset += await self.reconcile_identity()
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
            summary.stopped = self.checkpoint.redactor.text(str(exc))
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
            with journal.scope(self.checkpoint, step.id, target):
                if step.scope == Scope.NODE:
                    async with self._node_slots:
                        state, findings = await self._guarded(step, target, explicit)
                else:
                    state, findings = await self._guarded(step, target, explicit)
            summary.results[(step.id, target)] = state
            # The summary is printed (the headless outcome, `check`): redacted like the
            # checkpoint's copy and the events.
            summary.findings[(step.id, target)] = self.checkpoint.redactor.value(findings)

        batches = self._batches(step, targets)
        if step.one_node_at_a_time and len(targets) > 1:
            self.emit(Notice(f"{step.id}: {describe_waves(step, self.site, batches)}"))
        await self._run_batches(step, batches, one, summary, len(targets))
        # An operator at the TUI may fix the cause and retry, or waive a failed check with
        # a reason, without leaving the run (the CLI's answer is --waive and a new run).
        while again := await self._offer_retry(step, targets, summary):
            await self._run_batches(step, self._batches(step, again), one, summary, len(targets))
        self.emit(
            StepCompleted(step.id, tuple((t, summary.results[(step.id, t)]) for t in targets))
        )

    async def _run_batches(
        self,
        step: Step,
        batches: list[list[str]],
        one: Callable[[str], Awaitable[None]],
        summary: RunSummary,
        total: int,
    ) -> None:
        """Run the batches in turn; once more nodes failed than the rollout allows, the
        rest of a changing step is blocked with the reason."""
        pending = {t for batch in batches for t in batch}
        for batch in batches:
            # A retried target's earlier failure does not count against its own retry.
            failed_before = self._failed_nodes(summary, step, pending)
            pending -= set(batch)
            limit = self.site.rollout.failure_limit(total)
            if failed_before > limit and step.kind in _CHANGING:
                for target in batch:
                    reason = (
                        f"rollout stopped: {failed_before} node(s) failed this step, more than "
                        f"rollout.max_failed_nodes={self.site.rollout.max_failed_nodes}"
                        + (
                            f" ({limit} of {total})"
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
            # Every target's failure was recorded on its own (``_guarded``); what is left
            # to raise is cancellation or the operator's abort, once all targets ended.
            for result in results:
                if isinstance(result, asyncio.CancelledError | KeyboardInterrupt):
                    raise result
            for result in results:
                if isinstance(result, BaseException):
                    raise result

    async def _offer_retry(self, step: Step, targets: list[str], summary: RunSummary) -> list[str]:
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
            and self.checkpoint.record(step.id, t).get("message", "").startswith("rollout stopped")
        ]
        failing = [
            finding
            for target in failed
            for finding in summary.findings.get((step.id, target), [])
            if finding.severity is Severity.FAIL and not finding.waived
        ]
        if any(f.check.endswith(".internal-error") for f in failing):
            return []  # a bug in the wizard: the run ends on the error screen (exit 70)
        waivable = (
            step.kind in (StepKind.CHECK, StepKind.MEASURE)
            and bool(failing)
            and not any(f.check.rsplit(".", 1)[-1] in _NOT_WAIVABLE for f in failing)
        )
        checks = sorted({f.check for f in failing})
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
        )
        async with self._decision_lock:
            reply = await self.frontend.decide(self.checkpoint.redactor.value(decision))
        answer = self._answer(decision, reply)
        if answer is Answer.WAIVE:
            reason = reply.reason.strip()
            if not waivable or not reason:
                why = "these checks cannot be waived" if not waivable else "a waiver needs a reason"
                self.emit(Notice(f"{step.id}: not waived: {why}", decision.target))
                return await self._offer_retry(step, targets, summary)
            for check in checks:
                self.checkpoint.add_waiver(check, reason)
                self._waivers[check] = reason
            self.journal({"event": "waived", "step": step.id, "checks": checks, "reason": reason})
            return failed + held_back
        if answer is Answer.PROCEED:
            return failed + held_back
        return []

    def _batches(self, step: Step, targets: list[str]) -> list[list[str]]:
        """Maintenance never runs on every node at once: it rolls in batches, each with its
        own window gate; apply steps too when rollout.apply_batch is set; measurements
        against the shared peer take turns; checks fan out."""
        if step.scope == Scope.NODE and step.one_node_at_a_time:
            return measurement_waves(targets, lambda t: step.measured_with(self.site, t))
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
    def _failed_nodes(summary: RunSummary, step: Step, pending: set[str]) -> int:
        """How many targets failed this step so far, leaving out those still to run."""
        return sum(
            1
            for (s, target), state in summary.results.items()
            if s == step.id and state is StepState.FAILED and target not in pending
        )

    async def _guarded(
        self, step: Step, target: str, explicit: bool
    ) -> tuple[StepState, list[Finding]]:
        """Run one target; an unexpected exception (a bug) fails that target with a finding
        naming the step and the journal, instead of ending the run for every node."""
        try:
            return await self._run_target(step, target, explicit)
        except (Aborted, DecisionRequired, asyncio.CancelledError):
            raise
        except Exception as exc:
            self._inflight.pop(target, None)
            where = self.checkpoint.directory / "journal.jsonl"
            self.journal(
                {"event": "internal-error", "target": target, "step": step.id,
                 "where": f"step {step.id} on {target}", "error": f"{type(exc).__name__}: {exc}",
                 "traceback": traceback.format_exc()}
            )  # fmt: skip
            gate = step.gates[0] if step.gates else "T00"
            finding = Finding(
                f"{gate}.internal-error",
                gate,
                Severity.FAIL,
                f"internal error in {step.id} on {target}: {type(exc).__name__}: {exc}",
                f"a bug in gpu-node-wizard, not in the site: the journal {where} has the "
                "traceback; report it, then retry the step",
            )
            self.checkpoint.set_step(
                step.id, target, StepState.FAILED, message="internal error", findings=[finding]
            )
            self.emit(StepFinished(step.id, target, StepState.FAILED, "internal error", (finding,)))
            return StepState.FAILED, [finding]

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
            if not (
                previous is StepState.DONE
                and self._reverify_needed(step, target)
                and step.kind in (StepKind.CHECK, StepKind.APPLY, StepKind.MAINTENANCE)
            ):
                # Settled in an earlier run: its verdicts still count, so the front end
                # sees them (the findings table and the report after a resume).
                self.emit(
                    StepFinished(
                        step.id, target, previous, "already done (checkpoint)", tuple(findings)
                    )
                )
                return previous, findings
            still = await self._still_in_place(step, ctx)
            if still is not None:
                return still

        skipped = self._skipped_provider(step, target)
        if skipped:
            return self._skipped(step, ctx, skipped, by="the wizard")
        blocker = self._blocker(step, target, explicit)
        if blocker:
            cp.set_step(step.id, target, StepState.BLOCKED, message=blocker)
            self.emit(StepFinished(step.id, target, StepState.BLOCKED, blocker))
            return StepState.BLOCKED, []

        self.emit(StepStarted(step.id, target, step.title))
        try:
            interrupted = previous in (StepState.RUNNING, StepState.WAITING)
            inflight = cp.record(step.id, target).get("extra", {}).get("maintenance")
            # A change that failed on a bug part-way keeps its persisted capture: it too
            # resumes from it, never from a second capture of the half-applied state.
            if (
                step.kind is StepKind.MAINTENANCE
                and isinstance(inflight, dict)
                and (interrupted or previous is StepState.FAILED)
            ):
                return await self._resume_maintenance(step, ctx, inflight)
            if interrupted:
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
            return self._finish(ctx, StepState.DONE, findings, "verified after interruption")
        return None

    def _reverify_needed(self, step: Step, target: str) -> bool:
        """A settled result is trusted on the boot it was verified on: a node that rebooted
        since (each record keeps its boot id, so a read-only run in between does not use the
        reboot up) is verified again. A node unreachable at the start (e.g. rebooting under
        the reboot step) keeps its results until a step reaches it."""
        verified_on = self.checkpoint.record(step.id, target).get("extra", {}).get("verified_boot")
        current = self._boots.get(target)
        if verified_on and current:
            return verified_on != current
        return target in self._rebooted

    async def _still_in_place(
        self, step: Step, ctx: StepContext
    ) -> tuple[StepState, list[Finding]] | None:
        """After a reboot: a settled result is trusted again only if it verifies; None
        means it no longer holds and the step runs again."""
        self.emit(StepStarted(step.id, ctx.target, step.title))
        try:
            findings = self._waive(await step.verify(ctx))
        except NotAutomated:
            return self._finish(ctx, StepState.DONE, self.checkpoint.findings(step.id, ctx.target))
        except TransportError as exc:
            return self._finish(ctx, StepState.FAILED, [_transport_finding(step, exc)], str(exc))
        if worst(findings) is not Severity.FAIL:
            return self._finish(ctx, StepState.DONE, findings, "re-verified after a reboot")
        if step.kind is StepKind.CHECK:
            return self._finish(ctx, StepState.FAILED, findings, "no longer holds after a reboot")
        self.emit(Notice(f"{step.id} no longer holds after a reboot: running it again", ctx.target))
        self.checkpoint.reset(step.id, ctx.target)
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
        if kind == StepKind.MANUAL and not step.runs_itself(self.site):
            text = step.instructions(self.site, ctx.node)
            reply = await self._ask(
                Decision(DecisionKind.MANUAL_DONE, step.id, step.title, ctx.target, text)
            )
            if reply is Answer.SKIP:
                return self._skipped(step, ctx, "skipped by the operator (manual step not done)")
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
        if step.kind is StepKind.MAINTENANCE:
            return await self._maintain(step, ctx)
        try:
            changes = await step.changes(ctx)
        except NotAutomated:
            return self._not_automated(step, ctx)
        pending = [c for c in changes if c.changed]
        if not pending:
            return await self._already_in_place(step, ctx, changes)
        decision = Decision(
            DecisionKind.CONFIRM_APPLY,
            step.id,
            step.title,
            ctx.target,
            f"{len(pending)} change(s) on {ctx.target}"
            + "".join(f"; {c.note}" for c in pending if c.note),
            diffs=tuple(_diff(c) for c in changes),
            other_nodes=self._other_nodes(step, ctx.target),
            # The exact commands with the diff (for a Helm release: chart, version, values).
            actions=tuple(step.actions(self.site, ctx.node)),
        )
        if not await self._confirmed(step, decision):
            return self._skipped(step, ctx, "skipped by the operator at the review")
        self.checkpoint.set_step(step.id, ctx.target, StepState.RUNNING)
        try:
            with _effects(ctx):
                await step.apply(ctx, pending)
        except NotAutomated:
            return self._not_automated(step, ctx)
        return await self._check(step, ctx)

    async def _already_in_place(
        self, step: Step, ctx: StepContext, changes: list[Change]
    ) -> tuple[StepState, list[Finding]]:
        """Nothing differs from what is wanted: no question, just the verification."""
        if changes:
            self.emit(Notice(f"{step.id}: already in place, nothing to change", ctx.target))
        return await self._check(step, ctx)

    # -- maintenance: one sequence for every step that takes a node out of service --------

    async def _maintain(self, step: Step, ctx: StepContext) -> tuple[StepState, list[Finding]]:
        """Capture, gate, persist, then the sequence (``_sequence``)."""
        try:
            capture = await step.capture(ctx)
            ctx.data["capture"] = capture
            changes = await step.changes(ctx)
        except NotAutomated:
            return self._not_automated(step, ctx)
        pending = [c for c in changes if c.changed]
        if not pending:
            return await self._already_in_place(step, ctx, changes)
        window = Decision(
            DecisionKind.MAINTENANCE_WINDOW,
            step.id,
            step.title,
            ctx.target,
            self._window_text(step, ctx),
            diffs=tuple(_diff(c) for c in changes),
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
        state = _STAGE_STATE.get(stage, stage)
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
                with _effects(ctx):
                    await kube.cordon(node)
                    ctx.data["evicted"] = await kube.drain(node)
            except TransportError as exc:
                # Nothing on the host changed yet: no rollback (it would bounce the bond
                # under pods that still run); the node is made schedulable again.
                finding = _transport_finding(step, exc)
                with contextlib.suppress(TransportError), _effects(ctx):
                    await kube.cordon(node, False)
                self._end_maintenance(step, ctx)
                return self._finish(
                    ctx, StepState.FAILED, [finding],
                    "the drain failed before any change: nothing was changed on the host; "
                    "uncordoned",
                )  # fmt: skip
        try:
            self._stage(step, ctx, "applying")
            with _effects(ctx):
                await step.apply(ctx, [])
        except NotAutomated:
            self._inflight.pop(node, None)
            return self._not_automated(step, ctx)
        except TransportError as exc:
            # A change that broke off part-way must not leave the node half done.
            return await self._offer_rollback(
                step, ctx, [_transport_finding(step, exc)], "the change failed part-way"
            )
        self._stage(step, ctx, "verifying")
        try:
            findings = self._waive(await step.verify(ctx))
        except TransportError as exc:
            findings = [_transport_finding(step, exc)]
        if worst(findings) is Severity.FAIL:
            return await self._offer_rollback(step, ctx, findings, "verification failed")
        if step.drains:
            self._stage(step, ctx, "uncordoning")
            with _effects(ctx):
                await kube.cordon(node, False)
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
        self._inflight[ctx.target] = _STAGE_STATE.get(stage, stage)
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
                    with _effects(ctx):
                        findings = findings + self._waive(await step.undo(ctx))
                    message = f"{why}; rolled back"
                except NotAutomated:
                    message = f"{why}; no automated rollback: use the rollback script"
                except TransportError as exc:
                    findings = [*findings, _transport_finding(step, exc)]
                    message = f"{why}; the rollback failed too: use the rollback script by hand"
        if step.drains:
            message += f"; {node} stays cordoned until the change verifies"
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
            reply = await self.frontend.decide(self.checkpoint.redactor.value(decision))
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
            reply = await self.frontend.decide(self.checkpoint.redactor.value(decision))
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
        if state is not StepState.DONE:
            # What a step provides stands for its result: only a done step has one (the
            # checkpoint merges extra, so an earlier run's value is dropped there too).
            recorded = self.checkpoint.record(ctx.step.id, ctx.target).get("extra", {})
            for key in ctx.step.provides:
                ctx.data.pop(key, None)
                recorded.pop(key, None)
        extra = dict(ctx.data)
        if ctx.target in self._boots and state is StepState.DONE:
            extra["verified_boot"] = self._boots[ctx.target]
        self.checkpoint.set_step(
            ctx.step.id,
            ctx.target,
            state,
            message=message,
            findings=findings,
            measurements=measurements,
            extra=extra or None,
            # A check's result is group-committed (cheap to redo); anything that guards an
            # effect or an operator's answer is written before the run goes on.
            durable=ctx.step.kind is not StepKind.CHECK,
        )
        self.emit(StepFinished(ctx.step.id, ctx.target, state, message, tuple(findings)))
        return state, findings


_CHANGING = (StepKind.APPLY, StepKind.MAINTENANCE)

# Failures a waiver must not hide: the host could not be reached or used (the last part
# of the check's name, see _transport_finding).
_NOT_WAIVABLE = frozenset({"reachable", "timeout", "command"})
MAX_RETRY_FINDINGS = 50  # a fleet's failures in one dialog: the first ones, the count in the title

# What a node is like while its maintenance is at a stage (for notices and a quit warning).
_STAGE_STATE = {
    "confirmed": "window confirmed, nothing changed yet",
    "draining": "cordoned, pods being evicted",
    "applying": "cordoned and drained; the change is being applied and may be half done",
    "verifying": "cordoned; the change was applied and is being verified",
    "uncordoning": "verified; being uncordoned",
    "rolling-back": "cordoned; being rolled back to the captured state",
}


@contextlib.contextmanager
def _effects(ctx: StepContext) -> Iterator[None]:
    """Mark a step's commands as effects (journaled ahead) for the block's duration."""
    before, ctx.effects = ctx.effects, True
    try:
        yield
    finally:
        ctx.effects = before


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
