"""The cordon panel: every node a failed maintenance change left cordoned (the fold's
``RunView.cordoned``), why, and how to uncordon it. Always in view while a node is."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from wizard.runview import Cordon


class CordonPanel(Static):
    DEFAULT_CSS = """
    CordonPanel {
        border: heavy $error;
        padding: 0 1;
        height: auto;
        max-height: 8;
    }
    """

    def on_mount(self) -> None:
        self.display = False

    def show(self, cordons: list[Cordon]) -> None:
        self.display = bool(cordons)
        parts: list[Content | str] = []
        for cordon in cordons:
            if parts:
                parts.append("\n")
            parts += [("CORDONED ", "bold $text-error"), Content(cordon.text()), "\n",
                      ("To uncordon: ", "bold"), Content(cordon.remedy)]  # fmt: skip
        self.update(Content.assemble(*parts))
