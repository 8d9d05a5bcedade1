"""The engine's run loop: phases in order, each step across its targets in batches,
every target guarded, its result recorded before the next action (see the package's
docstring for the rules)."""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from wizard import journal
from wizard.checkpoint import Checkpoint, finish_command, who_am_i
from wizard.engine.cluster_gate import (
    confirm_effects,
    effects_of,
    existing_pods,
    outside_line,
    record_additions,
    record_outcome,
    settled_pods,
)
from wizard.engine.decisions import Decisions
from wizard.engine.identity import MachineIdentity
from wizard.engine.leases import LeaseHeldError, LeaseLostError, NodeLeases
from wizard.engine.maintenance import STAGE_STATE, MaintenanceSequence, effects
from wizard.engine.requirements import Requirements
from wizard.engine.results import (
    CHANGING,
    Aborted,
    ChildStillRunningError,
    DecisionRequired,
    RunSummary,
    artifact_diff,
    state_for,
    transport_finding,
)
from wizard.engine.runtime import StepRuntime
from wizard.engine.storage_gate import confirm_peer_load
from wizard.errors import CheckpointWriteError
from wizard.events import (
    Answer,
    Decision,
    DecisionKind,
    Event,
    FrontEnd,
    Notice,
    PhaseStarted,
    ShownFile,
    StepCompleted,
    StepFinished,
    StepStarted,
)
from wizard.model import NO_GATE, Finding, Severity, StepKind, StepState, skipped_finding, worst
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
from wizard.transports.base import TransportError

# How long a resume waits for a process a stopped run started (wizard/transports/children.py).
CHILD_WAIT_S = 120.0


