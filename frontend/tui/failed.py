"""A step failed: which checks, with their evidence, and what the operator can do about it
without leaving the run (retry once the cause is fixed, waive a check with a reason, or
leave it failed and let the run stop after the phase)."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Footer, Input, Label, Static

from frontend.tui.modals import BACK, DIALOG_BINDINGS, AnswerScreen, failing_checks, findings_text
from wizard.events import Answer, Decision, Reply


class FailedStepScreen(AnswerScreen):
    """The engine's retry-failed decision. Retry has the focus: it only runs the step again
    (a change is reviewed again before it is made). A waiver needs a typed reason; it is
    recorded in the checkpoint with who and when, as the CLI's ``--waive`` is, and shown as
    waived (never as pass) in the findings and the report."""

    # Retry has the focus; where the checks may be waived the reason box has it instead, so
    # that typing goes there (typed into a focused button, "lab rack" pressed r: a retry).
    AUTO_FOCUS = "#proceed"

    BINDINGS = [
        Binding("ctrl+r", "answer('proceed')", "Retry"),
        Binding("r", "answer('proceed')", "Retry", show=False),
        Binding("w", "waive", "Waive", show=False),
        Binding("ctrl+l", "answer('skip')", "Leave failed"),
        BACK,
        Binding("ctrl+x", "answer('abort')", "Abort run"),
        # The same key first (priority): the reason box would take ctrl+x as "cut"
        # (Textual's Input); unshown, so that the footer keeps its order.
        Binding("ctrl+x", "answer('abort')", "Abort run", show=False, priority=True),
        *DIALOG_BINDINGS,
    ]

    def __init__(self, decision: Decision, attempt: int = 1) -> None:
        super().__init__(decision)
        self.attempt = attempt  # how many times this step failed on this target in this run

    def compose(self) -> ComposeResult:
        d = self.decision
        again = f": failed again, attempt {self.attempt}" if self.attempt > 1 else ""
        yield Footer(compact=True, show_command_palette=False)
        with Vertical(id="dialog", classes="maintenance"):
            yield Label(f"{d.title} ({d.target}){again}", classes="dialog-title danger")
            yield Static(d.summary, classes="summary", markup=False)
            yield from self.cordon_note()
            with VerticalScroll(id="diffs"):
                yield from failing_checks(d.findings, "(no failing check recorded)")
            if d.not_waivable:
                yield Static(f"No waiver: {d.not_waivable}", classes="error-text", markup=False)
            if d.waivable:
                yield Label("To waive: type the reason and Enter (recorded with your name "
                            "and the time); ctrl+r retries, ctrl+l leaves it failed")  # fmt: skip
                yield Input(placeholder="e.g. lab machine without ACS control", id="reason")
            yield Static("", id="waive-error", classes="error-text")
            with Horizontal(classes="buttons"):
                yield Button("Retry", id="proceed", variant="primary")
                if d.waivable:
                    yield Button("Waive", id="waive", variant="warning")
                yield Button("Leave failed", id="skip")
                yield Button("Abort run", id="abort", variant="error")

    def on_mount(self) -> None:
        if self.decision.waivable:
            self.query_one("#reason", Input).focus()

    def copy_text(self) -> str:
        return findings_text(self.decision.findings)

    def action_waive(self) -> None:
        """Waive with the typed reason; without one, say so and put the cursor there."""
        if not self.decision.waivable:
            self.query_one("#waive-error", Static).update(
                f"not waived: {self.decision.not_waivable}; fix the cause and retry"
                if self.decision.not_waivable
                else "these checks cannot be waived: the host could not be used or the wizard "
                "failed; fix the cause and retry"
            )
            return
        field = self.query_one("#reason", Input)
        reason = field.value.strip()
        if not reason:
            self.query_one("#waive-error", Static).update("type the reason for the waiver first")
            field.focus()
            return
        self.dismiss(Reply(Answer.WAIVE, reason=reason))

    def action_answer(self, answer: str) -> None:
        # The Waive button's id comes here too (AnswerScreen.pressed): it carries a reason.
        # "Leave failed" is no skip of the step (it stays failed): no skip question.
        if answer == Answer.WAIVE:
            self.action_waive()
            return
        if answer == Answer.ABORT:
            self.confirm_abort()
            return
        if answer == Answer.PROCEED:
            d = self.decision
            self.notify(f"retrying {d.step} on {d.target} (attempt {self.attempt + 1})", timeout=4)
        self.dismiss(Reply(Answer(answer)))

    @on(Input.Submitted, "#reason")
    def submitted(self) -> None:
        self.action_waive()
