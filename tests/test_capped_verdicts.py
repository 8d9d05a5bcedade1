"""Verdicts that know the run was capped (#30 review, points 1-3): against a production
AIStor peer every bandwidth run is rate-limited to aistor.load_rate_gbps, so bandwidth is
judged against the cap (never "below 90 %, try more QPs"), the comparisons the cap makes
meaningless (QP sweep, default-ToS pauses, DMA-BUF vs peermem) are marked so, a run above
the cap fails (the limiter did not hold), and T09's two concurrent tools share the cap."""

from __future__ import annotations

import io

from frontend.headless import HeadlessFrontEnd
from simulator.host import LabHost
from simulator.perf import PerftestArgs, client_output
from steps import build_plan
from steps.perf import judge_bandwidth, over_cap
from steps.perf.suite import judge_default_tos
from tests.conftest import MINIMAL_SITE, findings_of
from wizard.facts import parse
from wizard.model import Severity
from wizard.probe import Report
from wizard.site import parse_site

PEER = "aistor-01"


def _fact(gbps_cap: float | None):
    argv = ["ib_write_bw", "-q", "4", "--report_gbits", "10.0.0.1"]
    if gbps_cap is not None:
        argv[1:1] = [f"--rate_limit={gbps_cap:g}", "--rate_units=g", "--rate_limit_type=SW"]
    return parse(
        "perftest",
        client_output(PerftestArgs.parse(argv), LabHost("n", "gpu", "10.0.0.1", "192.168.50.1")),
    )


def test_bandwidth_under_a_cap_is_judged_against_the_cap():
    report = Report("T06")
    judge_bandwidth(report, "bw", "ib_write_bw (4 QPs)", _fact(25), 100.0, 90, "T06", cap=25.0)
    (finding,) = report.findings
    assert finding.severity is Severity.PASS, finding
    assert "25 Gb/s cap" in finding.message and "line rate is not proven" in finding.message
    # The same number judged against the port would be the misleading "try more QPs".
    report = Report("T06")
    judge_bandwidth(report, "bw", "ib_write_bw (4 QPs)", _fact(25), 100.0, 90, "T06")
    (line,) = report.findings
    assert line.severity is Severity.WARN and "more QPs" in line.remediation


def test_below_the_cap_warns_without_the_more_qps_advice():
    report = Report("T06")
    judge_bandwidth(report, "bw", "ib_write_bw", _fact(10), 100.0, 90, "T06", cap=25.0)
    (finding,) = report.findings
    assert finding.severity is Severity.WARN and "of the cap" in finding.message
    assert "QP" not in finding.remediation


def test_a_run_above_its_cap_or_without_its_limiter_is_a_problem():
    assert over_cap("", 24.6, 25.0) == ""
    assert over_cap("", 97.0, None) == ""  # line rate against a spare peer
    assert "did not hold" in over_cap("", 97.0, 25.0)
    # perftest_resources.c: the limiter's complaint, then an unlimited run.
    unread = "Failed: couldn't acquire cpu frequency for rate limiter.\n"
    assert "CPU frequency" in over_cap(unread, 24.0, 25.0)


def test_default_tos_pauses_under_a_cap_are_not_comparable():
    qos = parse_site(MINIMAL_SITE).qos
    path = "/sys/kernel/config/rdma_cm/irdma0/ports/1/default_roce_tos"
    severity, message, _ = judge_default_tos(qos, path, str(qos.roce_tos), 0, 0, 25.0)
    assert severity is Severity.SKIP and "not comparable" in message
    severity, _, _ = judge_default_tos(qos, path, str(qos.roce_tos), 0, 0)
    assert severity is Severity.WARN
    # A wrong value is a FAIL whatever the cap.
    severity, _, _ = judge_default_tos(qos, path, "0", 0, 0, 25.0)
    assert severity is Severity.FAIL


