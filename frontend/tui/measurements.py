"""The measurements view: charts to look at (bandwidth against line rate with the baseline
next to the run with QoS, the QP sweep, NCCL bus bandwidth against message size), then
every recorded number in a table.

The charts are textual-plotext widgets drawn from ``frontend.tui.charts`` (pure functions of the
measurements); a chart with nothing to draw is a one-line note instead. Below 150 columns
the charts are stacked and the screen scrolls; from 150 they stand side by side."""

from __future__ import annotations

from typing import Any

import plotext._utility as plotext_utility
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Label, Select, Static
from textual_plotext import PlotextPlot
from textual_plotext.plot import Plot

from frontend.tui import layout
from frontend.tui.charts import Chart, chart_targets, charts

# plotext removes duplicate ticks and points with list(set(...)), so the order in which it
# places tick labels and draws overlapping points (the baseline under the run with QoS)
# follows Python's per-process string hashing: the same chart at the same size came out
# differently from one process to the next. Its own commented-out alternative keeps the
# order: first seen first.
plotext_utility.no_duplicates = lambda data: list(dict.fromkeys(data))


class ChartPlot(PlotextPlot):
    """One chart, redrawn whenever it is given a new one."""

    def __init__(self, chart: Chart, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.chart = chart

    def on_mount(self) -> None:
        super().on_mount()
        self.draw(self.chart)

    def draw(self, chart: Chart) -> None:
        self.chart = chart
        self._plot = Plot()
        self._paint()
        self.refresh()

    def _paint(self) -> None:
        chart = self.chart
        plt = self.plt
        plt.title(chart.title)
        plt.xlabel(chart.x_label)
        plt.ylabel(chart.y_label)
        if chart.empty:
            pass  # the note is shown instead
        elif chart.bars:
            values = [[y for _, y in s.points] for s in chart.series]
            labels = [s.label for s in chart.series]
            if len(values) == 1:
                plt.bar(list(chart.categories), values[0], label=labels[0], width=0.4)
            else:
                plt.multiple_bar(list(chart.categories), values, labels=labels, width=0.4)
        else:
            for series in chart.series:
                xs = [x for x, _ in series.points]
                ys = [y for _, y in series.points]
                plt.plot(xs, ys, label=series.label, marker="hd")
            if chart.x_ticks:
                plt.xticks([x for x, _ in chart.x_ticks], [t for _, t in chart.x_ticks])
        top = max((y for s in chart.series for _, y in s.points), default=0.0)
        if chart.reference is not None:
            plt.hline(chart.reference, "red")
            top = max(top, chart.reference)
        plt.ylim(0, top * 1.1 if top > 0 else 1)


class MeasurementsScreen(Screen[None]):
    HORIZONTAL_BREAKPOINTS = layout.HORIZONTAL
    VERTICAL_BREAKPOINTS = layout.VERTICAL

    BINDINGS = [Binding("escape,m", "app.pop_screen", "Back"), Binding("q", "app.quit", "Quit")]

    def __init__(self, measurements: list[dict[str, Any]]) -> None:
        super().__init__()
        self.measurements = measurements
        self.targets = chart_targets(measurements)
        self.target = self.targets[0] if self.targets else ""

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with VerticalScroll(id="report"):
            yield Label("Measurements", classes="dialog-title")
            if not self.measurements:
                yield Static("Nothing measured yet: the measure steps record numbers here.")
            if len(self.targets) > 1:
                yield Select(
                    [(t, t) for t in self.targets], value=self.target, allow_blank=False,
                    id="node", prompt="node",
                )  # fmt: skip
            with Container(id="charts"):
                for chart in charts(self.measurements, self.target):
                    yield from self._pane(chart)
            if self.measurements:
                yield DataTable(id="measurements", cursor_type="row")
        yield Footer()

    @staticmethod
    def _pane(chart: Chart) -> ComposeResult:
        with Container(id=f"pane-{chart.key}", classes="chart-pane"):
            plot = ChartPlot(chart, id=f"plot-{chart.key}", classes="chart")
            plot.display = not chart.empty
            yield plot
            note = Static(chart.note, id=f"note-{chart.key}", classes="chart-note")
            note.display = chart.empty
            yield note

    def on_mount(self) -> None:
        if not self.measurements:
            return
        table = self.query_one("#measurements", DataTable)
        for column in ("target", "measurement", "value", "unit"):
            table.add_column(column, key=column)
        for m in self.measurements:
            table.add_row(m["target"], m["name"], f"{m['value']:.4g}", m["unit"])

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id != "node" or event.value in (self.target, Select.BLANK):
            return
        self.target = str(event.value)
        for chart in charts(self.measurements, self.target):
            plot = self.query_one(f"#plot-{chart.key}", ChartPlot)
            plot.draw(chart)
            plot.display = not chart.empty
            self.query_one(f"#note-{chart.key}", Static).display = chart.empty
