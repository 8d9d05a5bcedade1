"""The report as an operator opens it: report.md's verdict line and its "Skipped and
waived" section, and report.xlsx's numbers, times, tables and native charts, read back from
the files that real lab runs wrote (``write_report``, as `report` and `demo` call it)."""

from __future__ import annotations

import io
from datetime import datetime
from pathlib import Path
from typing import Any

import openpyxl
import pytest

from frontend.headless import HeadlessFrontEnd
from steps import build_plan
from tests.conftest import K8S_PHASES, MINIMAL_SITE, run_in_lab
from tests.test_honest_skips import WindowKeptShut
from wizard.checkpoint import RunState, load_run, site_state_dir, who_am_i
from wizard.model import GATES
from wizard.report import build_report, verdict_line, write_report
from wizard.site import load_site, parse_site

NODE = "gpu-b300-01"
RMA = "the eighth GPU is out for RMA until 2027-01-15 (ticket 4711)"


async def lab_report(
    tmp_path: Path, frontend, *faults: str, phases=None, waivers=None
) -> tuple[dict[str, Any], str, openpyxl.Workbook]:
    """Run the lab, write the report files, read them back: (report, report.md, workbook)."""
    _, lab = await run_in_lab(tmp_path, frontend, *faults, phases=phases, waivers=waivers)
    site = load_site(lab.site_path)
    report = build_report(load_run(site_state_dir(tmp_path / "state", site)), site, build_plan())
    paths = write_report(report, tmp_path / "report")
    return report, paths[1].read_text(), openpyxl.load_workbook(paths[2])


def quiet() -> HeadlessFrontEnd:
    return HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())


def rows(sheet) -> list[list[Any]]:
    return [[c.value for c in row] for row in sheet.iter_rows()]


def refs(chart) -> list[tuple[str, str, str]]:
    """(title cell, x or category range, value range) of each series of a chart."""
    result = []
    for series in chart.series:
        x = series.xVal if series.xVal is not None else series.cat
        y = series.yVal if series.yVal is not None else series.val
        result.append((series.tx.strRef.f, x.numRef.f if x.numRef else x.strRef.f, y.numRef.f))
    return result


# -- the full run: ready with warnings, every chart drawn -----------------------------------


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """One full lab run shared by the tests that only read its report (a run is ~30 s)."""
    import asyncio

    tmp_path = tmp_path_factory.mktemp("full")
    return asyncio.run(lab_report(tmp_path, quiet()))


def test_a_passing_run_opens_with_its_verdict(full_run):
    _, markdown, _ = full_run
    lines = markdown.splitlines()
    assert lines[0] == "# T00-T17 report: lab"
    # The E810 lab always warns on T11, T12 (GPUDirect over E810) and T14 (no support record).
    assert lines[2] == (
        "**Verdict: ready with warnings** — 3 warn (T11, T12, T14); 15 pass; "
        "5 checks skipped (see Skipped and waived)"
    )
    section = markdown.split("## Skipped and waived", 1)[1].split("\n## ", 1)[0]
    assert "| T11.nccl-path | T11 | gpu-b300-01 | not run: one GPU node" in section
    assert "Skipped steps" not in section and "Waivers" not in section  # none of either


def test_the_workbook_stores_numbers_and_times_as_such(full_run):
    _, _, book = full_run
    gates = book["Gates"]
    assert gates.freeze_panes == "A2"
    assert gates.auto_filter.ref == f"A1:I{1 + len(GATES)}"
    header = [c.value for c in gates[1]]
    assert header[5] == "time (UTC)" and header[7] == "findings"
    for row in range(2, 2 + len(GATES)):
        assert isinstance(gates.cell(row=row, column=6).value, datetime)
        assert isinstance(gates.cell(row=row, column=8).value, int)
        assert gates.cell(row=row, column=5).alignment.wrap_text  # the evidence wraps
    host = book["host"]
    assert host.freeze_panes == "A2" and host.auto_filter.ref == f"A1:F{host.max_row}"
    values = rows(host)[1:]
    assert values and all(isinstance(v[2], int | float) for v in values)
    assert all(isinstance(v[5], datetime) for v in values)
    assert host.column_dimensions["A"].width >= 30