async def _suite(tmp_path, *faults, commands=None):
    from frontend.runner import run_engine
    from simulator.lab import Lab
    from wizard.site import load_site

    plan = build_plan()
    only = [s.id for p in plan.phases if p.id in ("irdma", "host-rdma") for s in p.steps]
    async with Lab(tmp_path / "lab", faults=faults) as lab:
        text = lab.site_path.read_text()
        lab.site_path.write_text(text.replace("production: false", "production: true"))
        frontend = HeadlessFrontEnd(yes=True, allow_storage_load={PEER}, out=io.StringIO())
        outcome = await run_engine(load_site(lab.site_path), plan, tmp_path / "state", frontend,
                                   only=only)  # fmt: skip
        if commands is not None:
            commands += lab.hosts["gpu-b300-01"].commands
        return outcome


async def test_a_limiter_that_cannot_read_the_cpu_frequency_fails_and_stops_the_load(tmp_path):
    """perftest prints "couldn't acquire cpu frequency for rate limiter" and runs unlimited
    (perftest_resources.c run_iter_bw): that run fails, and no further bandwidth run of the
    suite loads the production peer."""
    commands: list[str] = []
    outcome = await _suite(tmp_path, "perftest-no-cpu-mhz", commands=commands)
    found = findings_of(outcome, "host-rdma.perftest")
    first = found["T06.host-ib_write_bw"]
    assert first.severity is Severity.FAIL and "CPU frequency" in first.message, first
    later = [f for name, f in found.items() if name.startswith("T06.host-ib_") and f is not first]
    assert later and all("not run" in f.message for f in later), later
    limited = [c for c in commands if c.startswith("ib_") and "--rate_limit" in c]
    assert len(limited) == 1, limited


async def test_the_suite_against_a_production_peer_says_what_the_cap_hides(tmp_path):
    outcome = await _suite(tmp_path)
    found = findings_of(outcome, "host-rdma.perftest")
    bandwidth = found["T06.host-ib_write_bw"]
    assert bandwidth.severity is Severity.PASS and "25 Gb/s cap" in bandwidth.message
    sweep = found["T07.host-qp-sweep"]
    assert sweep.severity is Severity.SKIP and "not comparable" in sweep.message
    assert "best with" not in sweep.message


def _total_gbps(command: str, streams_default: int) -> float:
    """The rate one client command line may carry (perftest --rate_limit, iperf3 -b x -P)."""
    words = command.split()
    for word in words:
        if word.startswith("--rate_limit="):
            return float(word.split("=", 1)[1])
    if "-b" in words:
        per_stream = float(words[words.index("-b") + 1].rstrip("M")) / 1000
        streams = int(words[words.index("-P") + 1]) if "-P" in words else streams_default
        return per_stream * streams
    raise AssertionError(f"no rate limit in {command}")


async def test_coexistence_keeps_both_tools_together_under_the_cap(tmp_path):
    """T09 runs perftest and iperf3 at once: what the node ran concurrently sums to at most
    aistor.load_rate_gbps (each half), while the solo runs each take the whole cap."""
    from frontend.runner import run_engine
    from simulator.lab import Lab
    from wizard.site import load_site

    async with Lab(tmp_path / "lab") as lab:
        text = lab.site_path.read_text()
        lab.site_path.write_text(text.replace("production: false", "production: true"))
        site = load_site(lab.site_path)
        frontend = HeadlessFrontEnd(yes=True, allow_storage_load={PEER}, out=io.StringIO())
        outcome = await run_engine(
            site, build_plan(), tmp_path / "state", frontend,
            only=["irdma.verify", "baseline.coexistence"], ignore_requires=True,
        )  # fmt: skip
        commands = lab.hosts["gpu-b300-01"].commands
    assert outcome.summary.results[("baseline.coexistence", "gpu-b300-01")].value == "done", (
        outcome.format()
    )
    clients = [
        c for c in commands
        if c.startswith(("ib_write_bw ", "iperf3 -c ")) and ("-b" in c or "--rate_limit" in c)
    ]  # fmt: skip
    assert len(clients) == 4, clients  # solo iperf3, solo perftest, then both at once
    cap = site.aistor.load_rate_gbps
    streams = site.measurements.tcp_streams
    solo, together = clients[:2], clients[2:]
    assert all(abs(_total_gbps(c, streams) - cap) < 0.2 for c in solo), solo
    assert sum(_total_gbps(c, streams) for c in together) <= cap, together
