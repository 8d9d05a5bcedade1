"""RoCE over the bond is proven active, never assumed: the E810 phase refuses the default DDP
package (no LAG), and the RDMA verification refuses a bond whose two PFs still have their own
RDMA device (no RoCE LAG: the NVM's roce_lag capability or the package's lport extraction
is missing, src/ice_lag.c ice_lag_init_feature_support_flag) instead of taking the first."""

from __future__ import annotations

from simulator.host import LabHost
from steps.e810 import ddp_from_devlink, evaluate_lag_log
from tests.conftest import MINIMAL_SITE
from tests.test_lab_checks import by_check, check_lab
from wizard.model import Severity
from wizard.probe import Report
from wizard.site import parse_site


def _one(outcome, check):
    found = by_check(outcome).get(check)
    assert found, f"no {check} finding"
    return found[0][1]


def test_the_lab_models_ice_lag_feature_support():
    healthy = LabHost(name="g", role="gpu", mgmt_ip="10.0.0.1", rdma_ip="192.168.50.1")
    assert healthy.state.roce_lag and [d for d, _ in healthy.rdma_devices] == ["irdma0"]
    for fault in ("ddp-default", "nvm-no-roce-lag"):
        host = LabHost(name="g", role="gpu", mgmt_ip="10.0.0.1", rdma_ip="192.168.50.1",
                       faults={fault})  # fmt: skip
        assert not host.state.roce_lag
        assert [(d, p.name) for d, p in host.rdma_devices] == [
            ("irdma0", "ens5f0np0"), ("irdma1", "ens5f1np1")
        ]  # fmt: skip


async def test_a_healthy_bond_proves_roce_lag(tmp_path):
    outcome = await check_lab(tmp_path)
    assert _one(outcome, "T02.roce-lag").severity is Severity.PASS
    ddp = _one(outcome, "T02.ddp")
    assert ddp.severity is Severity.PASS and "ICE COMMS Package" in ddp.message


async def test_the_default_ddp_package_fails_and_no_device_is_picked(tmp_path):
    outcome = await check_lab(tmp_path, "ddp-default")
    ddp = _one(outcome, "T02.ddp")
    assert ddp.severity is Severity.FAIL and "does not support LAG" in ddp.message
    assert "comms DDP package" in ddp.remediation
    lag = _one(outcome, "T02.roce-lag")
    assert lag.severity is Severity.FAIL
    assert "irdma0 on ens5f0np0, irdma1 on ens5f1np1" in lag.message
    assert outcome.exit_code == 1


async def test_an_nvm_without_roce_lag_is_caught_by_the_two_devices(tmp_path):
    """The package is right, the NVM lacks the capability: nothing in the log says so, the
    second RDMA device does."""
    outcome = await check_lab(tmp_path, "nvm-no-roce-lag")
    assert _one(outcome, "T02.ddp").severity is Severity.PASS
    lag = _one(outcome, "T02.roce-lag")
    assert lag.severity is Severity.FAIL and "RoCE LAG is not active" in lag.message
    assert "NVM" in lag.remediation
    # No device was taken: nothing later measures on one PF of a half-working LAG.
    assert "T02.rdma-device" not in by_check(outcome)


DEVLINK_INFO = """pci/0000:3b:00.0:
  driver ice
  serial_number 00-01-02-ff-ff-03-04-05
  versions:
      fixed:
        board.id K91258-000
      running:
        fw.mgmt 7.4.13
        fw.undi 1.3534.0
        fw.app.name ICE COMMS Package
        fw.app 1.3.46.0
        fw.app.bundle_id 0xc0000002
      stored:
        fw.undi 1.3534.0
"""


def test_the_ddp_package_is_read_from_devlink_first():
    assert ddp_from_devlink(DEVLINK_INFO) == ("ICE COMMS Package", "1.3.46.0")
    assert ddp_from_devlink(DEVLINK_INFO.replace("ICE COMMS", "ICE OS Default")) == (
        "ICE OS Default Package", "1.3.46.0")  # fmt: skip
    assert ddp_from_devlink("") is None and ddp_from_devlink("x" * 10_000) is None


def test_neither_devlink_nor_dmesg_naming_the_package_is_a_named_warning():
    site = parse_site(MINIMAL_SITE)
    report = Report("T02")
    evaluate_lag_log(site.nodes[0], "[ 1.0] rotated log\n", report, devlink="")
    ddp = next(f for f in report.findings if f.check == "T02.ddp")
    assert ddp.severity is Severity.WARN
    assert "devlink dev info" in ddp.message and "dmesg" in ddp.message
    report = Report("T02")
    evaluate_lag_log(
        site.nodes[0], "", report, devlink=DEVLINK_INFO.replace("ICE COMMS", "ICE OS Default")
    )
    assert next(f for f in report.findings if f.check == "T02.ddp").severity is Severity.FAIL


async def test_a_rotated_kernel_log_still_finds_the_package_through_devlink(tmp_path):
    outcome = await check_lab(tmp_path, "dmesg-rotated", "ddp-default")
    ddp = _one(outcome, "T02.ddp")
    assert ddp.severity is Severity.FAIL and "devlink" in ddp.message, ddp.message


def test_one_rdma_device_with_two_roce_aux_devices_is_not_lag():
    """One RDMA device is necessary, not sufficient: without LAG, irdma failing to probe the
    second PF also leaves one. With RoCE LAG ice unplugs the secondary's auxiliary device
    (ice.roce.N), so two of them and one RDMA device mean no LAG."""
    from steps.irdma import roce_lag_active
    from wizard.facts.rdma import RdmaLink

    site = parse_site(MINIMAL_SITE)
    node = site.nodes[0]
    link = RdmaLink(device="irdma0", port=1, state="ACTIVE", physical_state="LINK_UP",
                    netdev=node.bond.ports[0])  # fmt: skip
    report = Report("T02")
    assert not roce_lag_active(node, [link], report, aux=["ice.roce.0", "ice.roce.1"])
    lag = next(f for f in report.findings if f.check == "T02.roce-lag")
    assert lag.severity is Severity.FAIL and "ice.roce.0, ice.roce.1" in lag.message
    report = Report("T02")
    assert roce_lag_active(node, [link], report, aux=["ice.roce.0", "ice.ptp.0"])
    report = Report("T02")
    assert roce_lag_active(node, [link], report, aux=None)  # unreadable: the device count only
    assert "not readable" in report.findings[0].message


async def test_irdma_failing_on_the_second_pf_is_not_taken_for_lag(tmp_path):
    outcome = await check_lab(tmp_path, "irdma-probe-pf1-failed")
    lag = _one(outcome, "T02.roce-lag")
    assert lag.severity is Severity.FAIL and "ice.roce" in lag.message, lag.message
