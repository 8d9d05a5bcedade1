"""Measurements, the GPUDirect verdict and the report, against the lab and real NCCL logs."""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import json
from pathlib import Path

import openpyxl
import pytest

from frontend.headless import HeadlessFrontEnd
from simulator.lab import Lab
from steps import build_plan
from steps.nccl import explain_verdict
from steps.nccl.steps import busbw_by_size
from steps.perf import Endpoint, iperf3_pair, perftest_pair
from tests.conftest import findings_of, fixture_text, run_in_lab
from wizard.checkpoint import Checkpoint, RunState, read_state, site_state_dir
from wizard.engine import Engine
from wizard.engine.runtime import StepRuntime
from wizard.facts import parse
from wizard.model import GATES, Severity
from wizard.probe import Report
from wizard.report import build_report, write_report
from wizard.services import build_services
from wizard.site import load_site


async def full_run(tmp_path: Path, *faults: str):
    frontend = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
    outcome, lab = await run_in_lab(tmp_path, frontend, *faults)
    return outcome, load_site(lab.site_path), lab


findings = findings_of


async def test_full_run_measures_every_gate_and_reports_in_three_formats(tmp_path):
    outcome, site, lab = await full_run(tmp_path)
    assert outcome.exit_code == 0
    verdicts = outcome.gate_verdicts()
    assert all(v.complete for v in verdicts.values()), verdicts  # every gate judged in full
    assert verdicts["T12"] == "warn"  # E810: experimental, never production
    state = read_state(site_state_dir(tmp_path / "state", site))
    host = state["steps"]["host-rdma.perftest"]["gpu-b300-01"]["measurements"]
    assert host["host.qp_sweep.q1"]["value"] < host["host.qp_sweep.q8"]["value"]
    assert host["host.line_rate_port"]["value"] == 100.0
    qos = findings(outcome, "qos.measure")
    assert "pause frames on priority 3" in qos["T08.pfc-counters"].message
    assert "baseline -> with QoS" in qos["T08.vs-baseline"].message
    assert not lab.broker.listeners  # every perftest/iperf3 server was paired or cleaned up

    report = build_report(RunState.from_json(state), site, build_plan())
    paths = write_report(report, tmp_path / "report")
    data = json.loads(paths[0].read_text())
    assert [g["gate"] for g in data["gates"]] == list(GATES)
    assert all(g["status"] != "not run" for g in data["gates"])
    t07 = next(g for g in data["gates"] if g["gate"] == "T07")
    assert any("qp_sweep.q8" in n for n in t07["key_numbers"])
    # NCCL's bus bandwidth per message size is recorded (the curve the measurements screen
    # plots); the gate's key numbers keep to the average.
    nvlink = state["steps"]["nccl.nvlink-baseline"]["gpu-b300-01"]["measurements"]
    sizes = sorted(int(e["labels"]["bytes"]) for n, e in nvlink.items() if ".busbw." in n)
    assert sizes[0] == 8 and sizes[-1] == 17179869184 and len(sizes) == 5
    assert all(nvlink[f"nccl.nvlink.busbw.{s}"]["unit"] == "GB/s" for s in sizes)
    t11 = next(g for g in data["gates"] if g["gate"] == "T11")
    assert any(n.startswith("nccl.nvlink.avg_busbw") for n in t11["key_numbers"])
    assert not any(".busbw." in n for n in t11["key_numbers"])
    markdown = paths[1].read_text()
    assert "| T12 | DMA-BUF GPUDirect | warn |" in markdown and "## Measurements: host" in markdown
    book = openpyxl.load_workbook(paths[2])
    gates = book["Gates"]
    assert gates.max_row == 1 + len(GATES)
    assert [gates.cell(row=r, column=1).value for r in range(2, 20)] == list(GATES)
    assert {"host", "baseline", "qos", "tcp", "nccl", "soak"} <= set(book.sheetnames)


async def test_socket_fallback_is_explained(tmp_path):
    from tests.test_gpudirect_proof import _two_node_run

    outcome, _ = await _two_node_run(tmp_path, "nccl-socket")  # the proof needs two nodes
    nccl = findings(outcome, "nccl.all-reduce")
    assert nccl["T11.nccl-path"].severity is Severity.FAIL
    assert "fell back to sockets" in nccl["T11.nccl-path"].message
    assert "NCCL_IB_HCA" in nccl["T11.nccl-path"].remediation
    assert nccl["T12.gdr"].severity is Severity.FAIL


