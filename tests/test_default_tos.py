"""T08 proves the default ToS: one QoS measurement connects through rdma_cm without -T, so
it takes the RDMA device's default_roce_tos from configfs as AIStor's clients do, and the
lab's perftest puts its packets on priority 3 only when that ToS maps there (DSCP = ToS >> 2,
the port's dscp-prio map)."""

from __future__ import annotations

import io

from frontend.headless import HeadlessFrontEnd
from simulator.host import LabHost
from simulator.perf import PerftestArgs, effective_tos, traffic_priority
from steps.perf.suite import DEFAULT_TOS_EXTRA, judge_default_tos, suite_lines
from tests.conftest import MINIMAL_SITE, findings_of, run_in_lab
from tests.test_qos import UP_TO_QOS
from wizard.model import Severity
from wizard.site import parse_site

TOS_PATH = "/sys/kernel/config/rdma_cm/irdma0/ports/1/default_roce_tos"


def _qos_port_host() -> LabHost:
    host = LabHost(name="gpu-1", role="gpu", mgmt_ip="10.0.0.1", rdma_ip="192.168.50.1")
    for port in host.ports:
        port.dcb.dscp_mode = True
        port.dcb.app.append((24, 3))
        port.dcb.pfc.add(3)
    return host


def test_rdma_cm_without_tos_takes_the_configfs_default_and_maps_dscp_to_priority():
    host = _qos_port_host()
    port = host.ports[0]
    cm = PerftestArgs.parse(["ib_write_bw", "-d", "irdma0", "-R", "192.168.50.200"])
    assert effective_tos(host, cm) == 0  # no configfs value: cma's zeroed default
    host.configfs[TOS_PATH] = "96\n"
    assert effective_tos(host, cm) == 96 and traffic_priority(port, 96) == 3
    assert traffic_priority(port, 104) == 0  # DSCP 26: not in the map
    explicit = PerftestArgs.parse(["ib_write_bw", "-R", "-T", "32", "192.168.50.200"])
    assert effective_tos(host, explicit) == 32  # -T wins over the default
    plain = PerftestArgs.parse(["ib_write_bw", "192.168.50.200"])
    assert effective_tos(host, plain) == 0  # no rdma_cm: perftest's own traffic class


def test_the_runbook_runs_the_default_tos_measurement_without_t():
    site = parse_site(MINIMAL_SITE)
    lines = suite_lines(site, site.nodes[0], qos=True)
    default = [ln for ln in lines if "ib_write_bw" in ln and " -R " in ln and "-T" not in ln]
    assert default, "one QoS measurement takes the default ToS"
    assert DEFAULT_TOS_EXTRA == ["-R"]
    assert not [ln for ln in suite_lines(site, site.nodes[0], qos=False) if " -R " in ln]


async def test_the_default_tos_is_proven_by_priority_3_pauses(tmp_path):
    frontend = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
    outcome, _ = await run_in_lab(tmp_path, frontend, phases=UP_TO_QOS)
    default = findings_of(outcome, "qos.measure")["T08.default-tos"]
    assert default.severity is Severity.PASS, default.message
    assert "without -T" in default.message


async def test_a_wrong_default_tos_fails_t08(tmp_path):
    """The ToS was right when qos.apply verified it; the bond re-formed under the load and
    the re-registered device's default_roce_tos is 0: the -T runs still pause priority 3,
    the default-ToS run does not, and T08 fails naming the configfs file."""
    frontend = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
    outcome, lab = await run_in_lab(tmp_path, frontend, "roce-tos-reset", phases=UP_TO_QOS)
    assert lab.hosts["gpu-b300-01"].configfs.get(TOS_PATH, "0\n") == "0\n"
    default = findings_of(outcome, "qos.measure")["T08.default-tos"]
    assert default.severity is Severity.FAIL, default.message
    assert TOS_PATH in default.message
    assert "with -T 96 the load paused priority 3" in default.message


def test_the_configfs_value_decides_and_pause_counters_are_evidence():
    """FAIL only when default_roce_tos read back after the run is wrong; pause frames that
    disagree with a right value are a WARN (they count a whole priority, not the run)."""
    site = parse_site(MINIMAL_SITE)
    qos = site.qos
    sev = lambda *a: judge_default_tos(qos, TOS_PATH, *a)[0]  # noqa: E731
    right = f"{qos.roce_tos}\n"
    assert sev("0\n", 0, 1187) is Severity.FAIL
    assert sev("0\n", 500, 1187) is Severity.FAIL  # pauses from other traffic do not save it
    assert sev(right, 900, 1187) is Severity.PASS
    assert sev(right, 0, 1187) is Severity.WARN  # right value, counters disagree
    assert sev(right, 0, 0) is Severity.WARN  # nothing congested
    assert sev(None, 900, 1187) is Severity.WARN  # unreadable: evidence only
    message = judge_default_tos(qos, TOS_PATH, "0\n", 0, 1187)[1]
    assert TOS_PATH in message and "reads 0" in message


def test_the_labs_pause_frames_follow_the_load_and_its_direction():
    """Writes pause the sender (XOFF received), reads the receiver's far end; more QPs and
    longer runs congest more. Not one constant for every run."""
    from simulator.perf import pause_frames

    write4 = PerftestArgs.parse(["ib_write_bw", "-q", "4", "-R", "192.168.50.200"])
    write8 = PerftestArgs.parse(["ib_write_bw", "-q", "8", "-R", "192.168.50.200"])
    read4 = PerftestArgs.parse(["ib_read_bw", "-q", "4", "-R", "192.168.50.200"])
    assert pause_frames(write8)[0] > pause_frames(write4)[0] > 0
    assert pause_frames(read4)[0] == 0 and pause_frames(read4)[1] > 0


async def test_the_labs_perftest_refuses_tos_without_rdma_cm_as_perftest_does():
    """perftest_parameters.c: -T without -R exits 1 before connecting, on stdout."""
    from simulator.perf import run_perftest

    host = _qos_port_host()
    out, _err, code = await run_perftest(
        ["ib_write_bw", "-d", "irdma0", "-T", "96", "192.168.50.200"], host, None
    )
    assert code == 1 and "TOS only valid for rdma_cm based QP and RawEth QP" in out