def test_bandwidth_chart_sets_baseline_and_qos_beside_the_line_rate(full_run):
    _, _, book = full_run
    sheet = book["Chart bandwidth"]
    table = rows(sheet)
    assert table[0] == [
        "node and test", "without QoS (baseline), Gb/s", "with QoS, Gb/s", "line rate (port), Gb/s",
    ]  # fmt: skip
    by_test = {r[0]: r[1:] for r in table[1:] if r[0]}
    assert by_test[f"{NODE} ib_write_bw (4 QPs)"] == [96.37, 96.37, 100]
    assert sheet.freeze_panes == "A2" and sheet.auto_filter.ref == "A1:D4"
    (chart,) = sheet._charts
    assert chart.tagname == "barChart"
    assert refs(chart) == [
        (f"'Chart bandwidth'!{col}1", "'Chart bandwidth'!$A$2:$A$4", f"'Chart bandwidth'!${col}$2:${col}$4")
        for col in "BCD"
    ]  # fmt: skip


def test_qp_sweep_chart_plots_bandwidth_against_the_number_of_qps(full_run):
    _, _, book = full_run
    sheet = book["Chart QP sweep"]
    table = rows(sheet)
    assert table[0] == ["QPs", f"baseline {NODE}, Gb/s", f"host {NODE}, Gb/s", f"qos {NODE}, Gb/s"]
    assert [r[0] for r in table[1:4]] == [1, 4, 8]  # numbers, in numeric order
    assert table[1][1] < table[3][1]
    (chart,) = sheet._charts
    assert chart.tagname == "scatterChart"
    assert refs(chart)[0] == (
        "'Chart QP sweep'!B1",
        "'Chart QP sweep'!$A$2:$A$4",
        "'Chart QP sweep'!$B$2:$B$4",
    )
    assert len(chart.series) == 3


def test_nccl_chart_plots_bus_bandwidth_against_message_size(full_run):
    report, _, book = full_run
    recorded = [m for m in report["measurements"] if m["name"].startswith("nccl.nvlink.busbw.")]
    assert len(recorded) == 5  # the lab's nccl-tests table has five sizes
    sheet = book["Chart NCCL busbw"]
    table = rows(sheet)
    assert table[0] == ["message size (B)", f"nvlink {NODE}, GB/s"]
    sizes = [r[0] for r in table[1:6]]
    assert sizes == sorted(sizes) and sizes[0] == 8 and sizes[-1] == 17179869184
    (chart,) = sheet._charts
    assert refs(chart) == [
        ("'Chart NCCL busbw'!B1", "'Chart NCCL busbw'!$A$2:$A$6", "'Chart NCCL busbw'!$B$2:$B$6")
    ]
    assert chart.x_axis.scaling.logBase == 2
    # The per-size rows are the chart's; the gate's key number stays the average.
    t11 = next(g for g in report["gates"] if g["gate"] == "T11")
    assert [n for n in t11["key_numbers"] if "nccl" in n] == ["nccl.nvlink.avg_busbw = 484.5 GB/s"]


# -- a failing run, and one with a skipped window and a waiver ------------------------------


async def test_a_failing_run_is_not_ready_and_names_the_gate_and_node(tmp_path):
    report, markdown, _ = await lab_report(tmp_path, quiet(), "gpu-missing", phases=("preflight",))
    assert markdown.splitlines()[2].startswith(
        "**Verdict: not ready** — 1 gate fails (T00) on gpu-b300-01; "
    )
    assert "ready with" not in markdown.splitlines()[2]
    t00 = next(g for g in report["gates"] if g["gate"] == "T00")
    assert t00["fail_targets"] == [NODE] and not t00["waived"]


