"""The headless front end: events as plain lines, decisions from standing answers.

Used by ``run --headless``, ``demo --headless`` and ``check``. Apply steps proceed only
with ``--yes``; maintenance gates only with ``--maintenance-window-open`` (and ``--yes``); a
change outside the new nodes only with ``--allow-cluster-change NAME``; the deletion of a
pod with no controller by a drain only with ``--delete-bare-pod NAMESPACE/NAME``.
Without them the run stops at the first decision and says which flag it needed.

What a line says of a step (its state, message and findings) is read from the one fold of
the run (``wizard.runview.RunView``, the TUI's and ``status``'s too) once the event is
folded in, not from the event: a retry's result replaces the one it retried there alone.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TextIO

from wizard.engine import DecisionRequired
from wizard.events import (
    Answer,
    CommandFinished,
    CommandStarted,
    Decision,
    DecisionKind,
    Event,
    Notice,
    OutputLine,
    PhaseStarted,
    Reply,
    StepCompleted,
    StepFinished,
    StepStarted,
    WaitEnded,
    Waiting,
)
from wizard.fleet import group_targets, targets_text
from wizard.model import Severity, StepState
from wizard.runview import RunView


class HeadlessFrontEnd:
    def __init__(
        self,
        *,
        yes: bool = False,
        window_open: bool = False,
        allow_storage_load: frozenset[str] | set[str] = frozenset(),
        allow_cluster_change: frozenset[str] | set[str] = frozenset(),
        delete_bare_pods: frozenset[str] | set[str] = frozenset(),
        verbose: bool = False,
        show_findings: bool = True,
        compact: bool = False,
        out: TextIO | None = None,
        view: RunView | None = None,
    ) -> None:
        self.show_findings = show_findings
        # A fleet: a node that simply passed a step is not a line of its own; each step
        # ends with one line that groups its nodes by outcome.
        self.compact = compact
        self._held_notices: dict[str, list[str]] = {}  # compact: message -> targets
        self.yes = yes
        self.window_open = window_open
        # The production AIStor peers the operator named for load (--allow-storage-load).
        self.allow_storage_load = frozenset(allow_storage_load)
        # The changes outside the new nodes the operator approved by name
        # (--allow-cluster-change; wizard/approvals.py ClusterChange values).
        self.allow_cluster_change = frozenset(allow_cluster_change)
        # The pods with no controller the operator approved to delete by name
        # (--delete-bare-pod NAMESPACE/NAME): a drain deletes them for good.
        self.delete_bare_pods = frozenset(delete_bare_pods)
        self.verbose = verbose
        self.wants_output_lines = verbose  # lines are printed only with --verbose
        self.out = out or sys.stdout
        self.out_closed = False
        self.events: list[Event] = []
        # The run so far, folded from the events (given: a caller's view of the plan).
        self.view = view if view is not None else RunView()

    def _print(self, text: str) -> None:
        """Print a line; once the reader is gone (``run ... | head``) print nothing more.
        A closed pipe is the reader's choice, not a failure of the step being told about
        (it was recorded as the step's internal error)."""
        if self.out_closed:
            return
        try:
            print(text, file=self.out, flush=True)
        except BrokenPipeError:
            self.out_closed = True
            with contextlib.suppress(OSError, ValueError):
                # Python flushes stdout again at exit: point it at nothing, quietly.
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, self.out.fileno())

    def emit(self, event: Event) -> None:
        self.events.append(event)
        self.view.apply(event)
        match event:
            case PhaseStarted(title=title):
                self._print(f"== {title}")
            case StepStarted(step=step, target=target, title=title) if self.verbose:
                self._print(f"   {target}: {title} ({step}) ...")
            case StepFinished(step=step, target=target) if (
                self.compact and not self.verbose and self._passed(step, target)
            ):
                pass  # told with its step's StepCompleted line
            case StepFinished(step=step, target=target):
                record = self.view.record(step, target)
                state, msg = record.state, record.message
                self._print(f"   {target}: {step}: {state.value}{f' - {msg}' if msg else ''}")
                for f in record.findings if self.show_findings else ():
                    if f.severity in (Severity.WARN, Severity.FAIL) or self.verbose:
                        tag = "waived" if f.waived else f.severity.value
                        self._print(f"      [{tag}] {f.gate} {f.check}: {f.message}")
                        if f.remediation and f.severity is not Severity.PASS:
                            self._print(f"             fix: {f.remediation}")
            case StepCompleted(step=step, results=results) if self.compact:
                for message, targets in self._held_notices.items():
                    self._print(f"   note ({targets_text(targets)}): {message}")
                self._held_notices.clear()
                outcomes = group_targets(
                    (self.view.record(step, target).state.value, target) for target, _ in results
                )
                self._print(
                    f"   {step}: "
                    + "; ".join(f"{state} on {targets_text(ts)}" for state, ts in outcomes)
                )
            case Notice(message=message, target=target) if self.compact and target:
                # The same note from many nodes is one line when their step completes.
                self._held_notices.setdefault(message, []).append(target)
            case Notice(message=message, target=target):
                self._print(f"   note{f' ({target})' if target else ''}: {message}")
            case Waiting(target=target, message=message, timeout_s=timeout) if not self.compact:
                self._print(f"   {target}: {message} (at most {timeout:.0f} s)")
            case CommandStarted(target=target, command=command) if self.verbose:
                self._print(f"   {target}$ {command}")
            case OutputLine(target=target, line=line) if self.verbose:
                self._print(f"   {target}| {line}")
            case (
                CommandFinished()
                | OutputLine()
                | CommandStarted()
                | StepStarted()
                | StepCompleted()
                | Waiting()
                | WaitEnded()
            ):
                pass

    def _passed(self, step: str, target: str) -> bool:
        """Done with nothing to say: no warning or failure (a fleet's node is not a line)."""
        record = self.view.record(step, target)
        return record.state is StepState.DONE and all(
            f.severity in (Severity.PASS, Severity.SKIP) for f in record.findings
        )

    async def decide(self, decision: Decision) -> Reply:
        if decision.kind is DecisionKind.MANUAL_DONE:
            # Headless: the operator has done the manual part already; verify it now.
            return Reply(Answer.PROCEED)
        if decision.kind is DecisionKind.ROLLBACK:
            # A failed verification of a change: restore the previous state.
            return Reply(Answer.PROCEED)
        if decision.kind is DecisionKind.MAINTENANCE_WINDOW:
            if not self.window_open:
                raise DecisionRequired(decision, "pass --maintenance-window-open")
            return Reply(Answer.PROCEED, typed=decision.confirm_text or "")
        if decision.kind is DecisionKind.STORAGE_LOAD:
            # Never implied by --yes: the operator names each production peer.
            if decision.confirm_text not in self.allow_storage_load:
                raise DecisionRequired(
                    decision, f"pass --allow-storage-load {decision.confirm_text}"
                )
            return Reply(Answer.PROCEED, typed=decision.confirm_text or "")
        if decision.kind is DecisionKind.CLUSTER_CHANGE:
            # Never implied by --yes: each change outside the new nodes is named.
            name = decision.confirm_text or ""
            if name not in self.allow_cluster_change:
                raise DecisionRequired(decision, f"pass --allow-cluster-change {name}")
            return Reply(Answer.PROCEED, typed=name, reason=f"--allow-cluster-change {name}")
        if decision.kind is DecisionKind.DELETE_BARE_POD:
            # Never implied by --yes nor the window: each pod a drain would lose is named.
            name = decision.confirm_text or ""
            if name not in self.delete_bare_pods:
                raise DecisionRequired(decision, f"pass --delete-bare-pod {name}")
            return Reply(Answer.PROCEED, typed=name, reason=f"--delete-bare-pod {name}")
        if not self.yes:
            raise DecisionRequired(decision, "review the diff, then pass --yes")
        return Reply(Answer.PROCEED)
