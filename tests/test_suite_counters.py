"""What the RDMA suite records beside bandwidth (seed 000 section 21, seed 004 section 3):
CPU use and lost packets per QP count, CNP / ECN counters on both ends."""

from __future__ import annotations

import io

from frontend.headless import HeadlessFrontEnd
from simulator.host import LabHost
from simulator.perf import CONGESTED_PACKETS, PerftestArgs, client_output, congestion
from steps import build_plan
from tests.conftest import findings_of
from wizard.facts import parse
from wizard.model import Severity


async def _suite(tmp_path, *faults):
    from frontend.runner import run_engine
    from simulator.lab import Lab
    from wizard.site import load_site

    plan = build_plan()
    only = [s.id for p in plan.phases if p.id in ("irdma", "host-rdma") for s in p.steps]
    async with Lab(tmp_path / "lab", faults=faults) as lab:
        outcome = await run_engine(load_site(lab.site_path), plan, tmp_path / "state",
                                   HeadlessFrontEnd(yes=True, out=io.StringIO()), only=only)  # fmt: skip
    return outcome, tmp_path / "state"


def recorded(state_root, step: str) -> dict:
    import json

    (state,) = state_root.glob("*/state.json")
    return json.loads(state.read_text())["steps"][step]["gpu-b300-01"]["measurements"]


async def test_the_sweep_records_cpu_and_loss_per_qp_count(tmp_path):
    outcome, state = await _suite(tmp_path)
    names = recorded(state, "host-rdma.perftest")
    for qps in (1, 4, 8):
        assert names[f"host.qp_sweep.q{qps}.cpu"]["unit"] == "%"
        assert names[f"host.qp_sweep.q{qps}.lost"]["value"] == 0
    sweep = findings_of(outcome, "host-rdma.perftest")["T07.host-qp-sweep"]
    assert sweep.severity is Severity.PASS and "CPU" in sweep.message and "0 lost" in sweep.message
    congestion_finding = findings_of(outcome, "host-rdma.perftest")["T07.congestion-counters"]
    assert "far end: RxECNMrkd +0" in congestion_finding.message


async def test_drops_during_the_sweep_are_a_warning(tmp_path):
    outcome, _ = await _suite(tmp_path, "port-drops")
    sweep = findings_of(outcome, "host-rdma.perftest")["T07.host-qp-sweep"]
    assert sweep.severity is Severity.WARN and "dropped or corrupted" in sweep.message


def test_duration_mode_reports_cpu_like_perftest():
    host = LabHost("n", "gpu", "10.0.0.1", "192.168.50.1")
    args = PerftestArgs.parse(
        ["ib_write_bw", "-q", "4", "-D", "10", "--cpu_util", "--report_gbits"]
    )
    fact = parse("perftest", client_output(args, host))
    row = fact.results[0]
    assert row["bw_peak"] == 0.0 and row["cpu_util_percent"] > 0  # -D reports no peak
    assert fact.best_bw_gbps > 90


def test_cnps_only_with_ecn_on_and_traffic_in_its_class():
    host = LabHost("n", "peer", "10.0.0.1", "192.168.50.1")
    with_tos = PerftestArgs.parse(["ib_write_bw", "-R", "-T", "96"])
    congestion(host, with_tos, receiver=True)
    assert host.state.hw_counters == {}  # ECN off: nothing marked
    host.configfs["/sys/kernel/config/irdma/irdma0/roce_dcqcn_enable"] = "1\n"
    congestion(host, PerftestArgs.parse(["ib_write_bw"]), receiver=True)
    assert host.state.hw_counters == {}  # no ToS: not the RoCE class
    congestion(host, with_tos, receiver=True)
    assert host.state.hw_counters == {"RxECNMrkd": CONGESTED_PACKETS, "cnpSent": CONGESTED_PACKETS}


def test_hw_counters_are_read_from_grep_output():
    text = (
        "/sys/class/infiniband/irdma0/ports/1/hw_counters/cnpSent:12\n"
        "/sys/class/infiniband/irdma0/ports/1/hw_counters/RxECNMrkd:7\n"
    )
    fact = parse("rdma-hw-counters", text)
    assert (fact.device, fact.port, fact.counters) == ("irdma0", 1, {"cnpSent": 12, "RxECNMrkd": 7})


# -- what the seeds ask to keep: evidence, the support confirmation, release notes ----------


async def test_bond_details_and_the_pcie_tree_are_kept_as_evidence(tmp_path):
    from tests.conftest import K8S_PHASES, run_in_lab

    outcome, _ = await run_in_lab(
        tmp_path, HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO()),
        phases=(*K8S_PHASES, "gpudirect"),
    )  # fmt: skip
    bond = findings_of(outcome, "bond.lacp")["T10.bond-details"]
    assert "bond mode 802.3ad" in bond.evidence[0].excerpt
    assert "xmit_hash_policy layer3+4" in bond.evidence[0].excerpt
    tree = findings_of(outcome, "gpudirect.readiness")["T11.pcie-tree"]
    assert tree.evidence[0].command == "lspci -tv" and "NVIDIA" in tree.evidence[0].excerpt


async def test_the_support_confirmation_is_recorded_or_warned(tmp_path):
    from steps.aistor import SupportConfirmation
    from tests.conftest import MINIMAL_SITE
    from wizard.site import parse_site

    class Ctx:
        def __init__(self, site):
            self.site = site

    missing = await SupportConfirmation().verify(Ctx(parse_site(MINIMAL_SITE)))
    assert missing[0].severity is Severity.WARN and "aistor.support_confirmation" in (
        missing[0].remediation
    )
    text = MINIMAL_SITE.replace(
        "aistor:\n",
        "aistor:\n  support_confirmation: MinIO SR-1234 and NVIDIA NVBug 567, 2026-11\n",
    )
    recorded = await SupportConfirmation().verify(Ctx(parse_site(text)))
    assert recorded[0].severity is Severity.PASS and "SR-1234" in recorded[0].message


def test_the_report_carries_the_release_notes(tmp_path):
    from steps import build_plan as plan
    from tests.conftest import MINIMAL_SITE
    from wizard.report import build_report, markdown
    from wizard.site import parse_site

    report = build_report(None, parse_site(MINIMAL_SITE), plan())
    assert report["notes"][0]["topic"] == "DCGM Exporter metrics"
    assert "## Notes" in markdown(report) and "DCGM Exporter 4.6.0-4.8.3" in markdown(report)
