"""A finding in full below the table: its check, where, message, waiver, fix and evidence."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from frontend.tui import findings as findings_view


class FindingDetail(Static):
    # Not scoped: a short screen (frontend/tui/layout.py) gives it fewer lines.
    SCOPED_CSS = False
    DEFAULT_CSS = """
    FindingDetail {
        height: auto;
        max-height: 12;
        border: round $primary-muted;
        padding: 0 1;
    }

    MainScreen.-short FindingDetail {
        max-height: 5;
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("Select a finding to see its remediation and evidence.", **kwargs)

    def show(self, row: findings_view.Row) -> None:
        self.update(Content(findings_view.detail_text(row)))
