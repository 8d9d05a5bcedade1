"""The findings table: the fold's findings as found (each record's latest), or only what
needs attention, in the order chosen, filtered by what the operator typed. The rules of what
is listed and in which order are ``frontend/tui/findings.py``'s; this widget only draws."""

from __future__ import annotations

from textual.content import Content
from textual.message import Message
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey

from frontend.tui import findings as findings_view
from wizard.model import Finding, Severity
from wizard.runview import RunView

SEVERITY_STYLE = {
    Severity.PASS: "$text-success",
    Severity.WARN: "$text-warning",
    Severity.FAIL: "bold $text-error",
    Severity.SKIP: "$text-muted",
}

# The columns (FindingsTable.fit): an id is cut only past this.
ID_WIDTH_MAX = 40
MESSAGE_MIN = 12


class FindingsTable(DataTable):
    # Not scoped: a short screen (frontend/tui/layout.py) keeps fewer rows.
    SCOPED_CSS = False
    DEFAULT_CSS = """
    FindingsTable {
        height: 1fr;
        min-height: 6;
    }

    MainScreen.-short FindingsTable {
        min-height: 5;
    }
    """

    class FindingShown(Message):
        """A finding was highlighted or selected: its detail is to be shown."""

        def __init__(self, row: findings_view.Row) -> None:
            super().__init__()
            self.row = row

    def __init__(self, view: RunView, *, fleet: bool, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.view = view
        self.fleet = fleet
        self.problems_only = False  # F: the table lists only what needs attention
        self.sort = "found"  # o: the table's order (frontend/tui/findings.SORTS)
        self.filter_text = ""  # /: only the findings whose node, gate or check match
        # An ordered table is filled anew once per drain, not once per finding (a fleet's
        # check brings thousands); the finding to show then, if one needs attention.
        self._refill_due = False
        self._select_due: int | None = None
        # The longest check name and node shown so far: their columns are never narrower.
        names = [n.name for n in view.site.nodes]
        self._longest = {"check": 0, "target": max(len("cluster"), *map(len, names))}

    @property
    def findings(self) -> list[findings_view.Row]:
        """(step, target, finding) as found, each record's latest (the fold's)."""
        return self.view.findings

    def on_mount(self) -> None:
        self.add_column("sev", key="sev", width=6)
        self.add_column("target", key="target", width=12)
        self.add_column("check", key="check", width=26)
        self.add_column("message", key="message")
        self.fit()

    def fit(self) -> None:
        """Columns by priority (as k9s does): the check name and the node are ids the
        operator types (`--waive CHECK=...`, `--redo STEP@NODE`), so they keep their full
        width; the message takes what is left and shrinks first (the detail below shows it
        whole). Only past ``ID_WIDTH_MAX`` is an id cut, and then the message keeps
        ``MESSAGE_MIN``."""
        width = self.size.width or self.screen.size.width
        pad = 2 * self.cell_padding
        check = min(max(self._longest["check"], 8), ID_WIDTH_MAX)
        target = min(max(self._longest["target"], 6), ID_WIDTH_MAX)
        room = width - pad * 4 - 6 - 2  # sev, the scrollbar
        if room - check - target < MESSAGE_MIN:  # too narrow for every id: ids still first
            check = max(8, min(check, room - target - MESSAGE_MIN))
        message = max(MESSAGE_MIN, room - check - target)
        columns = self.columns
        for key, value in (("target", target), ("check", check), ("message", message)):
            column = columns.get(ColumnKey(key))
            if column is not None and (column.width != value or column.auto_width):
                column.width = value
                column.auto_width = False  # the message too: it takes the rest, no more
                self._require_update_dimensions = True
        self.refresh()

    # -- fed by the fold --------------------------------------------------------------------

    def found(self, count: int, *, replaced: bool = False) -> None:
        """The fold's last ``count`` findings are new; ``replaced``: a retry's result took
        the place of findings the table lists (they leave it)."""
        if replaced:
            self._refill_due = True
        for index in range(len(self.findings) - count, len(self.findings)):
            self._show_finding(index)

    def _show_finding(self, index: int) -> None:
        """The finding the fold just added at ``index`` goes into the table."""
        finding = self.findings[index][2]
        if not self._shows(finding, index):
            return
        if self._ordered() or self._refill_due:
            self._refill_due = True  # the new one takes its place at the drain's end
            if finding.severity is not Severity.PASS:
                self._select_due = index
        else:
            self._add_row(index)
            if finding.severity is not Severity.PASS:
                self._select(index)

    def _shows(self, finding: Finding, index: int | None = None) -> bool:
        filtered = self.filter_text and index is not None
        if filtered and not findings_view.matches(self.findings[index], self.filter_text):
            return False
        return findings_view.shows(finding, fleet=self.fleet, problems_only=self.problems_only)

    def _ordered(self) -> bool:
        return self.problems_only or self.sort != "found" or bool(self.filter_text)

    def _select(self, index: int) -> None:
        self.move_cursor(row=self.get_row_index(str(index)))
        self.post_message(self.FindingShown(self.findings[index]))

    def refill_if_due(self) -> None:
        """Once per drain: an ordered table anew, with the finding that needs attention."""
        if not self._refill_due:
            return
        self._refill_due = False
        self.fill()
        select, self._select_due = self._select_due, None
        if select is not None:
            self._select(select)

    def _add_row(self, index: int) -> None:
        _step, target, finding = self.findings[index]
        if len(finding.check) > self._longest["check"] or len(target) > self._longest["target"]:
            self._longest["check"] = max(self._longest["check"], len(finding.check))
            self._longest["target"] = max(self._longest["target"], len(target))
            self.fit()
        severity = findings_view.shown_severity(finding)
        label = "waived" if finding.waived else severity.value
        self.add_row(
            Content.styled(label, SEVERITY_STYLE[severity]),
            target,
            finding.check,
            finding.message,
            key=str(index),
        )

    def fill(self) -> None:
        """The table anew: every finding it shows, in the chosen order (failures first
        with problems only)."""
        self.clear()
        shown = [i for i, (_, _, f) in enumerate(self.findings) if self._shows(f, i)]
        for index in findings_view.ordered(self.findings, shown, self.sort, self.problems_only):
            self._add_row(index)

    # -- the operator's choices -------------------------------------------------------------

    def toggle_problems_only(self) -> None:
        self.problems_only = not self.problems_only
        self.fill()

    def next_sort(self) -> None:
        self.sort = findings_view.next_sort(self.sort)
        self.fill()

    def filter_by(self, text: str) -> None:
        self.filter_text = text.strip()
        self.fill()

    def highlighted_finding(self) -> findings_view.Row | None:
        """The finding under the cursor (None: the table is empty)."""
        if not self.row_count:
            return None
        key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        return None if key is None else self.findings[int(key)]

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None:
            self.post_message(self.FindingShown(self.findings[int(event.row_key.value)]))
