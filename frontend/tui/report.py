"""The report view: the T00-T17 verdicts of the run, with the findings behind each gate."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Button, DataTable, Footer, Header, Label, Static

from frontend.tui import layout
from wizard.model import Finding, Severity, StepState
from wizard.plan import Plan
from wizard.report import report_of, verdict_line
from wizard.report_outside import outside_sections
from wizard.runview import RunView, of_results
from wizard.site import Site

VERDICT_STYLE = {
    "pass": "$text-success",
    "warn": "$text-warning",
    "fail": "bold $text-error",
    "skip": "$text-muted",
    "partial": "$text-warning",
    "not run": "$text-muted",
}


DETAIL_ROWS = 8  # a gate's findings listed in full up to this many
REFRESH_S = 2.0  # how often an open report reads the checkpoint again while a run goes on


@dataclass(frozen=True)
class ReportData:
    """What the report view shows: report.md's report (``wizard.report.build_report``) and
    the findings behind each gate, both from one checkpoint state."""

    report: dict[str, Any]
    findings: list[tuple[str, str, Finding]]

    @classmethod
    def of_view(cls, view: RunView) -> ReportData:
        """From the fold of a run (the checkpoint's, or what a main screen saw)."""
        return cls(report_of(view), view.plan_findings())

    @classmethod
    def of_run(
        cls,
        site: Site,
        plan: Plan,
        states: dict[tuple[str, str], StepState],
        findings: list[tuple[str, str, Finding]],
    ) -> ReportData:
        """From results known without a checkpoint (a test's screen)."""
        findings = list(findings)
        return cls(report_of(of_results(plan, site, states, findings)), findings)


ReportLoader = Callable[[], Awaitable[ReportData | None]]


class ReportScreen(Screen[None]):
    """report.md's report, the same one (``build_report`` over the checkpoint): its verdict
    line first, then every gate's status, and the highlighted gate's evidence and findings.
    While the run goes on it reads the checkpoint again every ``REFRESH_S`` seconds.

    The gates table scrolls itself and the gate's detail in its own box, so that the
    buttons and footer stay in view at 100x30 and 80x24 (they were cut off)."""

    AUTO_FOCUS = "#gates"
    HORIZONTAL_BREAKPOINTS = layout.HORIZONTAL
    VERTICAL_BREAKPOINTS = layout.VERTICAL

    BINDINGS = [
        Binding("q", "app.quit", "Quit"),
        Binding("escape", "back", "Back"),
        Binding("m", "app.measurements", "Measurements"),
    ]

    def __init__(
        self, data: ReportData, stopped: str | None, load: ReportLoader | None = None
    ) -> None:
        super().__init__()
        self.data = data
        self.stopped = stopped
        self.load = load

    @property
    def findings(self) -> list[tuple[str, str, Finding]]:
        return self.data.findings

    def verdicts(self) -> dict[str, str]:
        return {g["gate"]: g["status"] for g in self.data.report["gates"]}

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with Vertical(id="report"):
            yield Label("T00-T17 report (report.md)", classes="dialog-title")
            yield Static("", id="verdict-line")
            if self.stopped:
                yield Static(f"The run stopped: {self.stopped}", classes="error-text")
            yield DataTable(id="gates", cursor_type="row")
            with VerticalScroll(id="gate-detail-scroll"):
                yield Static("", id="gate-detail")
                # report.md's sections on the cluster beyond the new nodes, same model.
                yield Static("", id="outside")
            with Horizontal(classes="buttons"):
                yield Button("Back", id="back")
                yield Button("Quit", id="quit", variant="primary")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#gates", DataTable)
        table.add_column("gate", key="gate", width=4)
        table.add_column("verdict", key="verdict", width=7)
        table.add_column("what", key="what")
        table.add_column("findings", key="count", width=8)
        self.fill()
        self.show_gate(next(iter(self.verdicts())))
        if self.load is not None:
            self.set_interval(REFRESH_S, self.refresh_report)

    def fill(self) -> None:
        """The verdict line and the table from ``self.data`` (the cursor stays where it is)."""
        line = verdict_line(self.data.report).replace("**", "")
        word, _, rest = line.partition(" — ")
        cordons: list[Content | str] = []
        for c in self.data.report.get("cordoned", []):
            cordons += ["\n", ("CORDONED ", "bold $text-error"),
                        Content(f"{c['node']} (by {c['step']}): to uncordon, {c['uncordon']}")]  # fmt: skip
        self.query_one("#verdict-line", Static).update(
            Content.assemble((word, "bold"), " — " if rest else "", rest, *cordons)
        )
        self.query_one("#outside", Static).update(
            Content("\n".join(
                line for section in outside_sections(self.data.report)
                for line in ["", *section.lines()]
            ))
        )  # fmt: skip
        table = self.query_one("#gates", DataTable)
        row = table.cursor_row
        table.clear()
        for gate in self.data.report["gates"]:
            status = gate["status"]
            count = sum(1 for _, _, f in self.findings if f.gate == gate["gate"])
            table.add_row(
                gate["gate"],
                Content.styled(status, VERDICT_STYLE.get(status, "")),
                gate["what"],
                str(count),
                key=gate["gate"],
            )
        if row:
            table.move_cursor(row=row)

    async def refresh_report(self) -> None:
        """Read the checkpoint again (off the UI loop) and show what changed."""
        assert self.load is not None
        data = await self.load()
        if data is None or (
            data.report["gates"] == self.data.report["gates"]
            and (data.findings == self.data.findings)
            and outside_sections(data.report) == outside_sections(self.data.report)
        ):
            return
        self.data = data
        self.fill()
        table = self.query_one("#gates", DataTable)
        if table.row_count:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
            self.show_gate(str(key))

    @on(DataTable.RowHighlighted, "#gates")
    def detail(self, event: DataTable.RowHighlighted) -> None:
        # The table highlights its cursor row once on mount, before it has rows: no key.
        if event.row_key.value is not None:
            self.show_gate(str(event.row_key.value))

    def show_gate(self, gate: str) -> None:
        """The highlighted gate's findings: all of a short list; of a long one, what needs
        attention and how many passed (a gate of only passes says so, never "none")."""
        mine = [(target, f) for _, target, f in self.findings if f.gate == gate]
        entry = next((g for g in self.data.report["gates"] if g["gate"] == gate), None)
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
        head = []
        if entry is not None:
            head.append(f"{gate} {entry['status']}: {entry['what']}")
            if entry["status"] == "partial" and entry.get("evidence"):
                head.append(entry["evidence"])
            if entry.get("key_numbers"):
                head.append("key numbers: " + "; ".join(entry["key_numbers"]))
        self.query_one("#gate-detail", Static).update(
            Content("\n".join([*head, *(lines or ["no findings for this gate yet"])]))
        )

    @on(Button.Pressed, "#back")
    def action_back(self) -> None:
        self.app.pop_screen()

    @on(Button.Pressed, "#quit")
    def quit_pressed(self) -> None:
        self.run_action("app.quit")
