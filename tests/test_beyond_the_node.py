"""Beyond the node: the switch hand-off covers the whole RoCE path (AIStor-facing ports,
ISLs and uplinks as items the operator fills in) and tells the network team that the NIC's
firmware LLDP agent goes off; the MTU is compared end to end; ECN is a change of its own,
only after PFC alone is verified."""

from __future__ import annotations

import io

from frontend.headless import HeadlessFrontEnd
from steps.perf.suite import iboe_mtu
from tests.conftest import MINIMAL_SITE, findings_of, run_in_lab
from tests.test_ecn import DCQCN, UP_TO_ECN, _ecn_on
from wizard.artifacts import render
from wizard.model import Severity, StepState
from wizard.site import parse_site

SITE = parse_site(MINIMAL_SITE)


def _sheets(site) -> dict[str, str]:
    context = {"site": site, "qos": site.qos}
    return {
        name: render(f"switch/{name}", **context)
        for name in ("intent.md.j2", "arista-eos.txt.j2", "cisco-nxos.txt.j2")
    }


def test_the_hand_off_covers_aistor_ports_isls_and_the_lldp_agent():
    sheets = _sheets(SITE)
    peer = SITE.aistor.peers[0]
    for name, text in sheets.items():
        assert peer.name in text and peer.rdma_ip in text, name
        assert "ISL" in text and "uplink" in text.lower(), name
        assert "LLDP" in text, name
    intent = sheets["intent.md.j2"]
    assert "switch port(s): ______________" in intent  # operator-filled items
    assert "firmware LLDP agent is turned OFF" in intent and "DCBX" in intent
    assert "MTU end to end" in intent


def test_with_ecn_on_the_sheets_keep_ecn_out_of_the_pfc_change():
    site = parse_site(MINIMAL_SITE + "qos: {ecn: true}\n")
    for name, text in _sheets(site).items():
        assert "with this change" not in text, name
    ecn = render("switch/ecn.md.j2", site=site, qos=site.qos)
    assert "Only after the wizard verified PFC alone" in ecn


def test_the_roce_mtu_follows_the_netdev_mtu_like_ib_core():
    assert iboe_mtu(9000) == 4096 and iboe_mtu(4200) == 4096 and iboe_mtu(4195) == 2048
    assert iboe_mtu(1500) == 1024 and iboe_mtu(1124) == 1024 and iboe_mtu(1123) == 512


async def test_the_mtu_is_compared_on_both_ends(tmp_path):
    frontend = HeadlessFrontEnd(yes=True, out=io.StringIO())
    phases = ("preflight", "packages", "e810", "bond", "irdma", "host-rdma")
    outcome, _ = await run_in_lab(tmp_path / "ok", frontend, phases=phases)
    mtu = findings_of(outcome, "host-rdma.perftest")
    [finding] = [f for c, f in mtu.items() if c.endswith("rdma-mtu")]
    assert finding.severity is Severity.PASS and "4096 on both ends" in finding.message
    outcome, _ = await run_in_lab(tmp_path / "bad", HeadlessFrontEnd(yes=True, out=io.StringIO()),
                                  "peer-mtu-1500", phases=phases)  # fmt: skip
    [finding] = [f for c, f in findings_of(outcome, "host-rdma.perftest").items()
                 if c.endswith("rdma-mtu")]  # fmt: skip
    assert finding.severity is Severity.FAIL
    assert ": 4096" in finding.message and ": 1024" in finding.message


async def test_ecn_waits_for_pfc_alone_to_be_verified(tmp_path):
    """qos.apply passed, but the PFC-alone measurement failed (the default ToS was lost):
    neither the switch's ECN change nor DCQCN on the node happens."""
    frontend = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
    outcome, lab = await run_in_lab(tmp_path, frontend, "roce-tos-reset", phases=UP_TO_ECN,
                                    prepare=_ecn_on)  # fmt: skip
    results = outcome.summary.results
    assert results[("qos.apply", "gpu-b300-01")] is StepState.DONE
    assert results[("qos.measure", "gpu-b300-01")] is StepState.FAILED
    assert results[("ecn.enable", "gpu-b300-01")] is StepState.BLOCKED
    assert lab.hosts["gpu-b300-01"].configfs.get(DCQCN, "0\n") != "1\n"


async def test_with_pfc_verified_ecn_follows_in_its_own_step(tmp_path):
    frontend = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
    outcome, lab = await run_in_lab(tmp_path, frontend, phases=UP_TO_ECN, prepare=_ecn_on)
    assert findings_of(outcome, "ecn.switch")["T08.ecn-switch"].severity is Severity.PASS
    assert lab.hosts["gpu-b300-01"].configfs[DCQCN] == "1\n"