async def test_a_skipped_window_and_a_waiver_are_named_with_who_and_why(tmp_path):
    frontend = WindowKeptShut(yes=True, window_open=True, out=io.StringIO())
    report, markdown, book = await lab_report(
        tmp_path, frontend, "gpu-missing", phases=(*K8S_PHASES, "qos"),
        waivers={"T00.gpu-count": RMA, "T01.allocatable": RMA, "T01.dcgm.gpus": RMA},
    )  # fmt: skip
    verdict = markdown.splitlines()[2]
    assert [s["step"] for s in report["skipped_steps"]] == [
        "qos.apply",
        "qos.persist",
        "qos.measure",
    ]
    # qos.apply carries T08 and T10, qos.persist T17: skipped, not passed. The missing GPU
    # fails T00 and then T01 (7 allocatable, DCGM reports 7 GPUs): all waived, counted as
    # waived, not as passes.
    assert verdict.startswith(
        "**Verdict: not ready (incomplete)** — 3 skipped (T08, T10, T17); "
    ), verdict
    assert "; 2 waived (T00, T01);" in verdict and "fail" not in verdict
    assert "| T08 | PFC / ECN | skip |" in markdown
    assert "| T00 | OS / Kubernetes / containerd | warn (1 waived) |" in markdown
    section = markdown.split("## Skipped and waived", 1)[1].split("\n## ", 1)[0]
    me = who_am_i()
    assert (
        f"| qos.apply | {NODE} | T08, T10 | {me} | skipped by the operator: the maintenance "
        "window was not confirmed |"
    ) in section
    assert f"| qos.persist | {NODE} | T08, T17 | the wizard | skipped because qos.apply" in section
    assert f"| T00.gpu-count | T00 | {RMA} | {me} |" in section
    assert f"| {NODE} |" in section.split("| T00.gpu-count |", 1)[1].splitlines()[0]

    sheet = book["Skipped and waived"]
    assert sheet.freeze_panes == "A2" and sheet.auto_filter.ref == f"A1:G{sheet.max_row}"
    table = rows(sheet)
    apply = next(r for r in table if r[1] == "qos.apply")
    assert apply[0] == "skipped step" and apply[4] == me and isinstance(apply[6], datetime)
    waiver = next(r for r in table if r[0] == "waiver" and r[1] == "T00.gpu-count")
    assert waiver[1:3] == ["T00.gpu-count", "T00"] and waiver[5] == RMA
    assert sheet.cell(row=table.index(waiver) + 1, column=6).alignment.wrap_text
    # Nothing measured bandwidth, a QP sweep or NCCL here: no chart, a note instead.
    for name in ("Chart bandwidth", "Chart QP sweep", "Chart NCCL busbw"):
        assert book[name]._charts == [], name
        assert "no chart" in book[name]["A1"].value


# -- the verdict's wording over the cases a lab run cannot reach ----------------------------


def test_every_gate_passing_is_ready():
    site = parse_site(MINIMAL_SITE)
    finding = {"severity": "pass", "message": "ok", "remediation": "", "evidence": []}
    plan = build_plan()

    def record(step):
        return {"state": "done", "finished": "2026-12-01T14:00:00+00:00", "findings": [
            {**finding, "check": f"{gate}.ok", "gate": gate} for gate in step.gates]}  # fmt: skip

    steps = {s.id: {t: record(s) for t in plan.targets(s, site)} for s in plan.steps()}
    report = build_report(RunState.from_json({"updated": "x", "steps": steps}), site, plan)
    assert verdict_line(report) == "**Verdict: ready** — all 18 gates pass"
    assert set(GATES) == {g for s in plan.steps() for g in s.gates}


def test_a_gate_passes_only_when_every_step_that_proves_it_ran():
    """A run stopped in phase 1 printed T11 pass, judged from the IOMMU/ACS preflight alone."""
    site = parse_site(MINIMAL_SITE)
    plan = build_plan()
    acs = {"check": "T11.acs", "gate": "T11", "severity": "pass", "message": "ACS off",
           "remediation": "", "evidence": []}  # fmt: skip
    phase1 = {s.id: {t: {"state": "done", "findings": [acs] if "T11" in s.gates else []}
                     for t in plan.targets(s, site)}
              for s in plan.phase("preflight").steps}  # fmt: skip
    report = build_report(RunState.from_json({"updated": "x", "steps": phase1}), site, plan)
    t11 = next(g for g in report["gates"] if g["gate"] == "T11")
    assert t11["status"] == "partial"
    assert "nccl.all-reduce on gpu-1" in t11["evidence"] and t11["evidence"].startswith(
        "not run yet"
    )
    t13 = next(g for g in report["gates"] if g["gate"] == "T13")
    assert t13["status"] == "not run"
    line = verdict_line(report)
    assert line.startswith("**Verdict: not ready (incomplete)**") and "T11" in line
    assert "partial (" in line and "pass" not in line.split("partial (")[0]
