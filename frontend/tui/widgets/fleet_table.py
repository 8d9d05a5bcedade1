"""The fleet table: one row per GPU node, a state per phase, and the node's first problem,
from the fold's step states, findings and cordons. Redrawn when the fold has changed, and
then only the cells that did (on 64 nodes this is asked twice a second)."""

from __future__ import annotations

from textual.message import Message
from textual.widgets import DataTable

from frontend.tui.widgets.findings_table import ID_WIDTH_MAX, MESSAGE_MIN
from frontend.tui.widgets.phase_table import GLYPHS, phase_glyph, waived_on
from wizard.model import Severity, StepState
from wizard.plan import Phase
from wizard.runview import Cordon, RunView

SKIPPED_MARK = GLYPHS[StepState.SKIPPED]
_PROBLEM_GLYPHS = (GLYPHS[StepState.FAILED], GLYPHS[StepState.BLOCKED])

Rows = dict[str, dict[str, str]]


class FleetTable(DataTable):
    DEFAULT_CSS = """
    FleetTable {
        height: 1fr;
        min-height: 4;
    }
    """

    class NodeHighlighted(Message):
        """A node's row was highlighted: its warnings and failures are to be shown."""

        def __init__(self, node: str) -> None:
            super().__init__()
            self.node = node

    def __init__(self, view: RunView, phases: list[Phase], **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.view = view
        self.phases = phases
        self.node_names = [n.name for n in view.site.nodes]
        self.cordons: list[Cordon] = []
        self.problems_only = False
        self.rows_now: Rows = {}
        self._cells: dict[tuple[str, str], str] = {}
        self._shown: tuple[int, tuple[Cordon, ...]] | None = None  # the fold drawn last
        self.narrow = False  # the first problem before the phases (see ``_fits``)

    def on_mount(self) -> None:
        self._add_columns()

    def _add_columns(self) -> None:
        problem_width = None
        if self.narrow:  # its id whole and a little of the text; the detail box has the rest
            longest = max((len(r["problem"]) for r in self.rows_now.values()), default=0)
            problem_width = min(longest, self._id_width() + MESSAGE_MIN)
        for key in self._keys():
            if key == "node":
                self.add_column("node", key="node")
            elif key == "problem":
                self.add_column("first problem", key="problem", width=problem_width)
            else:
                phase = next(p for p in self.phases if p.id == key)
                self.add_column(f"{phase.number:>2}", key=phase.id, width=2)

    def _id_width(self) -> int:
        """The longest id a first problem starts with (a check, a step), at most
        ``ID_WIDTH_MAX``."""
        ids = (r["problem"].split(": ", 1)[0] for r in self.rows_now.values())
        return min(max((len(i) for i in ids), default=0), ID_WIDTH_MAX)

    def _fits(self) -> bool:
        """Columns by priority (as k9s does, and the findings table): the node and the first
        problem's id are ids the operator types (`--redo STEP@NODE`, `--waive CHECK=...`);
        the phase glyphs are not. Where the phases leave no room for the id, the first
        problem comes before them and the phases scroll instead."""
        width = self.size.width or self.screen.size.width
        pad = 2 * self.cell_padding
        node = max(len("node"), *map(len, self.node_names))
        need = node + pad + len(self.phases) * (2 + pad) + self._id_width() + pad + 2
        return need <= width

    def on_resize(self) -> None:
        if self.rows_now and self._fits() == self.narrow:
            self.fill()

    def node_rows(self) -> Rows:
        """Every node's cells (a glyph per phase, its first problem), computed in one pass
        over the fold's states and findings."""
        view = self.view
        problems: dict[str, str] = {}
        for cordon in self.cordons:  # first: nothing is scheduled there until uncordoned
            problems[cordon.node] = f"CORDONED by {cordon.step}: {cordon.why}"
        for _step, target, finding in view.findings:
            if finding.severity is Severity.FAIL and not finding.waived:
                problems.setdefault(target, f"{finding.check}: {finding.message}")
        states = view.states
        for (step, target), state in states.items():
            if state in (StepState.FAILED, StepState.BLOCKED):
                problems.setdefault(target, f"{step}: {state.value}")
        # A skipped step is not a made one: it needs attention too (after any failure).
        for (step, target), state in states.items():
            if state is StepState.SKIPPED:
                problems.setdefault(target, f"{SKIPPED_MARK} {step} skipped")
        node_steps = {p.id: [s.id for s in p.steps if s.scope.value == "node"] for p in self.phases}
        rows = {}
        for node in self.node_names:
            row = {"node": node}
            for phase_id, step_ids in node_steps.items():
                row[phase_id] = phase_glyph(
                    [states.get((step, node)) for step in step_ids],
                    waived=waived_on(view, step_ids, node),
                )
            row["problem"] = problems.get(node, "")
            rows[node] = row
        return rows

    def _visible(self, rows: Rows) -> list[str]:
        return [n for n, r in rows.items() if has_problem(r) or not self.problems_only]

    def fill(self) -> None:
        """Every row anew (the first time, or the filter changed)."""
        rows = self.rows_now = self.node_rows()
        self.narrow = not self._fits()
        self.clear(columns=True)
        self._add_columns()
        self._cells.clear()
        self._shown = (self.view.revision, tuple(self.cordons))
        for node in self._visible(rows):
            self.add_row(*(rows[node][key] for key in self._keys()), key=node)
            self._cells.update({(node, key): value for key, value in rows[node].items()})

    def show(self, cordons: list[Cordon]) -> bool:
        """Draw the fold again if it changed since it was drawn (the cells that changed);
        whether it had."""
        if self._shown == (self.view.revision, tuple(cordons)):
            return False
        self.cordons = list(cordons)
        self._shown = (self.view.revision, tuple(cordons))
        rows = self.rows_now = self.node_rows()
        if self._fits() == self.narrow:  # a longer id, or one less: the order changes
            self.fill()
            return True
        if self.problems_only and set(self._visible(rows)) != {k.value for k in self.rows}:
            self.fill()  # a node gained or lost a problem: the filter's rows changed
            return True
        for key in list(self.rows):
            node = str(key.value)
            for column, value in rows[node].items():
                if self._cells.get((node, column)) != value:
                    self.update_cell(key, column, value)
                    self._cells[(node, column)] = value
        return True

    def toggle_problems(self) -> None:
        self.problems_only = not self.problems_only
        self.fill()

    def _keys(self) -> list[str]:
        phases = [p.id for p in self.phases]
        return ["node", "problem", *phases] if self.narrow else ["node", *phases, "problem"]

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None:
            self.post_message(self.NodeHighlighted(event.row_key.value))

    def summary(self) -> str:
        """How many nodes are done, skipped, running and with a problem; which are cordoned."""
        rows = self.rows_now
        failed = sum(has_failure(r) for r in rows.values())
        skipped = sum(
            1
            for r in rows.values()
            if not has_failure(r)
            and (
                r["problem"].startswith(SKIPPED_MARK)
                or any(r[p.id] == GLYPHS[StepState.SKIPPED] for p in self.phases)
            )
        )
        running = sum(
            1
            for r in rows.values()
            if not has_problem(r) and GLYPHS[StepState.RUNNING] in r.values()
        )
        done = sum(
            1 for r in rows.values() if all(r[p.id] == GLYPHS[StepState.DONE] for p in self.phases)
        )
        shown = " (problems only: p shows all)" if self.problems_only else ""
        cordoned = [c.node for c in self.cordons]
        return (
            f"{len(rows)} nodes: {done} {GLYPHS[StepState.DONE]} all phases done, "
            f"{skipped} {GLYPHS[StepState.SKIPPED]} with a skipped step, "
            f"{running} {GLYPHS[StepState.RUNNING]} running, "
            f"{failed} {GLYPHS[StepState.FAILED]} with a problem{shown}"
            + (f"; CORDONED: {', '.join(cordoned)}" if cordoned else "")
        )


def has_failure(row: dict[str, str]) -> bool:
    """A failed or blocked step, or a failing check (a skip is counted apart)."""
    problem = row["problem"]
    return (bool(problem) and not problem.startswith(SKIPPED_MARK)) or any(
        v in _PROBLEM_GLYPHS for v in row.values()
    )


def has_problem(row: dict[str, str]) -> bool:
    return bool(row["problem"]) or any(v in _PROBLEM_GLYPHS for v in row.values())
