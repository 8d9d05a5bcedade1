"""The report view: the T00-T17 verdicts of the run, with the findings behind each gate."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Button, DataTable, Footer, Header, Label, Static

from screens import layout
from wizard.model import GATES, Finding, Severity
from wizard.verdict import gate_verdicts

VERDICT_STYLE = {
    "pass": "$text-success",
    "warn": "$text-warning",
    "fail": "bold $text-error",
    "skip": "$text-muted",
    "-": "$text-muted",
}


DETAIL_ROWS = 8  # a gate's findings listed in full up to this many


class ReportScreen(Screen[None]):
    """The gates table scrolls itself and the gate's detail in its own box, so that the
    buttons and footer stay in view at 100x30 and 80x24 (they were cut off)."""

    AUTO_FOCUS = "#gates"
    HORIZONTAL_BREAKPOINTS = layout.HORIZONTAL
    VERTICAL_BREAKPOINTS = layout.VERTICAL

    BINDINGS = [
        Binding("q", "app.quit", "Quit"),
        Binding("escape", "back", "Back"),
        Binding("m", "app.measurements", "Measurements"),
    ]

    def __init__(self, findings: list[tuple[str, str, Finding]], stopped: str | None) -> None:
        super().__init__()
        self.findings = findings
        self.stopped = stopped

    def verdicts(self) -> dict[str, str]:
        verdicts = gate_verdicts(f for _, _, f in self.findings)
        return {gate: (v.value if v else "-") for gate, v in verdicts.items()}

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with Vertical(id="report"):
            yield Label("T00-T17 verdicts", classes="dialog-title")
            if self.stopped:
                yield Static(f"The run stopped: {self.stopped}", classes="error-text")
            yield DataTable(id="gates", cursor_type="row")
            with VerticalScroll(id="gate-detail-scroll"):
                yield Static("", id="gate-detail")
            with Horizontal(classes="buttons"):
                yield Button("Back", id="back")
                yield Button("Quit", id="quit", variant="primary")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#gates", DataTable)
        table.add_column("gate", key="gate")
        table.add_column("verdict", key="verdict")
        table.add_column("what", key="what")
        table.add_column("findings", key="count")
        for gate, verdict in self.verdicts().items():
            count = sum(1 for _, _, f in self.findings if f.gate == gate)
            table.add_row(
                gate,
                Content.styled(verdict, VERDICT_STYLE[verdict]),
                GATES[gate],
                str(count),
                key=gate,
            )
        self.show_gate(next(iter(GATES)))

    @on(DataTable.RowHighlighted, "#gates")
    def detail(self, event: DataTable.RowHighlighted) -> None:
        # The table highlights its cursor row once on mount, before it has rows: no key.
        if event.row_key.value is not None:
            self.show_gate(str(event.row_key.value))

    def show_gate(self, gate: str) -> None:
        """The highlighted gate's findings: all of a short list; of a long one, what needs
        attention and how many passed (a gate of only passes says so, never "none")."""
        mine = [(target, f) for _, target, f in self.findings if f.gate == gate]
        shown, note = mine, ""
        if len(mine) > DETAIL_ROWS:
            problems = [(target, f) for target, f in mine if f.severity is not Severity.PASS]
            passed = len(mine) - len(problems)
            shown = problems or mine[:DETAIL_ROWS]
            note = (
                f"... and {passed} more that pass"
                if problems
                else f"... all {len(mine)} pass ({len(mine) - DETAIL_ROWS} more)"
            )
        lines = [
            f"[{'waived' if f.waived else f.severity.value}] {target}: {f.check}: {f.message}"
            + (f" (waived: {f.waived})" if f.waived else "")
            for target, f in shown
        ]
        if note:
            lines.append(note)
        self.query_one("#gate-detail", Static).update(
            Content("\n".join(lines) or "no findings for this gate yet")
        )

    @on(Button.Pressed, "#back")
    def action_back(self) -> None:
        self.app.pop_screen()

    @on(Button.Pressed, "#quit")
    def quit_pressed(self) -> None:
        self.run_action("app.quit")
