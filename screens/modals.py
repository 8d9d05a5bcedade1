"""Decision screens: review-before-apply, the maintenance window, manual steps, quitting
during a maintenance change, help.

Each returns a typed result through ``dismiss`` and never acts itself: the engine acts on
the answer. For anything disruptive, the safe choice has the focus.
"""

from __future__ import annotations

from pygments.token import Token
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.highlight import HighlightTheme, highlight
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from wizard.events import Answer, Decision, Reply


class DiffTheme(HighlightTheme):
    """Textual's default highlight theme leaves diff lines uncoloured; colour them."""

    STYLES = {
        **HighlightTheme.STYLES,
        Token.Generic.Inserted: "$text-success on $success-muted",
        Token.Generic.Deleted: "$text-error on $error-muted",
        Token.Generic.Subheading: "$text-accent",
        Token.Generic.Heading: "bold",
    }


def render_diff(diff: str) -> Static:
    return Static(
        highlight(diff or "(no change)\n", language="diff", theme=DiffTheme), classes="diff"
    )


class AnswerScreen(ModalScreen[Reply]):
    """A dialog about one decision whose buttons are named after the answers (proceed/skip/abort)."""

    def __init__(self, decision: Decision) -> None:
        super().__init__()
        self.decision = decision

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        # A widget id cannot hold "-": proceed_same stands for the answer proceed-same.
        self.action_answer((event.button.id or "skip").replace("_", "-"))

    def action_answer(self, answer: str) -> None:
        self.dismiss(Reply(Answer(answer)))


class ReviewScreen(AnswerScreen):
    """The artifacts a step will apply, each as a diff of live against desired."""

    AUTO_FOCUS = "#skip"  # the safe choice

    BINDINGS = [
        Binding("a", "answer('proceed')", "Apply"),
        Binding("A", "answer('proceed-same')", "Apply, and on nodes with the same change"),
        Binding("s", "answer('skip')", "Skip"),
        Binding("escape", "answer('skip')", "Skip", show=False),
        Binding("ctrl+x", "answer('abort')", "Abort run"),
    ]

    def compose(self) -> ComposeResult:
        d = self.decision
        with Vertical(id="dialog", classes="review"):
            yield Label(f"Review: {d.title}", classes="dialog-title")
            yield Label(
                f"{d.step} on {d.target}: {d.summary}. Nothing is applied before you confirm."
            )
            with VerticalScroll(id="diffs"):
                for diff in d.diffs:
                    state = "changes" if diff.changed else "no change"
                    yield Label(f"{diff.destination}  ({state})", classes="diff-title")
                    yield render_diff(diff.diff)
                if d.rollback:
                    yield Label("Rollback", classes="diff-title")
                    yield Static(d.rollback, classes="rollback")
            with Horizontal(classes="buttons"):
                yield Button("Apply", id="proceed", variant="primary")
                if d.other_nodes:
                    yield Button(
                        f"Apply, and on other nodes with this same change ({d.other_nodes})",
                        id="proceed_same",
                    )
                yield Button("Skip", id="skip")
                yield Button("Abort run", id="abort", variant="error")

    def action_answer(self, answer: str) -> None:
        if answer == Answer.PROCEED_SAME and not self.decision.other_nodes:
            return  # no other node to cover: only Apply or Skip mean something here
        super().action_answer(answer)


class RollbackScreen(AnswerScreen):
    """A change failed to verify: offer the rollback to the captured previous state."""

    AUTO_FOCUS = "#proceed"  # a failed change is rolled back unless the operator says otherwise

    BINDINGS = [Binding("escape", "answer('skip')", "Leave as is")]

    def compose(self) -> ComposeResult:
        d = self.decision
        with Vertical(id="dialog", classes="maintenance"):
            yield Label(f"Roll back? {d.title}", classes="dialog-title danger")
            yield Static(d.summary, classes="summary")
            with VerticalScroll(id="diffs"):
                yield Label("Rollback plan", classes="diff-title")
                yield Static(d.rollback or "(none recorded)", classes="rollback")
            with Horizontal(classes="buttons"):
                yield Button("Roll back", id="proceed", variant="warning")
                yield Button("Leave as is", id="skip")