def test_bus_bandwidth_per_message_size_from_a_real_table():
    text = fixture_text("nccl-tests", "01.txt")
    sizes = busbw_by_size(text)
    rows = parse("nccl-tests", text).rows
    assert sizes == [(r["size"], r["oop_busbw"]) for r in rows]  # out-of-place, every row
    assert sizes[0] == (8, 0.0) and sizes[-1][0] == 8589934592
    assert all(b == 2 * a for (a, _), (b, _) in itertools.pairwise(sizes))
    assert busbw_by_size("no table here") == []


@pytest.mark.parametrize(
    ("profile", "severity", "words"),
    [
        ("intel-e810", Severity.WARN, "Experimental / vendor support risk"),
        ("connectx", Severity.PASS, "production candidate"),
    ],
)
def test_verdict_table_on_a_real_gdr_log(profile, severity, words):
    log = parse("nccl-log", fixture_text("nccl-log", "01.txt"))
    report = Report("T11")
    explain_verdict(log, {"distances": {"GPU0": "PXB"}}, profile, report)
    gdr = next(f for f in report.findings if f.check == "T12.gdr")
    assert gdr.severity is severity and words in gdr.message
    assert next(f for f in report.findings if f.check == "T11.nccl-path").severity is Severity.PASS


def test_host_memory_verdict_names_the_reason():
    text = (
        "h:1:2 [0] NCCL INFO NET/IB : Using [0]irdma0:1/RoCE [RO]; OOB bond1:192.168.50.21<0>\n"
        "h:1:2 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 0 'irdma0' (no module)\n"
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[18000] -> 1[18000] [send] via NET/IB/0\n"
    )
    report = Report("T11")
    explain_verdict(parse("nccl-log", text), {"GPU4": "SYS"}, "intel-e810", report)
    gdr = next(f for f in report.findings if f.check == "T12.gdr")
    assert gdr.severity is Severity.FAIL
    assert (
        "through host memory" in gdr.message
        and "GPU4" in gdr.message
        and "(no module)" in gdr.message
    )


def test_real_socket_log_fails_t11():
    report = Report("T11")
    explain_verdict(parse("nccl-log", fixture_text("nccl-log", "05.txt")), {}, "intel-e810", report)
    assert {f.check: f.severity for f in report.findings}["T11.nccl-path"] is Severity.FAIL


@contextlib.asynccontextmanager
async def step_in_lab(tmp_path, step_id: str, *faults: str):
    """(lab, site, a runtime of ``step_id`` on the lab's GPU node) for a measurement run
    by hand, the services closed after."""
    async with Lab(tmp_path / "lab", faults=faults) as lab:
        site = load_site(lab.site_path)
        services = build_services(site)
        try:
            with Checkpoint.open(tmp_path / "state", site) as checkpoint:
                engine = Engine(
                    site, build_plan(), checkpoint, HeadlessFrontEnd(out=io.StringIO()), services
                )

                def runtime(step: str = step_id) -> StepRuntime:
                    return StepRuntime(site, build_plan().step(step), "gpu-b300-01",
                                       site.nodes[0], services, engine)  # fmt: skip

                yield lab, site, runtime
        finally:
            await services.close()


async def test_failed_client_leaves_no_server_behind(tmp_path):
    async with step_in_lab(tmp_path, "host-rdma.perftest") as (lab, site, runtime):
        client = Endpoint("gpu-b300-01", "no-such-dev", 1, site.nodes[0].rdma_ip)
        server = Endpoint("aistor-01", "irdma0", 1, site.aistor.peers[0].rdma_ip)
        _, problem = await perftest_pair(runtime(), "ib_write_bw", client, server, qps=4)
        assert "not found" in problem
        await asyncio.sleep(0.1)
        assert not lab.broker.listeners  # the server was killed, not left waiting
        peer_commands = lab.hosts["aistor-01"].commands
        assert any(c.startswith("timeout 120 ib_write_bw") for c in peer_commands)
        assert any(c.startswith("pkill -f") for c in peer_commands)


