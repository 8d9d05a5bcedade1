"""report.xlsx: the gates, skips and waivers, each measurement series and three charts.

A spreadsheet is opened to sort, filter and plot, so numbers are stored as numbers and
times as datetimes (text would sort "100" before "61"), every table has a frozen header
and an auto-filter, long messages wrap, and the plots people look for are native Excel
charts over a data table on the same sheet: bandwidth against line rate, the QP sweep and
NCCL bus bandwidth against message size. A chart without data is left out with a note
saying why, never drawn empty.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from wizard.report_outside import Section, outside_sections

if TYPE_CHECKING:
    from openpyxl.worksheet.worksheet import Worksheet

TIME_FORMAT = "yyyy-mm-dd hh:mm:ss"
# Perftest bandwidth rows of a series, e.g. baseline.ib_write_bw.q4 (Gb/s).
BANDWIDTH = re.compile(r"^(?P<series>host|baseline|qos)\.(?P<test>ib_\w+_bw)\.q(?P<qps>\d+)$")
QP_SWEEP = re.compile(r"^(?P<series>\w+)\.qp_sweep\.q(?P<qps>\d+)$")
NCCL_SIZE = re.compile(r"^nccl\.(?P<run>\w+)\.busbw\.(?P<size>\d+)$")
# Which series is the measurement without QoS: the baseline phase, else the host phase.
WITHOUT_QOS = ("baseline", "host")


def xlsx(
    report: dict[str, Any], path: Path | BinaryIO, other: dict[str, Any] | None = None
) -> None:
    """Write the workbook (``report`` is already redacted by the caller)."""
    from openpyxl import Workbook

    book = Workbook()
    _gates(book.active, report, other)
    _skips(book.create_sheet("Skipped and waived"), report)
    for section in outside_sections(report):
        _section(book.create_sheet(section.title[:31]), section)
    for name in sorted({m["series"] for m in report["measurements"]}):
        _series(book.create_sheet(title=name[:31]), report, name)
    measurements = report["measurements"]
    _bandwidth_chart(book.create_sheet("Chart bandwidth"), measurements)
    _qp_sweep_chart(book.create_sheet("Chart QP sweep"), measurements)
    _nccl_chart(book.create_sheet("Chart NCCL busbw"), measurements)
    book.save(path)


def as_time(text: str | None) -> datetime | None:
    """An ISO time of the checkpoint as a naive UTC datetime: Excel has no time zones
    (openpyxl refuses aware datetimes), so the headers say UTC instead."""
    if not text:
        return None
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        return None
    if stamp.tzinfo is not None:
        stamp = stamp.astimezone(UTC).replace(tzinfo=None)
    return stamp


def _table(
    sheet: Worksheet,
    header: list[str],
    rows: list[list[Any]],
    widths: list[float],
    wrap: Collection[int] = (),
) -> None:
    """A table from A1: bold frozen header, an auto-filter over it, widths, wrapped text in
    the ``wrap`` columns (1-based) and times shown as times."""
    from openpyxl.styles import Alignment, Font
    from openpyxl.utils import get_column_letter

    sheet.append(header)
    for cell in sheet[1]:
        cell.font = Font(bold=True)
    wrapped = Alignment(wrap_text=True, vertical="top")
    for row in rows:
        sheet.append(row)
        for column, cell in enumerate(sheet[sheet.max_row], start=1):
            if isinstance(cell.value, datetime):
                cell.number_format = TIME_FORMAT
            if column in wrap:
                cell.alignment = wrapped
    sheet.freeze_panes = "A2"
    sheet.auto_filter.ref = f"A1:{get_column_letter(len(header))}{max(sheet.max_row, 2)}"
    for column, width in enumerate(widths, start=1):
        sheet.column_dimensions[get_column_letter(column)].width = width


def _gates(sheet: Worksheet, report: dict[str, Any], other: dict[str, Any] | None) -> None:
    from openpyxl.styles import PatternFill

    fills = {
        "pass": PatternFill("solid", fgColor="C6EFCE"),
        "warn": PatternFill("solid", fgColor="FFEB9C"),
        "fail": PatternFill("solid", fgColor="FFC7CE"),
    }
    sheet.title = "Gates"
    header = ["gate", "what", "status"] + ([f"status ({other['site']})"] if other else [])
    header += ["key numbers", "evidence", "time (UTC)", "nodes", "findings", "waived"]
    theirs = {g["gate"]: g["status"] for g in (other or {}).get("gates", [])}
    rows = []
    for gate in report["gates"]:
        row = [gate["gate"], gate["what"], gate["status"]]
        if other:
            row.append(theirs.get(gate["gate"], ""))
        row += [
            "\n".join(gate["key_numbers"]),
            gate["evidence"],
            as_time(gate["time"]),
            gate.get("targets", ""),
            gate["findings"],
            len(gate.get("waived", [])),
        ]
        rows.append(row)
    shift = 1 if other else 0
    widths = [7, 30, 9] + [12] * shift + [40, 90, 20, 50, 9, 8]
    _table(sheet, header, rows, widths, wrap={2, 4 + shift, 5 + shift, 7 + shift})
    for index, gate in enumerate(report["gates"], start=2):
        fill = fills.get(gate["status"])
        if fill:
            sheet.cell(row=index, column=3).fill = fill


def _skips(sheet: Worksheet, report: dict[str, Any]) -> None:
    """One row per skipped step, check not run and waiver: what, where, who and why."""
    rows: list[list[Any]] = [
        ["skipped step", s["step"], ", ".join(s["gates"]), s["target"], s["by"], s["why"],
         as_time(s["time"])]
        for s in report.get("skipped_steps", [])
    ]  # fmt: skip
    rows += [
        ["check skipped", s["check"], g["gate"], s["target"], "", s["why"], None]
        for g in report["gates"]
        for s in g.get("skipped", [])
        if not s["check"].endswith(".skipped")
    ]
    gate_of = {w["check"]: g["gate"] for g in report["gates"] for w in g.get("waived", [])}
    rows += [
        ["waiver", w["check"], gate_of.get(w["check"], ""), "", w.get("by", ""), w["reason"],
         as_time(w.get("at"))]
        for w in report.get("waivers", [])
    ]  # fmt: skip
    header = ["kind", "step or check", "gates", "node", "by", "why", "time (UTC)"]
    _table(sheet, header, rows, [14, 34, 10, 16, 22, 90, 20], wrap={6})


def _section(sheet: Worksheet, section: Section) -> None:
    """A section of report.md's (wizard/report_outside.py) as a table; its intro above
    when it has no rows, as the Markdown says it."""
    if not section.rows:
        _note(sheet, section.intro)
        return
    _table(sheet, list(section.header), [list(r) for r in section.rows],
           [max(12, min(60, len(h) + 4)) for h in section.header], wrap=set(range(1, 8)))  # fmt: skip


def _series(sheet: Worksheet, report: dict[str, Any], name: str) -> None:
    rows = []
    for m in report["measurements"]:
        if m["series"] == name:
            labels = ", ".join(f"{k}={v}" for k, v in m["labels"].items() if v)
            rows.append(
                [m["name"], m["target"], float(m["value"]), m["unit"], labels, as_time(m["time"])]
            )
    header = ["measurement", "target", "value", "unit", "labels", "time (UTC)"]
    _table(sheet, header, rows, [40, 16, 12, 9, 24, 20], wrap={1})


def _axes(chart: Any, x_title: str, y_title: str) -> None:
    """Axis titles, and axes drawn: openpyxl 3.1 leaves ``delete`` unset, which Excel and
    LibreOffice read as hidden axes (a chart without a scale)."""
    chart.x_axis.title = x_title
    chart.y_axis.title = y_title
    chart.x_axis.delete = False
    chart.y_axis.delete = False


def _note(sheet: Worksheet, text: str) -> None:
    """Why a chart sheet has no chart: better than an empty plot read as 'zero'."""
    sheet["A1"] = text
    sheet.column_dimensions["A"].width = 110


def _bandwidth_chart(sheet: Worksheet, measurements: list[dict[str, Any]]) -> None:
    """Perftest bandwidth per test and node, without and with QoS, next to the port's
    line rate: the bar that falls short of the line is the one to look at."""
    from openpyxl.chart import BarChart, Reference

    values: dict[tuple[str, str, str], float] = {}
    line_rate: dict[str, float] = {}
    for m in measurements:
        if (found := BANDWIDTH.match(m["name"])) and m["unit"] == "Gb/s":
            test = f"{found['test']} ({found['qps']} QPs)"
            values[(m["target"], test, found["series"])] = float(m["value"])
        elif m["name"].endswith(".line_rate_port"):
            line_rate.setdefault(m["target"], float(m["value"]))
    if not values:
        _note(sheet, "No perftest bandwidth in this report (host-rdma, baseline or qos.measure "
                     "did not record one): no chart.")  # fmt: skip
        return
    without = next((s for s in WITHOUT_QOS if any(k[2] == s for k in values)), None)
    with_qos = any(k[2] == "qos" for k in values)
    header = ["node and test"]
    header += [f"without QoS ({without}), Gb/s"] if without else []
    header += ["with QoS, Gb/s"] if with_qos else []
    header += ["line rate (port), Gb/s"]
    rows = []
    for target, test in sorted({(k[0], k[1]) for k in values}):
        row: list[Any] = [f"{target} {test}"]
        row += [values.get((target, test, without))] if without else []
        row += [values.get((target, test, "qos"))] if with_qos else []
        row.append(line_rate.get(target))
        rows.append(row)
    _table(sheet, header, rows, [40] + [24] * (len(header) - 1))
    chart = BarChart()
    chart.type = "col"
    chart.title = "Bandwidth vs line rate"
    _axes(chart, "node and test", "Gb/s")
    last = len(rows) + 1
    data = Reference(sheet, min_col=2, max_col=len(header), min_row=1, max_row=last)
    chart.add_data(data, titles_from_data=True)
    chart.set_categories(Reference(sheet, min_col=1, min_row=2, max_row=last))
    chart.width, chart.height = 24, 12
    sheet.add_chart(chart, f"A{last + 3}")


def _scatter(
    sheet: Worksheet, title: str, x_title: str, y_title: str, columns: int, rows: int
) -> Any:
    """A line-and-marker scatter chart of columns 2.. against column 1 (rows 2..rows+1)."""
    from openpyxl.chart import Reference, ScatterChart, Series

    chart = ScatterChart()
    chart.title = title
    chart.style = 13
    _axes(chart, x_title, y_title)
    xs = Reference(sheet, min_col=1, min_row=2, max_row=rows + 1)
    for column in range(2, columns + 1):
        ys = Reference(sheet, min_col=column, min_row=1, max_row=rows + 1)
        series = Series(ys, xs, title_from_data=True)
        series.marker.symbol = "circle"
        chart.series.append(series)
    chart.width, chart.height = 24, 12
    sheet.add_chart(chart, f"A{rows + 4}")
    return chart


def _pivot(
    points: dict[tuple[str, int], float],
) -> tuple[list[str], list[list[Any]]]:
    """{(line, x): y} as a table: x in the first column, one column per line."""
    lines = sorted({line for line, _ in points})
    rows = [[x, *(points.get((line, x)) for line in lines)] for x in sorted({x for _, x in points})]
    return lines, rows


def _qp_sweep_chart(sheet: Worksheet, measurements: list[dict[str, Any]]) -> None:
    """Bandwidth against the number of queue pairs, one line per series and node: where
    it flattens is how many QPs the link needs."""
    points = {
        (f"{found['series']} {m['target']}", int(found["qps"])): float(m["value"])
        for m in measurements
        if (found := QP_SWEEP.match(m["name"]))
    }
    if not points:
        _note(sheet, "No QP sweep in this report (no *.qp_sweep.qN measurement): no chart.")
        return
    lines, rows = _pivot(points)
    header = ["QPs", *(f"{line}, Gb/s" for line in lines)]
    _table(sheet, header, rows, [8] + [26] * len(lines))
    _scatter(sheet, "QP sweep: bandwidth vs QPs", "queue pairs", "Gb/s", len(header), len(rows))


def _nccl_chart(sheet: Worksheet, measurements: list[dict[str, Any]]) -> None:
    """NCCL all_reduce bus bandwidth against message size (log scale), one line per run
    and node: small messages are latency-bound, the plateau is the path's bandwidth."""
    points = {
        (f"{found['run']} {m['target']}", int(found["size"])): float(m["value"])
        for m in measurements
        if (found := NCCL_SIZE.match(m["name"]))
    }
    if not points:
        _note(sheet, "No NCCL per-size bus bandwidth in this report (nccl.*.busbw.BYTES: the "
                     "nccl-tests table of nccl.nvlink-baseline or nccl.all-reduce): no chart.")  # fmt: skip
        return
    lines, rows = _pivot(points)
    header = ["message size (B)", *(f"{line}, GB/s" for line in lines)]
    _table(sheet, header, rows, [18] + [26] * len(lines))
    chart = _scatter(
        sheet, "NCCL bus bandwidth vs message size", "message size (B, log)", "GB/s",
        len(header), len(rows),
    )  # fmt: skip
    chart.x_axis.scaling.logBase = 2
