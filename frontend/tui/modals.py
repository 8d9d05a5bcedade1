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
from textual.widgets import Button, Footer, Input, Label, Static

from frontend.tui import layout
from frontend.tui.bridge import SET_ASIDE
from wizard.events import Answer, Decision, DecisionKind, Reply
from wizard.model import Finding

# Every dialog: help and quit as on the main screen (quitting asks first while a
# maintenance change is in flight), and the diff scrolls from whatever has the focus.
DIALOG_BINDINGS = [
    Binding("question_mark", "app.help", "Help"),
    Binding("q", "app.quit", "Quit"),
    Binding("pagedown", "scroll_diffs('page_down')", "Scroll down", show=False),
    Binding("pageup", "scroll_diffs('page_up')", "Scroll up", show=False),
    Binding("ctrl+c", "copy", "Copy", show=False),
]
# Esc steps back from a question without answering it (as in k9s or lazygit, Esc is back,
# never a decision): the run shows again and the question waits for `d`. Every answer,
# skipping included, is a key or a button of its own.
BACK = Binding("escape", "set_aside", "Back (it waits)")


class Dialog(ModalScreen[Reply]):
    """A decision dialog: its own keys in its footer, help, quit, the diff scrolled from
    any focus, and the shown text copied to the clipboard."""

    HORIZONTAL_BREAKPOINTS = layout.HORIZONTAL
    VERTICAL_BREAKPOINTS = layout.VERTICAL
    decision: Decision

    @property
    def waiting_title(self) -> str:
        """How the main screen names this question while it waits (set aside with Esc)."""
        d = self.decision
        return f"{d.title} ({d.step} on {d.target})"

    def action_set_aside(self) -> None:
        """Esc: back to the run without an answer; the question waits (``d`` shows it)."""
        self.dismiss(SET_ASIDE)  # type: ignore[arg-type]

    def cordon_note(self) -> ComposeResult:
        """The cordon the question's node stays in, if any: under a modal the header that
        names it is hidden (a new user's review: the rollback question said nothing of it)."""
        main = getattr(self.app, "main_screen", None)
        for cordon in getattr(main, "cordons", ()):
            if cordon.node == self.decision.target:
                yield Static(
                    f"{cordon.node} stays cordoned for now (by {cordon.step}, since "
                    f"{cordon.since}): {cordon.remedy}",
                    classes="error-text cordon-note",
                    markup=False,
                )

    def confirm_abort(self) -> None:
        """Abort, but first ask, as `q` and ctrl+c do: ctrl+x sits one chord from ctrl+c
        and ctrl+r in the same footer. Esc in the question goes back to this one."""

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.dismiss(Reply(Answer.ABORT))

        self.app.push_screen(ConfirmAbortScreen(self.decision), callback=confirmed)

    def confirm_skip(self, answer: Answer = Answer.SKIP) -> None:
        """Skip, but first say what it holds back when later steps build on this one."""
        blocked = skip_blocks(self.app, self.decision)
        if blocked is None:
            self.dismiss(Reply(answer))
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self.dismiss(Reply(answer))

        self.app.push_screen(ConfirmSkipScreen(self.decision, blocked), callback=confirmed)

    def action_scroll_diffs(self, how: str) -> None:
        for scroll in self.query("#diffs").results(VerticalScroll):
            getattr(scroll, f"action_{how}")()

    def copy_text(self) -> str:
        """What ``ctrl+c`` copies: the commands and diffs shown (plain text)."""
        return ""

    def action_copy(self) -> None:
        text = self.copy_text()
        if text:
            self.app.copy_to_clipboard(text)
            self.notify("copied to the clipboard (OSC 52)", timeout=3)


def decision_text(decision: Decision) -> str:
    """A decision's commands, diffs and rollback as plain text, for the clipboard."""
    parts = []
    if decision.actions:
        parts.append("\n".join(decision.actions))
    parts += [f"# {d.destination}\n{d.diff}" for d in decision.diffs]
    if decision.rollback:
        parts.append(f"# rollback\n{decision.rollback}")
    return "\n\n".join(parts)


def findings_text(findings: tuple[Finding, ...]) -> str:
    """Failing checks with their evidence (command and output excerpt)."""
    lines = []
    for finding in findings:
        lines.append(f"{finding.check}: {finding.message}")
        for evidence in finding.evidence:
            lines.append(f"  $ {evidence.command}")
            lines += [f"    {line}" for line in evidence.excerpt.splitlines()]
        if finding.remediation:
            lines.append(f"  fix: {finding.remediation}")
    return "\n".join(lines)