async def test_a_client_started_before_its_server_listens_is_run_again(tmp_path):
    """The peer's SSH session starts the one-shot server a second late (peer-slow-ssh), so
    the client's first connect is refused, as perftest's and iperf3's are; the pair runs
    it again while the server waits, and measures, instead of failing the gate."""
    async with step_in_lab(tmp_path, "host-rdma.perftest", "peer-slow-ssh") as (
        lab, site, runtime,
    ):  # fmt: skip
        client = Endpoint("gpu-b300-01", "irdma0", 1, site.nodes[0].rdma_ip)
        server = Endpoint("aistor-01", "irdma0", 1, site.aistor.peers[0].rdma_ip)
        fact, problem = await perftest_pair(runtime(), "ib_write_bw", client, server, qps=4)
        assert problem == "" and fact is not None and fact.best_bw_gbps
        clients = [c for c in lab.hosts["gpu-b300-01"].commands if c.startswith("ib_write_bw")]
        assert len(clients) >= 2  # refused first, then measured
        gbps, problem = await iperf3_pair(runtime("baseline.tcp"))
        assert problem == "" and gbps
        await asyncio.sleep(0.1)
        assert not lab.broker.listeners


def test_compare_two_reports_side_by_side(tmp_path):
    from tests.conftest import MINIMAL_SITE
    from wizard.site import parse_site

    site = parse_site(MINIMAL_SITE)
    state = {"updated": "x", "steps": {"preflight.containerd": {"gpu-1": {
        "state": "failed", "finished": "t", "findings": [
            {"check": "T00.containerd-version", "gate": "T00", "severity": "fail", "message": "1.7", "remediation": "", "evidence": []}]}}}}  # fmt: skip
    other = build_report(RunState.from_json({"updated": "y", "steps": {}}), site, build_plan())
    other["site"] = "connectx-node"
    (tmp_path / "other.json").write_text(json.dumps(other))
    paths = write_report(
        build_report(RunState.from_json(state), site, build_plan()),
        tmp_path / "out",
        compare=tmp_path / "other.json",
    )
    markdown = paths[1].read_text()
    assert "| gate | what | lab | connectx-node |" in markdown
    assert "| T00 | OS / Kubernetes / containerd | fail | not run |" in markdown
    assert json.loads(paths[0].read_text())["compared_with"]["site"] == "connectx-node"
    sheet = openpyxl.load_workbook(paths[2])["Gates"]
    assert sheet.cell(row=1, column=4).value == "status (connectx-node)"


async def test_fleet_measurements_against_the_shared_peer_take_turns(tmp_path):
    """Five nodes each hold a perftest and an iperf3 server on the one AIStor peer during
    the coexistence run: all at once they exhausted the peer's SSH channels (and would
    have measured a share of its link). They take turns now."""
    from frontend.runner import run_engine
    from wizard.events import StepFinished, StepStarted

    frontend = HeadlessFrontEnd(out=io.StringIO(), yes=True)
    async with Lab(tmp_path / "lab", nodes=5) as lab:
        outcome = await run_engine(
            load_site(lab.site_path), build_plan(), tmp_path / "state", frontend,
            only=["irdma.verify", "baseline.coexistence"], ignore_requires=True,
        )  # fmt: skip
    assert outcome.exit_code == 0, outcome.format()
    order = [
        type(e).__name__
        for e in frontend.events
        if isinstance(e, StepStarted | StepFinished) and e.step == "baseline.coexistence"
    ]
    assert order == ["StepStarted", "StepFinished"] * 5  # one node at a time


def test_the_report_says_which_nodes_got_which_verdict(tmp_path):
    from tests.conftest import fleet_site
    from wizard.site import parse_site

    site = parse_site(fleet_site(8))

    def record(severity: str) -> dict:
        finding = {"check": "T00.gpu-count", "gate": "T00", "severity": severity,
                   "message": "GPUs", "remediation": "", "evidence": []}  # fmt: skip
        return {"state": "done", "finished": "t", "findings": [finding]}

    records = {f"gpu-{i:02d}": record("fail" if i == 3 else "pass") for i in range(1, 9)}
    report = build_report(
        RunState.from_json({"updated": "x", "steps": {"preflight.gpus": records}}),
        site,
        build_plan(),
    )
    t00 = next(g for g in report["gates"] if g["gate"] == "T00")
    assert t00["status"] == "fail"
    assert t00["targets"] == "fail on gpu-03; pass on 7 nodes (gpu-01 ... gpu-08)"
    paths = write_report(report, tmp_path / "out")
    assert "| fail on gpu-03; pass on 7 nodes (gpu-01 ... gpu-08) |" in paths[1].read_text()
    sheet = openpyxl.load_workbook(paths[2])["Gates"]
    assert sheet.cell(row=1, column=7).value == "nodes"
    assert sheet.cell(row=2, column=7).value.startswith("fail on gpu-03")
