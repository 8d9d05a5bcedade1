"""The filter box over the findings (`/`): node, gate, check or severity words."""

from __future__ import annotations

from textual.widgets import Input


class FindingsFilter(Input):
    DEFAULT_CSS = """
    FindingsFilter {
        height: 3;
    }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(
            placeholder="filter the findings: node, gate, check or severity (Esc clears)",
            **kwargs,
        )

    def on_mount(self) -> None:
        self.display = False