def failing_checks(findings: tuple[Finding, ...], none: str) -> tuple[Label, Static]:
    """A dialog's "Failing checks (N)" with their evidence (``none`` when there are none)."""
    title = f"Failing checks ({len(findings)})" if findings else "Failing checks"
    return (
        Label(title, classes="diff-title"),
        Static(findings_text(findings) or none, id="failing", classes="failing", markup=False),
    )


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


class AnswerScreen(Dialog):
    """A dialog about one decision whose buttons are named after the answers (proceed/skip/abort)."""

    def __init__(self, decision: Decision) -> None:
        super().__init__()
        self.decision = decision

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        # A widget id cannot hold "-": proceed_same stands for the answer proceed-same.
        self.action_answer((event.button.id or "skip").replace("_", "-"))

    def action_answer(self, answer: str) -> None:
        if answer == Answer.SKIP:
            self.confirm_skip()
            return
        if answer == Answer.ABORT:
            self.confirm_abort()
            return
        self.dismiss(Reply(Answer(answer)))

    def copy_text(self) -> str:
        return decision_text(self.decision)


def skip_blocks(app: object, decision: Decision) -> str | None:
    """What skipping ``decision``'s step holds back: the later steps that require it or
    need its result (skipped or blocked in turn), and its gates, which cannot pass without
    it. None when no later step builds on it (a plain skip needs no second question)."""
    plan = getattr(app, "plan", None)
    if plan is None:
        return None
    try:
        step = plan.step(decision.step)
    except KeyError:
        return None
    later = plan.dependents(step.id)
    if not later:
        return None
    lines = [f"{s.id} ({s.title})" for s in later]
    gates = ", ".join(step.gates)
    said = [
        f"Skipping {step.id} on {decision.target} holds back the later steps that build on it:",
        *(f"  - {line}" for line in lines),
    ]
    if gates:
        said.append(f"and its gates ({gates}) cannot pass without it.")
    said.append("A resume keeps the skip (run SITE --redo STEP@NODE undoes it).")
    return "\n".join(said)


class ConfirmSkipScreen(ModalScreen[bool]):
    """Skip a step that later steps build on? Names them; "Keep it" has the focus and Esc
    goes back to the question (never a decision)."""

    AUTO_FOCUS = "#keep"
    HORIZONTAL_BREAKPOINTS = layout.HORIZONTAL
    VERTICAL_BREAKPOINTS = layout.VERTICAL

    BINDINGS = [
        Binding("escape,n", "dismiss(False)", "Back"),
        Binding("y", "dismiss(True)", "Skip anyway"),
    ]

    def __init__(self, decision: Decision, blocked: str) -> None:
        super().__init__()
        self.decision = decision
        self.blocked = blocked

    def compose(self) -> ComposeResult:
        yield Footer(compact=True, show_command_palette=False)
        with Vertical(id="dialog", classes="quit"):
            yield Label(f"Skip {self.decision.title}?", classes="dialog-title danger")
            with VerticalScroll(id="blocked-scroll"):
                yield Static(self.blocked, id="blocked", markup=False)
            with Horizontal(classes="buttons"):
                yield Button("Keep it (back)", id="keep", variant="primary")
                yield Button("Skip anyway", id="skip-anyway", variant="error")

    @on(Button.Pressed, "#keep")
    def keep(self) -> None:
        self.dismiss(False)

    @on(Button.Pressed, "#skip-anyway")
    def skip_anyway(self) -> None:
        self.dismiss(True)


class ConfirmAbortScreen(ModalScreen[bool]):
    """Abort the run? Says what stays; "Keep going (back)" has the focus and Esc goes back
    to the question (never a decision)."""

    AUTO_FOCUS = "#keep"
    HORIZONTAL_BREAKPOINTS = layout.HORIZONTAL
    VERTICAL_BREAKPOINTS = layout.VERTICAL

    BINDINGS = [
        Binding("escape,n", "dismiss(False)", "Back"),
        Binding("y", "dismiss(True)", "Abort the run"),
    ]

    def __init__(self, decision: Decision) -> None:
        super().__init__()
        self.decision = decision

    def compose(self) -> ComposeResult:
        yield Footer(compact=True, show_command_palette=False)
        with Vertical(id="dialog", classes="quit"):
            yield Label("Abort the run?", classes="dialog-title danger")
            yield Static(
                f"The run stops at {self.decision.step} on {self.decision.target}, unanswered. "
                "The checkpoint keeps every result so far: run again to resume from here.",
                classes="summary",
                markup=False,
            )
            with Horizontal(classes="buttons"):
                yield Button("Keep going (back)", id="keep", variant="primary")
                yield Button("Abort the run", id="abort-anyway", variant="error")

    @on(Button.Pressed, "#keep")
    def keep(self) -> None:
        self.dismiss(False)

    @on(Button.Pressed, "#abort-anyway")
    def abort_anyway(self) -> None:
        self.dismiss(True)


