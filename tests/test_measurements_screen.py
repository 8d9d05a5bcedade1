"""The measurements screen's charts: what is plotted from the numbers a demo run records
(bandwidth against line rate with the baseline next to the run with QoS, the QP sweep,
NCCL bus bandwidth per message size), the note a chart without data shows instead, the
layout at 80x24 (stacked, scrolling) and 160x48 (side by side), and snapshots of both."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
from textual.widgets import DataTable, Select, Static

from frontend.tui.charts import (
    bandwidth_chart,
    chart_targets,
    charts,
    nccl_chart,
    qp_sweep_chart,
    size_text,
)
from frontend.tui.measurements import ChartPlot, MeasurementsScreen
from tests.conftest import REPO
from tests.test_tui import wait_for
from tests.test_tui_keys import IdleApp

NODE = "gpu-b300-01"


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> list[dict]:
    """The measurements of one headless demo run, as the screen is given them (the
    report's list: target, name, value, unit, labels)."""
    out = tmp_path_factory.mktemp("demo")
    subprocess.run(
        [sys.executable, "-m", "frontend.cli", "demo", "--headless",
         "--report", str(out / "report"), "--state-dir", str(out / "state")],
        check=True, capture_output=True, cwd=REPO, timeout=600,
    )  # fmt: skip
    return json.loads((out / "report" / "report.json").read_text())["measurements"]


@pytest.fixture
def runs(demo) -> list[dict]:
    """The demo's measurements with each run's bandwidths told apart. The lab measures the
    same numbers in phase 6, the baseline and with QoS: a chart that drew one run's numbers
    under another's name (or swapped baseline and QoS) would pass on them unchanged."""
    scale = {"host": 0.5, "qos": 0.9}
    return [
        {**m, "value": m["value"] * scale[m["name"].split(".")[0]]}
        if m["unit"] == "Gb/s" and m["name"].split(".")[0] in scale and "line_rate" not in m["name"]
        else m
        for m in demo
    ]


def value(measurements: list[dict], name: str, target: str = NODE) -> float:
    (found,) = [m["value"] for m in measurements if m["name"] == name and m["target"] == target]
    return found


def ys(series) -> list[float]:
    return [y for _, y in series.points]


def without(measurements: list[dict], *prefixes: str) -> list[dict]:
    return [m for m in measurements if not m["name"].startswith(prefixes)]


# -- what is plotted (pure functions, on a demo run's real names) ------------------------------


def test_bandwidth_bars_put_the_baseline_next_to_qos_against_the_line_rate(runs):
    demo = runs
    chart = bandwidth_chart(demo, NODE)
    assert chart.bars and chart.categories == ("ib_read_bw", "ib_send_bw", "ib_write_bw")
    assert [s.label for s in chart.series] == ["baseline", "with QoS"]
    tests = ("ib_read_bw.q4", "ib_send_bw.q4", "ib_write_bw.q4")
    assert ys(chart.series[0]) == [value(demo, f"baseline.{t}") for t in tests]
    assert ys(chart.series[1]) == [value(demo, f"qos.{t}") for t in tests]
    assert chart.reference == value(demo, "baseline.line_rate_port") == 100.0
    assert "red line: 100 Gb/s" in chart.title


def test_the_qp_sweep_is_bandwidth_per_qp_count_per_run(runs):
    demo = runs
    chart = qp_sweep_chart(demo, NODE)
    # phase 6's host sweep is left out once the baseline has one; .cpu and .lost are not Gb/s
    assert [s.label for s in chart.series] == ["baseline", "with QoS"]
    for series, prefix in zip(chart.series, ("baseline", "qos"), strict=True):
        assert series.points == tuple(
            (float(q), value(demo, f"{prefix}.qp_sweep.q{q}")) for q in (1, 4, 8)
        )
    assert chart.x_ticks == ((1.0, "1"), (4.0, "4"), (8.0, "8"))
    assert chart.reference == 100.0


def test_nccl_bus_bandwidth_per_message_size_on_a_log2_axis(demo):
    chart = nccl_chart(demo, NODE)
    (nvlink,) = chart.series  # one node: no inter-node run
    assert nvlink.label == "NVLink, one node"
    sizes = [8, 1048576, 134217728, 1073741824, 17179869184]
    assert [x for x, _ in nvlink.points] == [math.log2(s) for s in sizes] == [3, 20, 27, 30, 34]
    assert ys(nvlink) == [value(demo, f"nccl.nvlink.busbw.{s}") for s in sizes]
    assert [t for _, t in chart.x_ticks] == ["8B", "1M", "128M", "1G", "16G"]


def test_before_qos_one_series_and_before_the_baseline_phase_6s_run(runs):
    demo = runs
    no_qos = without(demo, "qos.")
    chart = bandwidth_chart(no_qos, NODE)
    assert [s.label for s in chart.series] == ["baseline"]
    assert ys(chart.series[0])[0] == value(demo, "baseline.ib_read_bw.q4")
    assert "no run with QoS yet" in chart.title
    assert [s.label for s in qp_sweep_chart(no_qos, NODE).series] == ["baseline"]
    host_only = without(demo, "qos.", "baseline.")
    assert [s.label for s in bandwidth_chart(host_only, NODE).series] == ["host (phase 6)"]
    assert ys(bandwidth_chart(host_only, NODE).series[0])[0] == value(demo, "host.ib_read_bw.q4")


def test_no_data_is_an_empty_chart_with_a_one_line_note(demo):
    for chart in charts(without(demo, "nccl.", "host.", "baseline.", "qos."), NODE):
        assert chart.empty and chart.series == ()
        assert chart.note and "\n" not in chart.note and len(chart.note) <= 96
    assert all(c.empty for c in charts(demo, "no-such-node"))
    assert not any(c.empty for c in charts(demo, NODE))


def test_each_node_of_a_fleet_is_its_own_chart(demo):
    other = [
        {**m, "target": "gpu-b300-02", "value": m["value"] / 2} for m in demo if m["target"] == NODE
    ]
    fleet = demo + other + [{"target": "cluster", "name": "x.y", "value": 1.0, "unit": "s"}]
    assert chart_targets(fleet) == [NODE, "gpu-b300-02"]  # the cluster has nothing to plot
    assert ys(bandwidth_chart(fleet, "gpu-b300-02").series[0]) == [
        v / 2 for v in ys(bandwidth_chart(demo, NODE).series[0])
    ]
    assert chart_targets([]) == []


def test_sizes_read_as_nccl_tests_prints_them():
    assert [size_text(s) for s in (8, 1000, 1024, 1048576, 3 << 30)] == [
        "8B", "1000B", "1K", "1M", "3G",
    ]  # fmt: skip


# -- the screen ------------------------------------------------------------------------------


def plotted(plot: ChartPlot) -> list[list[float]]:
    """The y values plotext was given (one list per series; a bar's outline per bar)."""
    return [list(y) for y in plot.plt._active.monitor.y]


async def measurements_shown(app: IdleApp, pilot, measurements: list[dict]) -> MeasurementsScreen:
    screen = MeasurementsScreen(measurements)
    await app.push_screen(screen)
    await wait_for(pilot, lambda: screen.is_mounted and app.screen is screen, 5)
    await pilot.pause(0.2)
    return screen


async def test_the_screen_draws_each_chart_from_its_series(runs):
    demo = runs
    app = IdleApp()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await measurements_shown(app, pilot, demo)
        expected = charts(demo, NODE)
        plots = list(screen.query(ChartPlot))
        assert [p.id for p in plots] == ["plot-bandwidth", "plot-qp-sweep", "plot-nccl"]
        for plot, chart in zip(plots, expected, strict=True):
            assert plot.chart == chart and plot.display
            assert not screen.query_one(f"#note-{chart.key}", Static).display
        qp, nccl = plots[1], plots[2]
        assert plotted(qp) == [ys(s) for s in expected[1].series]
        assert plotted(nccl) == [ys(s) for s in expected[2].series]
        # bars: baseline's three, then QoS's three, each drawn up to its value
        tops = [max(y) for y in plotted(plots[0])]
        assert tops == ys(expected[0].series[0]) + ys(expected[0].series[1])
        assert screen.query_one("#measurements", DataTable).row_count == len(demo)
        assert not screen.query(Select)  # one node: nothing to choose


async def test_a_chart_without_data_shows_its_note_instead(demo):
    app = IdleApp()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await measurements_shown(app, pilot, without(demo, "nccl."))
        assert not screen.query_one("#plot-nccl", ChartPlot).display
        note = screen.query_one("#note-nccl", Static)
        assert note.display and note.region.height == 1
        assert str(note.content).startswith("NCCL bus bandwidth: nothing measured yet")
        assert screen.query_one("#plot-bandwidth", ChartPlot).display

        empty = await measurements_shown(app, pilot, [])
        notes = [n for n in empty.query(".chart-note") if n.display]
        assert len(notes) == 3 and not [p for p in empty.query(ChartPlot) if p.display]
        assert not empty.query(DataTable)


async def test_a_fleet_chooses_the_node_to_plot(demo):
    other = [{**m, "target": "gpu-b300-02", "value": m["value"] / 2} for m in demo]
    fleet = demo + other
    app = IdleApp()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await measurements_shown(app, pilot, fleet)
        select = screen.query_one("#node", Select)
        assert select.value == NODE
        select.value = "gpu-b300-02"
        await pilot.pause(0.2)
        plot = screen.query_one("#plot-qp-sweep", ChartPlot)
        assert plot.chart == qp_sweep_chart(fleet, "gpu-b300-02")
        assert plotted(plot)[0] == [v / 2 for v in ys(qp_sweep_chart(demo, NODE).series[0])]


async def test_80x24_stacks_the_charts_and_scrolls_to_the_table(demo):
    app = IdleApp()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await measurements_shown(app, pilot, demo)
        panes = [p.region for p in screen.query(".chart-pane")]
        assert len({r.x for r in panes}) == 1 and panes[0].y < panes[1].y < panes[2].y
        assert all(r.width >= 70 and r.height >= 10 for r in panes)
        scroll = screen.query_one("#report")
        assert scroll.max_scroll_y > 0
        scroll.scroll_end(animate=False)
        await pilot.pause(0.2)
        table = screen.query_one("#measurements", DataTable)
        assert table.region.height > 0 and table.region.bottom <= 23  # above the footer


async def test_160x48_puts_the_charts_side_by_side(demo):
    app = IdleApp()
    async with app.run_test(size=(160, 48)) as pilot:
        screen = await measurements_shown(app, pilot, demo)
        panes = [p.region for p in screen.query(".chart-pane")]
        assert len({r.y for r in panes}) == 1 and panes[0].x < panes[1].x < panes[2].x
        assert all(r.width >= 45 and r.height >= 18 for r in panes)
        assert screen.query_one("#measurements", DataTable).region.y < 48


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_measurements_snapshot(demo, size, snapshot):
    app = IdleApp()
    async with app.run_test(size=size) as pilot:
        await measurements_shown(app, pilot, demo)
        await pilot.pause()
        assert app.export_screenshot() == snapshot


BUILD = """
import json, sys
from frontend.tui.charts import charts
from frontend.tui.measurements import ChartPlot
for chart in charts(json.loads(sys.stdin.read()), "gpu-b300-01"):
    plot = ChartPlot(chart)
    plot.draw(chart)
    plot.plt.plotsize(50, 22)
    print(plot.plt.build())
"""


def test_a_chart_is_drawn_the_same_in_every_process(demo):
    """plotext dedupes ticks and points through a set: with string hashing seeded per
    process, tick labels moved by a cell and overlapping lines swapped colours between runs
    (the snapshots flickered). Two processes, two hash seeds, one picture."""
    builds = {
        subprocess.run(
            [sys.executable, "-c", BUILD], input=json.dumps(demo), capture_output=True,
            text=True, check=True, cwd=REPO, env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2", "3")
    }  # fmt: skip
    assert len(builds) == 1 and "ib_send_bw" in next(iter(builds))


def test_the_readme_shows_the_screenshots_the_script_writes():
    readme = (REPO / "README.md").read_text()
    script = (REPO / "docs" / "screenshots.py").read_text()
    for name in ("main.svg", "measurements.svg"):
        assert f"](docs/{name})" in readme and f'"{name}"' in script
        svg = (REPO / "docs" / name).read_text()
        assert svg.startswith("<svg") and "Generated with Rich" in svg  # Textual's own export
    shown = (REPO / "docs" / "measurements.svg").read_text().replace("&#160;", " ")
    assert "NCCL all_reduce bus bandwidth" in shown and "QP sweep" in shown
