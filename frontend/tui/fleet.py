"""The fleet view: one row per GPU node, a state per phase, and the node's first problem.

The main screen's sidebar has room for six node columns; an operator adding 16 or 64 nodes
needs to see which nodes are done, which are running and which one failed where. This
screen composes widgets fed the main screen's fold of the run (``MainScreen.view``, and the
cordons the checkpoint's fold names): it never talks to the engine, and looks twice a
second whether the fold has changed since it was drawn.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Header, Label, Static

from frontend.tui import layout
from frontend.tui.main import MainScreen
from frontend.tui.widgets.fleet_table import FleetTable
from frontend.tui.widgets.node_detail import NodeDetail

REFRESH_S = 0.5


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
        self.phases = [p for p in main.plan.phases if any(s.scope.value == "node" for s in p.steps)]

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield Label("", id="fleet-summary", classes="pane-title")
        yield Static(
            "phases: " + " · ".join(f"{p.number} {p.title}" for p in self.phases),
            id="fleet-legend",
        )
        yield FleetTable(self.main.view, self.phases, id="fleet")
        yield NodeDetail(id="node-detail")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"site {self.main.site.name}: nodes"
        table = self.query_one(FleetTable)
        table.cordons = list(self.main.cordons)
        table.fill()
        self._summarise()
        self.set_interval(REFRESH_S, self.refresh_cells)

    def refresh_cells(self) -> None:
        """Update the cells that changed since the last refresh (none: nothing to do)."""
        if self.query_one(FleetTable).show(self.main.cordons):
            self._summarise()

    def _summarise(self) -> None:
        self.query_one("#fleet-summary", Label).update(self.query_one(FleetTable).summary())

    def action_toggle_problems(self) -> None:
        self.query_one(FleetTable).toggle_problems()
        self._summarise()

    def on_fleet_table_node_highlighted(self, event: FleetTable.NodeHighlighted) -> None:
        self.query_one(NodeDetail).show(self.main.view, event.node)
