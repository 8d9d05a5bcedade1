"""The measurements view: every recorded number, and bars of bandwidth against line rate,
the baseline next to the run with QoS."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Label, Static

from screens import layout

BAR_WIDTH = 40


def bar(value: float, scale: float) -> str:
    filled = 0 if scale <= 0 else max(0, min(BAR_WIDTH, round(BAR_WIDTH * value / scale)))
    return "█" * filled + "·" * (BAR_WIDTH - filled)


def bandwidth_chart(measurements: list[dict[str, Any]]) -> str:
    """Text bars: each Gb/s series against the port's line rate; baseline vs QoS side by side."""
    rate = next((m["value"] for m in measurements if m["name"].endswith("line_rate_port")), 100.0)
    by_name = {(m["target"], m["name"]): m["value"] for m in measurements}
    lines = [f"bandwidth vs one port's line rate ({rate:.0f} Gb/s = full bar)"]
    for m in measurements:
        if m["unit"] != "Gb/s" or "line_rate" in m["name"] or m["name"].startswith("qos."):
            continue
        lines.append(
            f"{m['target'][:14]:<14} {m['name'][:30]:<30} {bar(m['value'], rate)} {m['value']:6.1f}"
        )
        if m["name"].startswith("baseline."):
            twin = by_name.get((m["target"], "qos." + m["name"].split(".", 1)[1]))
            if twin is not None:
                label = "  with QoS"
                lines.append(f"{'':<14} {label:<30} {bar(twin, rate)} {twin:6.1f}")
    return "\n".join(lines)


class MeasurementsScreen(Screen[None]):
    HORIZONTAL_BREAKPOINTS = layout.HORIZONTAL
    VERTICAL_BREAKPOINTS = layout.VERTICAL

    BINDINGS = [Binding("escape,m", "app.pop_screen", "Back"), Binding("q", "app.quit", "Quit")]

    def __init__(self, measurements: list[dict[str, Any]]) -> None:
        super().__init__()
        self.measurements = measurements

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with VerticalScroll(id="report"):
            yield Label("Measurements", classes="dialog-title")
            if not self.measurements:
                yield Static("Nothing measured yet: the measure steps record numbers here.")
            else:
                yield Static(bandwidth_chart(self.measurements), id="chart")
                yield DataTable(id="measurements", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        if not self.measurements:
            return
        table = self.query_one("#measurements", DataTable)
        for column in ("target", "measurement", "value", "unit"):
            table.add_column(column, key=column)
        for m in self.measurements:
            table.add_row(m["target"], m["name"], f"{m['value']:.4g}", m["unit"])