class ReviewScreen(AnswerScreen):
    """The artifacts a step will apply, each as a diff of live against desired."""

    # The diffs, not a button: Enter (the start screen's key) must not answer a review by
    # reflex; Apply (a), Skip (s) and Abort (ctrl+x) are each their own key.
    AUTO_FOCUS = "#diffs"

    BINDINGS = [
        Binding("a", "answer('proceed')", "Apply"),
        Binding("A", "answer('proceed-same')", "Apply + alike"),
        Binding("s", "answer('skip')", "Skip"),
        BACK,
        Binding("ctrl+x", "answer('abort')", "Abort run"),
        *DIALOG_BINDINGS,
    ]

    def compose(self) -> ComposeResult:
        d = self.decision
        yield Footer(compact=True, show_command_palette=False)
        with Vertical(id="dialog", classes="review"):
            yield Label(f"Review: {d.title}", classes="dialog-title")
            yield Static(
                f"{d.step} on {d.target}: {d.summary}. Nothing is applied before you confirm.",
                classes="summary",
                markup=False,
            )
            with VerticalScroll(id="diffs"):
                if d.actions:
                    yield Label(
                        "Commands (ctrl+c copies them with the diffs)", classes="diff-title"
                    )
                    yield Static("\n".join(d.actions), id="commands", classes="actions",
                                 markup=False)  # fmt: skip
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
                        f"Apply + {d.other_nodes} alike",
                        id="proceed_same",
                        tooltip=f"Apply, and on the {d.other_nodes} other nodes with this same change",
                    )
                yield Button("Skip", id="skip")
                yield Button("Abort run", id="abort", variant="error")

    def action_answer(self, answer: str) -> None:
        if answer == Answer.PROCEED_SAME and not self.decision.other_nodes:
            return  # no other node to cover: only Apply or Skip mean something here
        super().action_answer(answer)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """No "Apply + alike" in the footer when no other node could share the change."""
        if action == "answer" and parameters == ("proceed-same",):
            return bool(self.decision.other_nodes)
        return True


class RollbackScreen(AnswerScreen):
    """A change failed to verify: which checks failed, with their evidence, and the
    rollback to the captured previous state. The engine offers it only for a change that
    can be undone (a reboot cannot: it never asks)."""

    AUTO_FOCUS = "#proceed"  # a failed change is rolled back unless the operator says otherwise

    BINDINGS = [
        Binding("r", "answer('proceed')", "Roll back"),
        Binding("l", "answer('skip')", "Leave as is"),
        BACK,
        *DIALOG_BINDINGS,
    ]

    def compose(self) -> ComposeResult:
        d = self.decision
        yield Footer(compact=True, show_command_palette=False)
        with Vertical(id="dialog", classes="maintenance"):
            yield Label(f"Roll back? {d.title}", classes="dialog-title danger")
            yield Static(d.summary, classes="summary", markup=False)
            yield from self.cordon_note()
            with VerticalScroll(id="diffs"):
                yield from failing_checks(d.findings, "(no check failed: the change broke off)")
                yield Label("Rollback plan (from the state captured before the change)",
                            classes="diff-title")  # fmt: skip
                yield Static(d.rollback or "(none recorded)", classes="rollback", markup=False)
            with Horizontal(classes="buttons"):
                yield Button("Roll back", id="proceed", variant="warning")
                yield Button("Leave as is", id="skip")

    def action_answer(self, answer: str) -> None:
        # "Leave as is" is no skip of the step: it failed, and stays failed unrolled back.
        self.dismiss(Reply(Answer(answer)))

    def copy_text(self) -> str:
        return "\n\n".join(p for p in (findings_text(self.decision.findings),
                                       self.decision.rollback or "") if p)  # fmt: skip


# The typed confirmations this screen asks for: (prompt, confirm button) by decision kind.
_TYPED = {
    DecisionKind.MAINTENANCE_WINDOW: (
        "Type the node name ({}) to confirm the window is open:",
        "Start maintenance",
    ),
    DecisionKind.STORAGE_LOAD: ("Type the peer's name ({}) to allow load on it:", "Allow load"),
    DecisionKind.CLUSTER_CHANGE: (
        "Type the change's name ({}) to approve this change outside the new nodes:",
        "Approve change",
    ),
    DecisionKind.DELETE_BARE_POD: (
        "Type the pod ({}) to approve its deletion for good:",
        "Delete the pod",
    ),
}


