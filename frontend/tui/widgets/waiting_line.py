"""The waiting line: a question set aside with Esc still waits; says which, and that ``d``
answers it (Esc never decides)."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static


class WaitingLine(Static):
    DEFAULT_CSS = """
    WaitingLine {
        height: auto;
        padding: 0 1;
        border-left: thick $warning;
    }
    """

    def on_mount(self) -> None:
        self.display = False

    def show(self, title: str | None) -> None:
        self.display = title is not None
        if title is not None:
            self.update(
                Content.assemble(("Waiting for you: ", "bold $text-warning"), title,
                                 ("  (d: answer it)", "bold"))
            )  # fmt: skip
