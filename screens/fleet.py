"""The fleet view: one row per GPU node, a state per phase, and the node's first problem.

The main screen's sidebar has room for six node columns; an operator adding 16 or 64 nodes
needs to see which nodes are done, which are running and which one failed where. This
screen reads the main screen's live state (it never talks to the engine) and refreshes
twice a second, touching only the cells that changed.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Label, Static

from screens import layout
from screens.main import GLYPHS, SEVERITY_STYLE, MainScreen, phase_glyph
from wizard.model import Severity, StepState

REFRESH_S = 0.5
SKIPPED_MARK = GLYPHS[StepState.SKIPPED]
_PROBLEM_GLYPHS = (GLYPHS[StepState.FAILED], GLYPHS[StepState.BLOCKED])


class FleetScreen(Screen[None]):
    HORIZONTAL_BREAKPOINTS = layout.HORIZONTAL
    VERTICAL_BREAKPOINTS = layout.VERTICAL

    BINDINGS = [
        Binding("escape,n", "app.pop_screen", "Back"),
        Binding("p", "toggle_problems", "Problems only"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self, main: MainScreen) -> None:
        super().__init__()
        self.main = main
        self.problems_only = False
        self.phases = [p for p in main.plan.phases if any(s.scope.value == "node" for s in p.steps)]
        self._cells: dict[tuple[str, str], str] = {}

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield Label("", id="fleet-summary", classes="pane-title")
        yield Static(
            "phases: " + " · ".join(f"{p.number} {p.title}" for p in self.phases),
            id="fleet-legend",
        )
        yield DataTable(id="fleet", cursor_type="row", zebra_stripes=True)
        yield Static("Select a node to see its warnings and failures.", id="node-detail")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"site {self.main.site.name}: nodes"
        table = self.query_one("#fleet", DataTable)
        table.add_column("node", key="node")
        for phase in self.phases:
            table.add_column(f"{phase.number:>2}", key=phase.id, width=2)
        table.add_column("first problem", key="problem")
        self._fill()
        self.set_interval(REFRESH_S, self.refresh_cells)

    # -- content ---------------------------------------------------------------------------

    def rows(self) -> dict[str, dict[str, str]]:
        """Every node's cells (a glyph per phase, its first problem), computed in one pass
        over the main screen's states and findings: on 64 nodes this runs twice a second."""
        states = self.main.states
        problems: dict[str, str] = {}
        for cordon in self.main.cordons:  # first: nothing is scheduled there until uncordoned
            problems[cordon.node] = f"CORDONED by {cordon.step}: {cordon.why}"
        for _step, target, finding in self.main.findings:
            if finding.severity is Severity.FAIL and not finding.waived:
                problems.setdefault(target, f"{finding.check}: {finding.message}")
        for (step, target), state in states.items():
            if state in (StepState.FAILED, StepState.BLOCKED):
                problems.setdefault(target, f"{step}: {state.value}")
        # A skipped step is not a made one: it needs attention too (after any failure).
        for (step, target), state in states.items():
            if state is StepState.SKIPPED:
                problems.setdefault(target, f"{SKIPPED_MARK} {step} skipped")
        node_steps = {p.id: [s.id for s in p.steps if s.scope.value == "node"] for p in self.phases}
        rows = {}
        for node in self.main.node_names:
            row = {"node": node}
            for phase_id, step_ids in node_steps.items():
                row[phase_id] = phase_glyph([states.get((step, node)) for step in step_ids])
            row["problem"] = problems.get(node, "")
            rows[node] = row
        return rows

    def _visible(self, rows: dict[str, dict[str, str]]) -> list[str]:
        return [n for n, r in rows.items() if _has_problem(r) or not self.problems_only]

    def _fill(self) -> None:
        table = self.query_one("#fleet", DataTable)
        table.clear()
        self._cells.clear()
        rows = self.rows()
        for node in self._visible(rows):
            table.add_row(*(rows[node][key] for key in self._keys()), key=node)
            self._cells.update({(node, key): value for key, value in rows[node].items()})
        self._summarise(rows)

    def refresh_cells(self) -> None:
        """Update the cells that changed since the last refresh."""
        table = self.query_one("#fleet", DataTable)
        rows = self.rows()
        if self.problems_only and set(self._visible(rows)) != {k.value for k in table.rows}:
            self._fill()  # a node gained or lost a problem: the filter's rows changed
            return
        for key in list(table.rows):
            node = str(key.value)
            for column, value in rows[node].items():
                if self._cells.get((node, column)) != value:
                    table.update_cell(key, column, value)
                    self._cells[(node, column)] = value
        self._summarise(rows)

    def _keys(self) -> list[str]:
        return ["node", *(p.id for p in self.phases), "problem"]

    def _summarise(self, rows: dict[str, dict[str, str]]) -> None:
        failed = sum(_has_failure(r) for r in rows.values())
        skipped = sum(
            1
            for r in rows.values()
            if not _has_failure(r)
            and (
                r["problem"].startswith(SKIPPED_MARK)
                or any(r[p.id] == GLYPHS[StepState.SKIPPED] for p in self.phases)
            )
        )
        running = sum(
            1
            for r in rows.values()
            if not _has_problem(r) and GLYPHS[StepState.RUNNING] in r.values()
        )
        done = sum(
            1 for r in rows.values() if all(r[p.id] == GLYPHS[StepState.DONE] for p in self.phases)
        )
        shown = " (problems only: p shows all)" if self.problems_only else ""
        cordoned = [c.node for c in self.main.cordons]
        self.query_one("#fleet-summary", Label).update(
            f"{len(rows)} nodes: {done} {GLYPHS[StepState.DONE]} all phases done, "
            f"{skipped} {GLYPHS[StepState.SKIPPED]} with a skipped step, "
            f"{running} {GLYPHS[StepState.RUNNING]} running, "
            f"{failed} {GLYPHS[StepState.FAILED]} with a problem{shown}"
            + (f"; CORDONED: {', '.join(cordoned)}" if cordoned else "")
        )

    # -- actions ---------------------------------------------------------------------------

    def action_toggle_problems(self) -> None:
        self.problems_only = not self.problems_only
        self._fill()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        node = event.row_key.value
        if node is None:
            return
        lines: list[Content] = [Content.styled(node, "bold")]
        for _step, target, finding in self.main.findings:
            if target != node or finding.severity in (Severity.PASS, Severity.SKIP):
                continue
            severity = Severity.WARN if finding.waived else finding.severity
            label = "waived" if finding.waived else severity.value
            lines.append(
                Content.assemble(
                    (f"{label:<6} ", SEVERITY_STYLE[severity]),
                    f"{finding.check}: {finding.message}",
                )
            )
        if len(lines) == 1:
            lines.append(Content("no warnings or failures so far"))
        self.query_one("#node-detail", Static).update(Content("\n").join(lines))


def _has_failure(row: dict[str, str]) -> bool:
    """A failed or blocked step, or a failing check (a skip is counted apart)."""
    problem = row["problem"]
    return (bool(problem) and not problem.startswith(SKIPPED_MARK)) or any(
        v in _PROBLEM_GLYPHS for v in row.values()
    )


def _has_problem(row: dict[str, str]) -> bool:
    return bool(row["problem"]) or any(v in _PROBLEM_GLYPHS for v in row.values())
