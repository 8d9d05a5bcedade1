"""Issue #28 point 9: a failed verification names what differs, field by field (expected
and found), not the whole state read back, and points at no diff that is not there."""

from __future__ import annotations

import io

from frontend.headless import HeadlessFrontEnd
from steps.common import check_host_files
from steps.qos.model import FACTORY, PortQos
from tests.test_qos import run_lab, step_findings
from wizard.artifacts import host_file
from wizard.model import Severity
from wizard.probe import Report


async def test_a_port_without_pfc_names_pfc_expected_and_found_and_nothing_else(tmp_path):
    frontend = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
    outcome, _ = await run_lab(tmp_path, frontend, "pfc-not-applied")
    finding = next(f for f in step_findings(outcome, "qos.apply") if f.check == "T08.qos-ens5f1np1")
    assert finding.severity is Severity.FAIL
    # In the words of the one QoS definition (steps/qos/operations.py), as apply-qos.sh
    # says it: what was found, then what is wanted, of the one field that differs.
    assert finding.message == (
        "ens5f1np1 QoS differs from the desired state: PFC per priority: "
        "prio-pfc 0:off 1:off 2:off 3:off 4:off 5:off 6:off 7:off, "
        "not prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off"
    )
    assert "diff" not in finding.remediation
    flags, pfc = finding.evidence[:2]  # of the priv flags only the one QoS depends on
    assert flags.excerpt.split() == ["fw-lldp-agent", ":", "off"]
    assert pfc.command.startswith("dcb -j pfc show dev ens5f1np1")
    assert "--redo qos.apply@gpu-b300-01" in finding.remediation


def test_differences_are_per_field():
    wanted = PortQos(False, (3,), ((24, 3),), tuple(range(8)), (50, 0, 0, 50, 0, 0, 0, 0))
    assert wanted.differences(wanted) == []
    assert FACTORY.differences(wanted) == [
        "fw-lldp-agent: expected off, found on",
        "pfc-on-priorities: expected [3], found []",
        "dscp-prio: expected [24:3], found []",
        "prio-tc: expected 0:0 1:1 2:2 3:3 4:4 5:5 6:6 7:7, found 0:0 1:0 2:0 3:0 4:0 5:0 6:0 7:0",
        "tc-bw: expected 0:50 1:0 2:0 3:50 4:0 5:0 6:0 7:0, found 0:100 1:0 2:0 3:0 4:0 5:0 6:0 7:0",
    ]
    unreadable = PortQos(None, (3,), ((24, 3),), None, (50, 0, 0, 50, 0, 0, 0, 0))
    assert unreadable.differences(wanted) == [
        "fw-lldp-agent: expected off, found nothing (unreadable)",
        "prio-tc: expected 0:0 1:1 2:2 3:3 4:4 5:5 6:6 7:7, found nothing (unreadable)",
    ]


class _Files:
    """A step context whose host holds ``files`` (path -> content)."""

    def __init__(self, files: dict[str, str]) -> None:
        self.files = files

    async def read_file(self, path: str) -> str | None:
        return self.files.get(path)


async def test_a_host_file_that_differs_shows_its_changed_lines_found_and_expected():
    wanted = host_file("gpu-1", "/etc/modprobe.d/irdma.conf", "options irdma roce_ena=1\n", "x")
    other = host_file("gpu-1", "/etc/modules-load.d/irdma.conf", "irdma\n", "y")
    ctx = _Files({"/etc/modprobe.d/irdma.conf": "# ours\noptions irdma roce_ena=0\n"})
    report = Report("T02")
    await check_host_files(ctx, report, "files", [wanted, other])
    changed, missing = report.findings
    assert changed.message == (
        "/etc/modprobe.d/irdma.conf differs from what the wizard wants in 3 line(s) "
        "(- found, + expected)"
    )
    assert changed.evidence[0].command == "cat /etc/modprobe.d/irdma.conf"
    assert changed.evidence[0].excerpt.splitlines() == [
        "-# ours", "-options irdma roce_ena=0", "+options irdma roce_ena=1",
    ]  # fmt: skip
    assert missing.message == "/etc/modules-load.d/irdma.conf is missing"