class MaintenanceScreen(Dialog):
    """The window gate, the one screen of a maintenance change: the ordered actions with
    their commands, what is disrupted, the diffs, the rollback computed from the captured
    live state, and the node name typed in. No second review follows."""

    # The name box has the focus: what the operator types goes there (with Cancel focused,
    # a typed name went nowhere and Enter pressed Cancel: the window was skipped). Enter
    # confirms only the exact node name; anything else is refused where it was typed.
    AUTO_FOCUS = "#node-name"

    BINDINGS = [BACK, *DIALOG_BINDINGS]

    def __init__(self, decision: Decision) -> None:
        super().__init__()
        self.decision = decision

    def compose(self) -> ComposeResult:
        d = self.decision
        yield Footer(compact=True, show_command_palette=False)
        with Vertical(id="dialog", classes="maintenance"):
            window = d.kind is DecisionKind.MAINTENANCE_WINDOW
            title = f"Maintenance window: {d.title}" if window else d.title
            yield Label(title, classes="dialog-title danger")
            yield Static(d.summary, classes="summary", markup=False)
            with VerticalScroll(id="diffs"):
                if d.actions:
                    yield Label("What happens, in order", classes="diff-title")
                    yield Static(
                        "\n".join(f"{n:>2}. {a}" for n, a in enumerate(d.actions, 1)),
                        id="actions",
                        classes="actions",
                        markup=False,
                    )
                for diff in d.diffs:
                    yield Label(diff.destination, classes="diff-title")
                    yield render_diff(diff.diff)
                if d.reversible:
                    yield Label("Rollback plan (from the state captured now)", classes="diff-title")
                    yield Static(d.rollback or "(none recorded)", classes="rollback", markup=False)
                else:
                    yield Label("No rollback", classes="diff-title")
                    yield Static(
                        d.rollback or "This change cannot be undone.",
                        id="no-rollback",
                        classes="rollback",
                        markup=False,
                    )
            prompt, button = _TYPED.get(d.kind, _TYPED[DecisionKind.MAINTENANCE_WINDOW])
            yield Label(prompt.format(d.confirm_text))
            yield Input(placeholder=f"type {d.confirm_text} here", id="node-name")
            yield Static("", id="mismatch", classes="error-text")
            with Horizontal(classes="buttons"):
                yield Button("Cancel", id="cancel")
                yield Button(button, id="confirm", variant="error", disabled=True)

    def copy_text(self) -> str:
        return decision_text(self.decision)

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
        """Cancel: the window is not open, the change is skipped (asked first when later
        steps build on it)."""
        self.confirm_skip()


class ManualScreen(AnswerScreen):
    """A step the operator does outside the wizard; the wizard verifies it afterwards."""

    AUTO_FOCUS = "#proceed"  # "done, verify it": the wizard only verifies

    BINDINGS = [
        # Not `d`: on the main screen `d` brings a question set aside back, and `d` twice
        # told the wizard the switch was configured (a new user's review).
        Binding("v", "answer('proceed')", "Done, verify it"),
        Binding("s", "answer('skip')", "Skip"),
        BACK,
        Binding("ctrl+x", "answer('abort')", "Abort run"),
        Binding("ctrl+c", "copy", "Copy instructions"),
        *DIALOG_BINDINGS,
    ]

    def compose(self) -> ComposeResult:
        d = self.decision
        yield Footer(compact=True, show_command_palette=False)
        with Vertical(id="dialog"):
            yield Label(f"Your turn: {d.title}", classes="dialog-title")
            with VerticalScroll(id="diffs"):
                yield Static(d.summary, classes="instructions", markup=False)
                for n, shown in enumerate(d.files):
                    with Horizontal(classes="file-title"):
                        yield Label(f"{shown.path}: {shown.description}", classes="diff-title")
                        yield Button("Copy", id=f"copy_{n}", classes="copy-file", compact=True)
                    yield Static(shown.content, classes="file", markup=False)
            yield Label("Press Done when it is done; the wizard then verifies it.")
            with Horizontal(classes="buttons"):
                yield Button("Done, verify it", id="proceed", variant="primary")
                yield Button("Skip", id="skip")
                yield Button("Abort run", id="abort", variant="error")

    def copy_text(self) -> str:
        """The instructions and every file they hand over, each under its name."""
        parts = [self.decision.summary]
        parts += [f"# {f.path} ({f.destination})\n{f.content}" for f in self.decision.files]
        return "\n\n".join(parts)

    def action_answer(self, answer: str) -> None:
        if answer.startswith("copy-"):  # a file's Copy button (AnswerScreen.pressed)
            shown = self.decision.files[int(answer.removeprefix("copy-"))]
            self.app.copy_to_clipboard(shown.content)
            self.notify(f"{shown.path} copied to the clipboard (OSC 52)", timeout=3)
            return
        super().action_answer(answer)