class MaintenanceScreen(ModalScreen[Reply]):
    """The window gate: what is disrupted, the rollback, and the node name typed in."""

    AUTO_FOCUS = "#cancel"  # the safe choice

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, decision: Decision) -> None:
        super().__init__()
        self.decision = decision

    def compose(self) -> ComposeResult:
        d = self.decision
        with Vertical(id="dialog", classes="maintenance"):
            yield Label(f"Maintenance window: {d.title}", classes="dialog-title danger")
            yield Static(d.summary, classes="summary")
            with VerticalScroll(id="diffs"):
                for diff in d.diffs:
                    yield Label(diff.destination, classes="diff-title")
                    yield render_diff(diff.diff)
                yield Label("Rollback plan", classes="diff-title")
                yield Static(d.rollback or "(none recorded)", classes="rollback")
            yield Label(f"Type the node name ({d.confirm_text}) to confirm the window is open:")
            yield Input(placeholder=d.confirm_text or "", id="node-name")
            yield Static("", id="mismatch", classes="error-text")
            with Horizontal(classes="buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Start maintenance", id="confirm", variant="error", disabled=True)

    @on(Input.Changed, "#node-name")
    def typed(self, event: Input.Changed) -> None:
        matches = event.value.strip() == self.decision.confirm_text
        self.query_one("#confirm", Button).disabled = not matches
        message = "" if matches or not event.value else f"that is not {self.decision.confirm_text}"
        self.query_one("#mismatch", Static).update(message)

    @on(Input.Submitted, "#node-name")
    def submitted(self, event: Input.Submitted) -> None:
        if event.value.strip() == self.decision.confirm_text:
            self.dismiss(Reply(Answer.PROCEED, typed=event.value.strip()))
        else:
            self.query_one("#mismatch", Static).update(
                f"typed {event.value.strip()!r}: not {self.decision.confirm_text}; not confirmed"
            )

    @on(Button.Pressed, "#confirm")
    def confirm(self) -> None:
        self.dismiss(Reply(Answer.PROCEED, typed=self.query_one("#node-name", Input).value.strip()))

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(Reply(Answer.SKIP))


class ManualScreen(AnswerScreen):
    """A step the operator does outside the wizard; the wizard verifies it afterwards."""

    AUTO_FOCUS = "#proceed"  # "done, verify it": the wizard only verifies

    BINDINGS = [Binding("escape", "answer('skip')", "Skip")]

    def compose(self) -> ComposeResult:
        d = self.decision
        with Vertical(id="dialog"):
            yield Label(f"Your turn: {d.title}", classes="dialog-title")
            with VerticalScroll(id="diffs"):
                yield Static(d.summary, classes="instructions")
            yield Label("Press Done when it is done; the wizard then verifies it.")
            with Horizontal(classes="buttons"):
                yield Button("Done, verify it", id="proceed", variant="primary")
                yield Button("Skip", id="skip")
                yield Button("Abort run", id="abort", variant="error")


class QuitScreen(ModalScreen[bool]):
    """Quit while a maintenance change is applied: first say which node is in which state.

    True leaves, False stays. Stay has the focus.
    """

    AUTO_FOCUS = "#stay"

    BINDINGS = [
        Binding("escape,n", "dismiss(False)", "Stay"),
        Binding("y", "dismiss(True)", "Quit anyway"),
    ]

    def __init__(self, in_flight: dict[str, str]) -> None:
        super().__init__()
        self.in_flight = in_flight

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="quit"):
            yield Label("A maintenance change is in flight", classes="dialog-title danger")
            with VerticalScroll(id="in-flight"):
                yield Static(
                    "\n".join(f"{node}: {where}" for node, where in self.in_flight.items()),
                    id="in-flight-nodes",
                    markup=False,
                )
            yield Static(
                "Quitting now stops the change where it is. The checkpoint keeps it: the next "
                "run starts with these nodes, verifies what is in place, then finishes the "
                "change or rolls it back.",
                classes="summary",
            )
            with Horizontal(classes="buttons"):
                yield Button("Stay", id="stay", variant="primary")
                yield Button("Quit anyway", id="quit", variant="error")

    @on(Button.Pressed, "#stay")
    def stay(self) -> None:
        self.dismiss(False)

    @on(Button.Pressed, "#quit")
    def quit(self) -> None:
        self.dismiss(True)


HELP = """\
Keys
  ?        this help
  q        quit (the checkpoint keeps everything; run again to resume)
  r        the T00-T17 report so far     m   the measurements (bars vs line rate)
  l        focus the live log        f   focus the findings
  n        nodes: every GPU node's state per phase and its first problem (p: problems only)
  enter    on a finding: show its evidence
  ctrl+p   command palette

In a review:       a apply   s skip   ctrl+x abort the run
                   A apply, and on the step's other nodes whose change is the same
                     (any node whose diff differs is still shown; never for maintenance)
In a maintenance:  type the node name, then Start maintenance (Cancel has the focus)
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("gpu-node-wizard help", classes="dialog-title")
            yield Static(HELP)
            yield Button("Close", id="close")

    @on(Button.Pressed, "#close")
    def close(self) -> None:
        self.dismiss(None)
