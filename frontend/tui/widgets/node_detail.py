"""A node's warnings and failures (waived ones as warnings), from the fold's findings."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from frontend.tui.widgets.findings_table import SEVERITY_STYLE
from wizard.model import Severity
from wizard.runview import RunView


class NodeDetail(Static):
    # Not scoped: a short screen (frontend/tui/layout.py) gives it fewer lines.
    SCOPED_CSS = False
    DEFAULT_CSS = """
    NodeDetail {
        height: auto;
        max-height: 14;
        border: round $primary-muted;
        padding: 0 1;
    }

    FleetScreen.-short NodeDetail {
        max-height: 6;
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("Select a node to see its warnings and failures.", **kwargs)

    def show(self, view: RunView, node: str) -> None:
        lines: list[Content] = [Content.styled(node, "bold")]
        for _step, target, finding in view.findings:
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
        self.update(Content("\n").join(lines))
