"""What the measurements screen plots, taken out of the recorded measurements.

Pure functions of the list the report builds (``wizard.report.build_report``: dicts with
``target``, ``name``, ``value``, ``unit`` and ``labels``), one node at a time, so that what
is drawn can be tested without drawing it. The names are the ones the steps record:

- ``baseline.ib_{write,read,send}_bw.qN`` (phase baseline) and ``qos.ib_..._bw.qN`` (the
  run with QoS), against ``*.line_rate_port``;
- ``{host,baseline,qos}.qp_sweep.qN`` (bandwidth per QP count; ``.cpu`` and ``.lost``
  beside it are not bandwidths);
- ``nccl.nvlink.busbw.BYTES`` and ``nccl.all_reduce.busbw.BYTES`` (bus bandwidth per
  message size, from the nccl-tests table).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

Measurement = dict[str, Any]

_BANDWIDTH = re.compile(r"^(?P<prefix>baseline|host)\.(?P<test>ib_\w+_bw\.q\d+)$")
_SWEEP = re.compile(r"^(?P<prefix>host|baseline|qos)\.qp_sweep\.q(?P<qps>\d+)$")
_NCCL = re.compile(r"^nccl\.(?P<run>nvlink|all_reduce)\.busbw\.(?P<bytes>\d+)$")

SWEEP_LABELS = {"host": "host (phase 6)", "baseline": "baseline", "qos": "with QoS"}
NCCL_LABELS = {"nvlink": "NVLink, one node", "all_reduce": "all_reduce across nodes"}
MAX_TICKS = 8


@dataclass(frozen=True)
class Series:
    label: str
    points: tuple[tuple[float, float], ...]  # (x, y); on a bar chart x is the bar's index


@dataclass(frozen=True)
class Chart:
    key: str
    title: str
    x_label: str
    y_label: str
    series: tuple[Series, ...]
    note: str  # the one line shown instead of an empty plot
    bars: bool = False
    categories: tuple[str, ...] = ()  # a bar chart's groups
    reference: float | None = None  # a horizontal line (the port's line rate)
    x_ticks: tuple[tuple[float, str], ...] = field(default=())

    @property
    def empty(self) -> bool:
        return not any(s.points for s in self.series)


def _mine(measurements: Iterable[Measurement], target: str) -> list[Measurement]:
    return [m for m in measurements if m["target"] == target]


def line_rate(measurements: Iterable[Measurement], target: str) -> float | None:
    """One port's line rate as the measure steps read it (baseline's first, any other's
    else): the reference a bandwidth is judged against."""
    rates = {
        m["name"].split(".", 1)[0]: m["value"]
        for m in _mine(measurements, target)
        if m["name"].endswith(".line_rate_port")
    }
    for prefix in ("baseline", "qos", "host"):
        if prefix in rates:
            return float(rates[prefix])
    return next(iter(rates.values()), None)


def bandwidth_chart(measurements: list[Measurement], target: str) -> Chart:
    """Bars: each RDMA bandwidth test, the baseline next to the run with QoS, and the port's
    line rate as a line across them. Before the baseline phase, phase 6's host run."""
    mine = _mine(measurements, target)
    found: dict[str, dict[str, float]] = {}
    for m in mine:
        if m["unit"] == "Gb/s" and (match := _BANDWIDTH.match(m["name"])):
            found.setdefault(match["prefix"], {})[match["test"]] = float(m["value"])
    before = "baseline" if "baseline" in found else "host"
    tests = list(found.get(before, {}))
    qos = {
        m["name"].split(".", 1)[1]: float(m["value"])
        for m in mine
        if m["unit"] == "Gb/s" and m["name"].startswith("qos.")
    }
    series = [
        Series(SWEEP_LABELS[before], tuple((i, found[before][t]) for i, t in enumerate(tests)))
    ]
    if any(t in qos for t in tests):
        series.append(Series("with QoS", tuple((i, qos.get(t, 0.0)) for i, t in enumerate(tests))))
    rate = line_rate(measurements, target)
    title = "Bandwidth vs line rate"
    if rate is not None:
        title += f" (red line: {rate:g} Gb/s)"
    if tests and len(series) == 1:
        title += "; no run with QoS yet"
    return Chart(
        "bandwidth", title, "perftest (4 QPs)", "Gb/s",
        tuple(series) if tests else (),
        "Bandwidth vs line rate: nothing measured yet (the baseline records baseline.ib_*_bw).",
        bars=True, categories=tuple(t.removesuffix(".q4") for t in tests), reference=rate,
    )  # fmt: skip