class Engine:
    """Runs the plan over the site (see the package's docstring), with four collaborators:
    ``identity`` (which machines the results describe), ``requirements`` (what must be
    settled before a step), ``decisions`` (the operator's answers and waivers) and
    ``maintenance`` (the one sequence that takes a node out of service)."""

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
        # The questions to the front end, the approvals and the waivers.
        self.decisions = Decisions(site, plan, checkpoint, frontend, self.emit, waivers)
        # The one sequence that takes a node out of service (wizard/engine/maintenance.py).
        self.maintenance = MaintenanceSequence(
            site, checkpoint, self.services, self.decisions, self, self.emit
        )
        self._shared_reads: dict[tuple[str, str], asyncio.Future[Any]] = {}
        # What must be settled before a step runs (wizard/engine/requirements.py).
        self.requirements = Requirements(plan, site, checkpoint)
        self._node_slots = asyncio.Semaphore(site.max_parallel_nodes)
        # Which machines the results describe (wizard/engine/identity.py).
        self.identity = MachineIdentity(site, plan, checkpoint, self.services, self.emit)
        # The per-node lock in the cluster, taken before the first change to a node.
        self._leases = NodeLeases(self.services, site.name)
        self._leases.progress = lambda message: self.emit(Notice(message))
        # (step, target) -> the nodes whose leases guard its effects.
        self._lease_nodes: dict[tuple[str, str], tuple[str, ...]] = {}

    def note_boot(self, target: str, boot_id: str) -> None:
        """A step saw the node boot anew (the reboot step): that boot is the known one."""
        self.identity.note_boot(target, boot_id)

    def maintenance_in_flight(self) -> dict[str, str]:
        """Nodes in the middle of a maintenance change, and the state each is in (for a
        front end that must warn before quitting)."""
        return dict(self.maintenance.in_flight)

    # -- front-end plumbing --------------------------------------------------------------

    def emit(self, event: Event) -> None:
        # One redactor on every path to the operator: the terminal (--verbose prints each
        # command line), the TUI's log and its finding panel see what the journal keeps.
        self.frontend.emit(self.checkpoint.redactor.value(event))

    def journal(self, entry: dict[str, Any]) -> None:
        self.checkpoint.journal(entry)

    # -- resume ----------------------------------------------------------------------------

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
        await self._wait_for_children()
        summary = RunSummary(reset=self.identity.reconcile_site())
        explicit = phase is not None or step is not None or only is not None
        self.requirements.ignore_requires = ignore_requires
        self.identity.report_journal()
        summary.reset += await self.identity.reconcile_identity()
        if self.identity.host_key_errors:
            return self._refuse_host_keys(summary)
        try:
            in_flight = self._changes_in_flight()
            if in_flight and ignore_requires:
                # A read-only run changes nothing, so it cannot finish them: it says so,
                # and which command does (a check's own verdicts on such a node are of a
                # half-changed machine).
                summary.in_flight = self._describe_in_flight(in_flight)
                for line in summary.in_flight:
                    self.emit(Notice(line))
            elif in_flight:
                await self._finish_in_flight(in_flight, summary)
                unsettled = [
                    f"{each.id} on {target}"
                    for each, targets in in_flight
                    for target in targets
                    if summary.results.get((each.id, target))
                    in (StepState.FAILED, StepState.BLOCKED)
                ]
                if unsettled and not explicit:
                    # Left failed stops the run, as a failed step of a phase does: its window
                    # must not be asked again by its phase as if nothing had happened.
                    summary.stopped = (
                        f"the interrupted change did not finish: {', '.join(unsettled)}"
                    )
                    return summary
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
        finally:
            if self._leases.held():
                with journal.scope(self.checkpoint, "leases", CLUSTER):
                    await self._leases.release_all()
        return summary

    async def _wait_for_children(self) -> None:
        """A process a killed run started (ansible-playbook, helm) that still runs: wait
        for it to end, for at most CHILD_WAIT_S, then refuse to go on while it lives (a
        second scale.yml beside the first is two kubeadm joins racing)."""
        living = self.checkpoint.living_children()
        if not living:
            return
        deadline = time.monotonic() + CHILD_WAIT_S
        for entry in living:
            self.emit(
                Notice(
                    f"pid {entry['pid']} (`{entry.get('command', '?')}`), started by the "
                    f"stopped run for {entry.get('step')} on {entry.get('for')}, still runs: "
                    f"waiting up to {CHILD_WAIT_S:g}s for it to end before going on"
                )
            )
        while living and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            living = self.checkpoint.living_children()
        if living:
            entry = living[0]
            raise ChildStillRunningError(
                f"pid {entry['pid']} (`{entry.get('command', '?')}`), started by a stopped run "
                f"for {entry.get('step')} on {entry.get('for')}, still runs: a second one would "
                f"race it. Wait for it to end (or stop it: kill {entry['pid']}), then run again"
            )

    def _refuse_host_keys(self, summary: RunSummary) -> RunSummary:
        """A node's host key differs from known_hosts: nothing runs, whatever the checkpoint
        says (its results were recorded on the machine with the known key, and whoever
        answers now must not be given a command), and the run fails naming the cause."""
        for name, exc in sorted(self.identity.host_key_errors.items()):
            finding = Finding(
                "T00.reachable",
                "T00",
                Severity.FAIL,
                str(exc),
                "verify the host key and update known_hosts (see the message); nothing ran",
            )
            summary.results[("identity", name)] = StepState.FAILED
            summary.findings[("identity", name)] = [self.checkpoint.redactor.value(finding)]
            self.emit(Notice(f"refused: {exc}", name))
            self.journal({"event": "host-key-mismatch", "target": name, "error": str(exc)})
        summary.stopped = self.checkpoint.redactor.text(
            "the SSH host key of "
            + ", ".join(sorted(self.identity.host_key_errors))
            + " does not match known_hosts (possible man-in-the-middle): nothing was run"
        )
        return summary

    def _changes_in_flight(self) -> list[tuple[Step, list[str]]]:
        """The plan's maintenance steps with a change in flight, in plan order, each with
        the nodes it is in flight on (begun, capture persisted, neither finished nor rolled
        back: such a node may be cordoned and half changed)."""
        by_step: dict[str, list[str]] = {}
        names = {n.name for n in self.site.nodes}
        for step_id, target, _ in self.checkpoint.in_flight():
            if target in names:
                by_step.setdefault(step_id, []).append(target)
        found = []
        for current in self.plan.phases:
            for each in current.steps:
                if each.kind is StepKind.MAINTENANCE and each.id in by_step:
                    found.append((each, by_step[each.id]))
        return found

    def _describe_in_flight(self, in_flight: list[tuple[Step, list[str]]]) -> list[str]:
        command = finish_command(self.site, self.checkpoint.directory.parent)
        lines = []
        for step, targets in in_flight:
            for target in targets:
                change = self.checkpoint.record(step.id, target).maintenance
                stage = change.stage if change is not None else "confirmed"
                lines.append(
                    f"{step.id} is in flight on {target} ({STAGE_STATE.get(stage, stage)}): "
                    f"{command} finishes it or rolls it back"
                )
        return lines

    async def _finish_in_flight(
        self, in_flight: list[tuple[Step, list[str]]], summary: RunSummary
    ) -> None:
        """A maintenance change in flight is finished or rolled back before anything else
        runs, whatever the run was asked to do: a check that failed on the half-changed
        node (its bond half formed) must not gate the run that would repair it, and a run
        of another phase or step must not leave the node cordoned behind it."""
        for step, targets in in_flight:
            self.emit(
                Notice(
                    f"{step.id} is in flight on {', '.join(targets)}: it is finished or rolled "
                    "back before anything else runs"
                )
            )
            await self._run_step(step, summary, explicit=True, targets=targets)

    async def shared_read(self, key: tuple[str, str], read: Callable[[], Awaitable[Any]]) -> Any:
        """One answer per key for the current run of a step (see StepContext.shared);
        concurrent callers wait for the same request."""
        future = self._shared_reads.get(key)
        if future is None:
            future = self._shared_reads[key] = asyncio.ensure_future(read())
        return await asyncio.shield(future)

    async def _run_step(
        self, step: Step, summary: RunSummary, *, explicit: bool, targets: list[str] | None = None
    ) -> None:
        targets = targets if targets is not None else self.plan.targets(step, self.site)
        # A shared read answers one run of a step: the next run reads afresh.
        for key in [k for k in self._shared_reads if k[0] == step.id]:
            del self._shared_reads[key]

        async def one(target: str) -> None:
            # Before each journaled effect: the leases this target's step holds are still
            # this run's (a lost lease refuses the effect, naming the new holder).
            def still_ours() -> None:
                self._lease_failures()
                for node in self._lease_nodes.get((step.id, target), ()):
                    self._leases.check(node)

            with journal.scope(self.checkpoint, step.id, target, still_ours):
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
        while again := await self.decisions.offer_retry(step, targets, summary):
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
            if failed_before > limit and step.kind in CHANGING:
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

    def _batches(self, step: Step, targets: list[str]) -> list[list[str]]:
        """Maintenance never runs on every node at once: it rolls in batches, each with its
        own window gate; apply steps too when rollout.apply_batch is set; measurements
        against the shared peer take turns; checks fan out."""
        if step.scope == Scope.NODE and step.one_node_at_a_time:
            return measurement_waves(targets, lambda t: step.measured_with(self.site, t))
        if step.scope != Scope.NODE or step.kind not in CHANGING:
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
        except (Aborted, DecisionRequired, CheckpointWriteError, asyncio.CancelledError):
            raise  # a state folder that takes no writes stops the run, for every node
        except Exception as exc:
            self.maintenance.in_flight.pop(target, None)
            where = self.checkpoint.directory / "journal.jsonl"
            self.journal(
                {"event": "internal-error", "target": target, "step": step.id,
                 "where": f"step {step.id} on {target}", "error": f"{type(exc).__name__}: {exc}",
                 "traceback": traceback.format_exc()}
            )  # fmt: skip
            finding = Finding(
                *step.engine_check("internal-error"),
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
        ctx = StepRuntime(self.site, step, target, node, self.services, self)

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

        if (
            previous is StepState.FAILED
            and not step.rerun_when_lost
            and cp.record(step.id, target).reverified
        ):
            # It failed its re-verification after a reboot: verified again, never run anew.
            still = await self._still_in_place(step, ctx)
            if still is not None:
                return still
        interrupted = previous in (StepState.RUNNING, StepState.WAITING)
        inflight = cp.record(step.id, target).maintenance
        # A change that failed on a bug part-way keeps its persisted capture: it too
        # resumes from it, never from a second capture of the half-applied state. Nothing
        # blocks that: what it needs was in place when it began, and a requirement that
        # fails now may fail because of the half change.
        resuming = (
            step.kind is StepKind.MAINTENANCE
            and inflight is not None
            and (interrupted or previous is StepState.FAILED)
        )
        if not resuming:
            skipped = self.requirements.skipped_provider(step, target)
            if skipped:
                return self.skipped(step, ctx, skipped, by="the wizard")
            blocker = self.requirements.blocker(step, target, explicit)
            if blocker:
                cp.set_step(step.id, target, StepState.BLOCKED, message=blocker)
                self.emit(StepFinished(step.id, target, StepState.BLOCKED, blocker))
                return StepState.BLOCKED, []

        self.emit(StepStarted(step.id, target, step.title))
        try:
            if resuming:
                held = await self._hold_node(step, ctx)
                if held is not None:
                    return held
                return await self.maintenance.resume(step, ctx, inflight)
            if interrupted:
                done = await self._reverify(step, ctx)
                if done is not None:
                    return done
            return await self._dispatch(step, ctx)
        except TransportError as exc:
            finding = transport_finding(step, exc)
            return self.finish(ctx, StepState.FAILED, [finding], str(exc))

    async def _reverify(self, step: Step, ctx: StepContext) -> tuple[StepState, list] | None:
        """After an interruption: if the step's result is already in place, it is done."""
        self.emit(Notice(f"{step.id} was interrupted on {ctx.target}; verifying first"))
        try:
            findings = self.decisions.waive(await step.verify(ctx))
        except NotAutomated:
            return None
        if findings and worst(findings) != Severity.FAIL:
            return self.finish(ctx, StepState.DONE, findings, "verified after interruption")
        return None

    def _reverify_needed(self, step: Step, target: str) -> bool:
        """A settled result is trusted on the boot it was verified on: a node that rebooted
        since (each record keeps its boot id, so a read-only run in between does not use the
        reboot up) is verified again. A node unreachable at the start (e.g. rebooting under
        the reboot step) keeps its results until a step reaches it."""
        return self.identity.needs_reverify(
            target, self.checkpoint.record(step.id, target).verified_boot
        )

    async def _still_in_place(
        self, step: Step, ctx: StepContext
    ) -> tuple[StepState, list[Finding]] | None:
        """After a reboot: a settled result is trusted again only if it verifies; None
        means it no longer holds and the step runs again."""
        self.emit(StepStarted(step.id, ctx.target, step.title))
        try:
            findings = self.decisions.waive(await step.verify(ctx))
        except NotAutomated:
            return self.finish(ctx, StepState.DONE, self.checkpoint.findings(step.id, ctx.target))
        except TransportError as exc:
            return self.finish(ctx, StepState.FAILED, [transport_finding(step, exc)], str(exc))
        ctx.data["reverified"] = True  # this result is the re-verification's, not a run's
        if worst(findings) is not Severity.FAIL:
            return self.finish(ctx, StepState.DONE, findings, "re-verified after a reboot")
        if step.kind is StepKind.CHECK:
            return self.finish(ctx, StepState.FAILED, findings, "no longer holds after a reboot")
        if not step.rerun_when_lost:
            return self.finish(
                ctx,
                StepState.FAILED,
                findings,
                "no longer holds after a reboot; fix the cause and rerun (it is verified "
                f"again, not run again): `run SITE --redo {step.id}@{ctx.target}` runs it anew",
            )
        self.emit(Notice(f"{step.id} no longer holds after a reboot: running it again", ctx.target))
        self.checkpoint.reset(step.id, ctx.target)
        return None

    async def _dispatch(self, step: Step, ctx: StepContext) -> tuple[StepState, list[Finding]]:
        kind = step.kind
        if kind == StepKind.CHECK:
            return await self._check(step, ctx)
        if kind == StepKind.MEASURE:
            if not await confirm_peer_load(self, step, ctx):
                return self.skipped(
                    step, ctx, "skipped by the operator: no load on the production storage peer"
                )
            self.checkpoint.set_step(step.id, ctx.target, StepState.RUNNING)
            try:
                findings = self.decisions.waive(await step.measure(ctx))
            except NotAutomated:
                return self.not_automated(step, ctx)
            return self.finish(ctx, state_for(findings), findings)
        if kind == StepKind.MANUAL and not step.runs_itself(self.site):
            text = step.instructions(self.site, ctx.node)
            files = tuple(
                ShownFile(a.path, a.destination, a.description, a.content)
                for a in step.artifacts(self.site, ctx.node)
            )
            reply = await self.decisions.ask(
                Decision(
                    DecisionKind.MANUAL_DONE, step.id, step.title, ctx.target, text, files=files
                )
            )
            if reply is Answer.SKIP:
                return self.skipped(step, ctx, "skipped by the operator (manual step not done)")
            return await self._check(step, ctx)
        return await self._apply(step, ctx)

    async def _check(self, step: Step, ctx: StepContext) -> tuple[StepState, list[Finding]]:
        # A read-only check has no effect to protect, so no 'running' record is written
        # before it (on a fleet that halves the checkpoint writes); a change's verification
        # runs after apply() has already recorded 'running'.
        try:
            findings = self.decisions.waive(await step.verify(ctx))
        except NotAutomated:
            return self.not_automated(step, ctx)
        return self.finish(ctx, state_for(findings), findings)

    async def _hold_node(self, step: Step, ctx: StepContext) -> tuple[StepState, list] | None:
        """Take the node's lease before the first change to it (wizard/engine/leases.py);
        the target's failed result when another wizard is changing the node."""
        if step.scope is Scope.NODE:
            nodes: tuple[str, ...] = (ctx.target,) if ctx.node is not None else ()
        else:
            # A cluster-scoped step that changes nodes (the join): every one of their leases.
            nodes = step.leased_nodes(self.site)
        if not nodes:
            return None
        self._lease_nodes[(step.id, ctx.target)] = nodes
        notes: list[tuple[str, str]] = []
        try:
            for node in nodes:
                if note := await self._leases.acquire(node):
                    notes.append((node, note))
        except (LeaseHeldError, LeaseLostError) as exc:
            finding = Finding(
                *step.engine_check("lease"),
                Severity.FAIL,
                str(exc),
                "let the other run finish (or free its lease as the message says), then run again",
            )
            return self.finish(
                ctx, StepState.FAILED, [finding], "refused: another wizard holds the node"
            )
        finally:
            self._lease_failures()
        for node, note in notes:
            self.emit(Notice(note, node))
            self.journal({"event": "lease-taken-over", "target": node, "detail": note})
        return None

    def _lease_failures(self) -> None:
        """Failed lease renewals, shown and journaled (never silent)."""
        for failure in self._leases.failures():
            self.emit(Notice(failure))
            self.journal({"event": "lease-renewal-failed", "detail": failure})

    async def _apply(self, step: Step, ctx: StepContext) -> tuple[StepState, list[Finding]]:
        held = await self._hold_node(step, ctx)
        if held is not None:
            return held
        refusals = self.decisions.waive(await step.preconditions(ctx))
        if worst(refusals) is Severity.FAIL:
            return self.finish(ctx, StepState.FAILED, refusals, "refused: a precondition failed")
        if step.kind is StepKind.MAINTENANCE:
            return await self.maintenance.run(step, ctx)
        changes, result = await self.changes_to_make(step, ctx)
        if result is not None:
            return result
        pending = [c for c in changes if c.changed]
        outside = effects_of(pending)
        decision = Decision(
            DecisionKind.CONFIRM_APPLY,
            step.id,
            step.title,
            ctx.target,
            f"{len(pending)} change(s) on {ctx.target}"
            + "".join(f"; {c.note}" for c in pending if c.note)
            + (
                outside_line(step, outside, pending)
                if step.scope is Scope.CLUSTER or outside
                else ""
            ),
            diffs=tuple(artifact_diff(c) for c in changes),
            other_nodes=self.decisions.other_nodes(step, ctx.target),
            # The exact commands with the diff (for a Helm release: chart, version, values).
            actions=tuple(step.actions(self.site, ctx.node)),
        )
        if not await self.decisions.confirmed(step, decision):
            return self.skipped(step, ctx, "skipped by the operator at the review")
        approvals = await confirm_effects(self, step, ctx, outside) if outside else []
        if approvals is None:
            names = ", ".join(e.change.value for e in outside)
            return self.skipped(
                step, ctx, f"skipped by the operator: the change outside the new nodes ({names}) "
                "was not approved by name",
            )  # fmt: skip
        before = await existing_pods(ctx) if approvals else {}
        self.checkpoint.set_step(step.id, ctx.target, StepState.RUNNING)
        after, settled = None, True
        try:
            with effects(ctx):
                await step.apply(ctx, pending)
            record_additions(self, step, ctx, pending)
            result = await self._check(step, ctx)
            if approvals:
                predicted = tuple(p for a in approvals for p in a.predicted)
                after, settled = await settled_pods(ctx, before, predicted)
            return result
        except NotAutomated:
            return self.not_automated(step, ctx)
        finally:
            if approvals:
                record_outcome(self, approvals, before, after, settled)

    async def changes_to_make(
        self, step: Step, ctx: StepContext
    ) -> tuple[list[Change], tuple[StepState, list[Finding]] | None]:
        """The step's changes, or its result when it has none to make: not automated, or
        already in place (verified, nothing asked)."""
        try:
            changes = await step.changes(ctx)
        except NotAutomated:
            return [], self.not_automated(step, ctx)
        if not any(c.changed for c in changes):
            return changes, await self._already_in_place(step, ctx, changes)
        return changes, None

    async def _already_in_place(
        self, step: Step, ctx: StepContext, changes: list[Change]
    ) -> tuple[StepState, list[Finding]]:
        """Nothing differs from what is wanted: no question, just the verification."""
        if changes:
            self.emit(Notice(f"{step.id}: already in place, nothing to change", ctx.target))
        return await self._check(step, ctx)

    # -- maintenance: one sequence for every step that takes a node out of service --------

    # -- helpers -----------------------------------------------------------------------------

    def _name_the_cause(
        self, ctx: StepContext, findings: list[Finding], message: str
    ) -> tuple[list[Finding], str]:
        """A failure downstream of a skipped or failed step names that step first, in the
        result's message and in each failing check (message and fix)."""
        cause = self.requirements.upstream_cause(ctx.step, ctx.target)
        if cause is None:
            return findings, message
        said, todo = cause
        named = [
            replace(f, message=f"{said}: {f.message}", remediation=f"{todo}; then: {f.remediation}")
            if f.severity is Severity.FAIL and not f.waived and not f.message.startswith(said)
            else f
            for f in findings
        ]
        return named, (f"{said}; {message}" if message else said)

    def skipped(
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
        return self.finish(ctx, StepState.SKIPPED, findings, why)

    def not_automated(self, step: Step, ctx: StepContext) -> tuple[StepState, list[Finding]]:
        finding = Finding(
            check=f"{step.id}.manual",
            gate=step.gate or NO_GATE,
            severity=Severity.SKIP,
            message="this step is not automated yet: run its runbook commands by hand",
            remediation="see RUNBOOK.md from `gpu-node-wizard export`",
        )
        return self.finish(ctx, StepState.DONE, [finding], "not automated")

    def finish(
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
            for key in ctx.step.provides:
                ctx.data.pop(key.name, None)
            self.checkpoint.drop_result(
                ctx.step.id, ctx.target, tuple(key.name for key in ctx.step.provides)
            )
        if state is StepState.FAILED:
            findings, message = self._name_the_cause(ctx, findings, message)
        extra = dict(ctx.data)
        if state is StepState.SKIPPED:
            # A failed change (and its rollback) stays in the record under a later skip.
            earlier = self.checkpoint.earlier_with_failure(ctx.step.id, ctx.target)
            if earlier is not None:
                extra["earlier"] = earlier
        boot = self.identity.current_boot(ctx.target)
        if boot is not None and state is StepState.DONE:
            extra["verified_boot"] = boot
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