class QuitScreen(ModalScreen[bool]):
    """Quit while a maintenance change is applied: first say which node is in which state.

    True leaves, False stays. Stay has the focus.
    """

    AUTO_FOCUS = "#stay"
    HORIZONTAL_BREAKPOINTS = layout.HORIZONTAL
    VERTICAL_BREAKPOINTS = layout.VERTICAL

    BINDINGS = [
        Binding("escape,n", "dismiss(False)", "Stay"),
        Binding("y", "dismiss(True)", "Quit anyway"),
        Binding("question_mark", "app.help", "Help"),
    ]

    def __init__(self, in_flight: dict[str, str], *, maintenance: bool = True) -> None:
        super().__init__()
        self.in_flight = in_flight
        self.maintenance = maintenance  # False: a step runs (no change of a node in flight)

    def compose(self) -> ComposeResult:
        yield Footer(compact=True, show_command_palette=False)
        with Vertical(id="dialog", classes="quit"):
            title = "A maintenance change is in flight" if self.maintenance else "A step is running"
            yield Label(title, classes="dialog-title danger")
            with VerticalScroll(id="in-flight"):
                yield Static(
                    "\n".join(f"{node}: {where}" for node, where in self.in_flight.items()),
                    id="in-flight-nodes",
                    markup=False,
                )
            yield Static(
                "Quitting now stops the change where it is. The checkpoint keeps it: the next "
                "run starts with these nodes, verifies what is in place, then finishes the "
                "change or rolls it back."
                if self.maintenance
                else "Quitting now stops these steps where they are. The checkpoint keeps "
                "every result so far: the next run verifies what was in progress first.",
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
  q        quit (the checkpoint keeps everything; run again to resume; asks while a step runs)
  d        answer the question set aside with Esc
  r        the T00-T17 report so far     m   the measurements (charts, then every number)
  l        the log, full screen: / searches (only matching lines), end follows again
  f        focus the findings        F   problems only (failures first) / all
  o        sort the findings: as found, failures first, by gate, by node
  /        filter the findings by node, gate, check or severity (Esc clears)
  c        copy the highlighted finding (check, message, fix, evidence)
  p        show or hide the phases sidebar (hidden below 100 columns)
           the live log follows new lines unless you scroll up (end: follow again)
  n        nodes: every GPU node's state per phase and its first problem (p: problems only)
  enter    on a finding: show its evidence
  ctrl+p   command palette

In a review:       a apply   s skip   ctrl+x abort (asks first)
                   A apply, and on the step's other nodes whose change is the same
                     (any node whose diff differs is still shown; never for maintenance)
In a maintenance:  the ordered actions, the diffs, the rollback; type the node name,
                   and Enter (the name box has the focus); the Cancel button skips it
In a rollback:     r roll back   l leave as is
A failed step:     ctrl+r retry (once the cause is fixed)   ctrl+l leave it failed
                   to waive a failed check: type the reason, Enter (recorded with your name)
Your turn:         v done, verify it   s skip   ctrl+x abort (asks first)
Skipping a step that later steps build on asks first and names them (y skip anyway).
Esc in a question goes back to the run and never decides: the question waits
                   ("Waiting for you" above the findings); d shows it again
Every dialog:      pageup/pagedown scroll the diff   ctrl+c copy its commands and diffs
                   ? help   q quit
"""


class HelpScreen(ModalScreen[None]):
    """The keys, in a box of its own that scrolls (at 160x48 its first lines were above the
    screen): the title and Close stay in view."""

    AUTO_FOCUS = "#help-scroll"  # up/down, pageup/pagedown, home/end scroll it
    HORIZONTAL_BREAKPOINTS = layout.HORIZONTAL
    VERTICAL_BREAKPOINTS = layout.VERTICAL
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        yield Footer(compact=True, show_command_palette=False)
        with Vertical(id="dialog"):
            yield Label("gpu-node-wizard help", classes="dialog-title")
            with VerticalScroll(id="help-scroll"):
                yield Static(HELP, markup=False)
            yield Button("Close", id="close")

    @on(Button.Pressed, "#close")
    def close(self) -> None:
        self.dismiss(None)