def qp_sweep_chart(measurements: list[Measurement], target: str) -> Chart:
    """Bandwidth against the number of QPs, one line per run (baseline, with QoS; phase 6's
    host run only while there is no baseline)."""
    runs: dict[str, dict[int, float]] = {}
    for m in _mine(measurements, target):
        if m["unit"] == "Gb/s" and (match := _SWEEP.match(m["name"])):
            qps = int((m.get("labels") or {}).get("qps") or match["qps"])
            runs.setdefault(match["prefix"], {})[qps] = float(m["value"])
    if "baseline" in runs:
        runs.pop("host", None)
    series = tuple(
        Series(SWEEP_LABELS[prefix], tuple((float(q), v) for q, v in sorted(runs[prefix].items())))
        for prefix in ("host", "baseline", "qos")
        if prefix in runs
    )
    counts = sorted({q for run in runs.values() for q in run})
    return Chart(
        "qp-sweep", "QP sweep: bandwidth vs QPs (red: line rate)", "QPs", "Gb/s", series,
        "QP sweep: nothing measured yet (phase 6 and the baseline record *.qp_sweep.qN).",
        reference=line_rate(measurements, target),
        x_ticks=tuple((float(q), str(q)) for q in counts),
    )  # fmt: skip


def size_text(size: int) -> str:
    """8 -> '8B', 1048576 -> '1M', 17179869184 -> '16G' (binary prefixes, as nccl-tests'
    -b/-e take them)."""
    for shift, unit in ((30, "G"), (20, "M"), (10, "K")):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return f"{size}B"


def nccl_chart(measurements: list[Measurement], target: str) -> Chart:
    """NCCL all_reduce bus bandwidth against the message size, on a log2 axis: x is
    log2(bytes), its ticks read as sizes."""
    runs: dict[str, dict[int, float]] = {}
    for m in _mine(measurements, target):
        if match := _NCCL.match(m["name"]):
            size = int((m.get("labels") or {}).get("bytes") or match["bytes"])
            runs.setdefault(match["run"], {})[size] = float(m["value"])
    series = tuple(
        Series(
            NCCL_LABELS[run],
            tuple((math.log2(size), v) for size, v in sorted(runs[run].items()) if size > 0),
        )
        for run in ("nvlink", "all_reduce")
        if run in runs
    )
    sizes = sorted({s for run in runs.values() for s in run if s > 0})
    step = max(1, math.ceil(len(sizes) / MAX_TICKS))
    ticks = tuple((math.log2(s), size_text(s)) for s in sizes[::step])
    return Chart(
        "nccl", "NCCL all_reduce bus bandwidth vs message size", "message size (log2)", "GB/s",
        series,
        "NCCL bus bandwidth: nothing measured yet (the NCCL steps record nccl.*.busbw.BYTES).",
        x_ticks=ticks,
    )  # fmt: skip


def charts(measurements: list[Measurement], target: str) -> tuple[Chart, Chart, Chart]:
    """The three charts of one node, in the screen's order."""
    return (
        bandwidth_chart(measurements, target),
        qp_sweep_chart(measurements, target),
        nccl_chart(measurements, target),
    )


def chart_targets(measurements: list[Measurement]) -> list[str]:
    """The targets with something to plot, in the order they were measured; the first
    target measured when none has."""
    targets = list(dict.fromkeys(m["target"] for m in measurements))
    plotted = [t for t in targets if not all(c.empty for c in charts(measurements, t))]
    return plotted or targets[:1]
