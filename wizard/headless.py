"""The headless front end: events as plain lines, decisions from standing answers.

Used by ``run --headless``, ``demo --headless`` and ``check``. Apply steps proceed only
with ``--yes``; maintenance gates only with ``--maintenance-window-open`` (and ``--yes``).
Without them the run stops at the first decision and says which flag it needed.
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
)
from wizard.fleet import group_targets, targets_text
from wizard.model import Severity, StepState


class HeadlessFrontEnd:
    def __init__(
        self,
        *,
        yes: bool = False,
        window_open: bool = False,
        allow_storage_load: frozenset[str] | set[str] = frozenset(),
        verbose: bool = False,
        show_findings: bool = True,
        compact: bool = False,
        out: TextIO | None = None,
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
        self.verbose = verbose
        self.wants_output_lines = verbose  # lines are printed only with --verbose
        self.out = out or sys.stdout
        self.out_closed = False
        self.events: list[Event] = []

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
        match event:
            case PhaseStarted(title=title):
                self._print(f"== {title}")
            case StepStarted(step=step, target=target, title=title) if self.verbose:
                self._print(f"   {target}: {title} ({step}) ...")
            case StepFinished(state=state, findings=fs) if (
                self.compact
                and not self.verbose
                and state is StepState.DONE
                and all(f.severity in (Severity.PASS, Severity.SKIP) for f in fs)
            ):
                pass  # told with its step's StepCompleted line
            case StepFinished(step=step, target=target, state=state, message=msg, findings=fs):
                self._print(f"   {target}: {step}: {state.value}{f' - {msg}' if msg else ''}")
                for f in fs if self.show_findings else ():
                    if f.severity in (Severity.WARN, Severity.FAIL) or self.verbose:
                        tag = "waived" if f.waived else f.severity.value
                        self._print(f"      [{tag}] {f.gate} {f.check}: {f.message}")
                        if f.remediation and f.severity is not Severity.PASS:
                            self._print(f"             fix: {f.remediation}")
            case StepCompleted(step=step, results=results) if self.compact:
                for message, targets in self._held_notices.items():
                    self._print(f"   note ({targets_text(targets)}): {message}")
                self._held_notices.clear()
                outcomes = group_targets((state.value, target) for target, state in results)
                self._print(
                    f"   {step}: "
                    + "; ".join(f"{state} on {targets_text(ts)}" for state, ts in outcomes)
                )
            case Notice(message=message, target=target) if self.compact and target:
                # The same note from many nodes is one line when their step completes.
                self._held_notices.setdefault(message, []).append(target)
            case Notice(message=message, target=target):
                self._print(f"   note{f' ({target})' if target else ''}: {message}")
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
            ):
                pass

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
        if not self.yes:
            raise DecisionRequired(decision, "review the diff, then pass --yes")
        return Reply(Answer.PROCEED)
