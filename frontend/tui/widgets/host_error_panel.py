"""The error panel: a host the run cannot use (unreachable, timed out), and what to do."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from frontend.tui import findings as findings_view
from wizard.model import Severity


class HostErrorPanel(Static):
    DEFAULT_CSS = """
    HostErrorPanel {
        border: heavy $error;
        padding: 0 1;
        margin-bottom: 1;
        height: auto;
    }
    """

    def on_mount(self) -> None:
        self.display = False

    def found(self, rows: list[findings_view.Row]) -> None:
        """Findings the fold just added: the last failed connection among them is shown."""
        for _step, target, finding in rows:
            if not (
                finding.check.endswith((".reachable", ".timeout"))
                and finding.severity is Severity.FAIL
            ):
                continue
            self.update(
                Content.assemble(
                    ("Cannot use ", "bold"),
                    (target, "bold"),
                    "\n",
                    Content(finding.message),
                    "\n",
                    ("What to do: ", "bold"),
                    Content(finding.remediation),
                )
            )
            self.display = True
