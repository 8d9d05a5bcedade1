"""RoCE QoS: the commands (valid iproute2 syntax), the maintenance flow in the lab with its
refusals and rollback, the boot unit, and a reboot that survives the wizard being killed."""

from __future__ import annotations

import asyncio
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from frontend.headless import HeadlessFrontEnd
from simulator.host import LabHost, Result
from steps import build_plan
from steps.qos import FACTORY, PortQos, apply_targets, desired_port, restore_targets
from steps.qos.operations import (
    CAPTURE_FILE,
    Reader,
    capture,
    converge,
    operations,
    parse_capture,
)
from tests.conftest import K8S_PHASES, MINIMAL_SITE, REPO, run_in_lab, served_lab
from tests.engine_world import ScriptedFrontEnd
from wizard.engine import DecisionRequired
from wizard.events import Answer, Reply
from wizard.export import export
from wizard.model import Severity
from wizard.site import load_site, parse_site

SITE = parse_site(MINIMAL_SITE)


def _port(start: PortQos = FACTORY, *, bonded: bool = False) -> LabHost:
    """A lab host whose first port starts in ``start`` (the driver model answers DCB as
    Intel's ice does: simulator/dcb.py)."""
    host = LabHost("gpu-1", "gpu", "10.0.0.1", "192.168.50.1")
    port = host.ports[0]
    port.enslaved = bonded
    port.lldp_agent = start.lldp_agent is not False
    for dscp, prio in start.dscp_prio:
        port.dcb.dscp_mode = True
        port.dcb.app.append((dscp, prio))
        port.dcb.prio_tc = list(range(8))
    port.dcb.pfc.update(start.pfc)
    return host


def _state(host: LabHost) -> PortQos:
    port = host.ports[0]
    ets = json.loads(host.execute("dcb -j ets show dev ens5f0np0").stdout)
    return PortQos(
        port.lldp_agent, tuple(sorted(port.dcb.pfc)), tuple(sorted(port.dcb.app)),
        tuple(ets["prio_tc"]), tuple(ets["tc_bw"]),
    )  # fmt: skip


def _run(host: LabHost, targets, captured=None):
    """The live run's executor (operations.converge) against the host: the effects it
    ran and the driver's answers to them."""
    answers = []

    async def read(argv):
        return host.execute(shlex.join(argv))

    async def effect(argv):
        answers.append(host.execute(shlex.join(argv)))
        return answers[-1]

    effects = asyncio.run(converge(Reader(read, effect), targets, captured))
    return effects, answers


def test_from_a_factory_port_the_driver_ends_in_the_desired_state():
    host = _port()
    commands, answers = _run(host, apply_targets(SITE, "ens5f0np0"))
    assert all(a.exit_status == 0 for a in answers), answers
    assert _state(host) == desired_port(SITE)
    assert _state(host).tc_bw == (50, 0, 0, 50, 0, 0, 0, 0)  # the RoCE TC has a guaranteed share
    assert "Non-contiguous TCs - Disabling DCB" not in host.state.kernel_log
    # The ice order: LLDP agent off, the DSCP entry (switches to DSCP mode, resets ETS),
    # then PFC, ETS last; never a prio-tc.
    assert [c[:3] for c in commands] == [
        ["ethtool", "--set-priv-flags", "ens5f0np0"], ["dcb", "app", "add"],
        ["dcb", "pfc", "set"], ["dcb", "ets", "set"],
    ]  # fmt: skip
    assert not any("prio-tc" in c for c in commands)
    # Run again: every operation's read shows its value, nothing runs (ice would refuse
    # a set that changes nothing, and a second add of the same entry).
    assert _run(host, apply_targets(SITE, "ens5f0np0")) == ([], [])


def test_the_old_order_leaves_the_port_lossy_in_the_driver_model():
    """What the wizard sent before: PFC, then `ets prio-tc 3:3` (TCs 0 and 3, a gap), then
    the DSCP entry. The driver disables DCB on the gap and the DSCP entry resets ETS."""
    old = [
        ["ethtool", "--set-priv-flags", "ens5f0np0", "fw-lldp-agent", "off"],
        ["dcb", "pfc", "set", "dev", "ens5f0np0", "prio-pfc", *[f"{p}:{'on' if p == 3 else 'off'}" for p in range(8)]],
        ["dcb", "ets", "set", "dev", "ens5f0np0", "prio-tc", *[f"{p}:{3 if p == 3 else 0}" for p in range(8)]],
        ["dcb", "app", "add", "dev", "ens5f0np0", "dscp-prio", "24:3"],
    ]  # fmt: skip
    host = _port()
    for command in old:
        host.execute(shlex.join(command))
    assert "Non-contiguous TCs - Disabling DCB" in host.state.kernel_log
    state = _state(host)
    assert state.pfc == () and state.tc_bw == (100, 0, 0, 0, 0, 0, 0, 0)
    assert state != desired_port(SITE)


def test_a_conflicting_mapping_is_removed_first_and_ets_set_after_the_reset():
    """DSCP 24 on another priority: deleted before the add (ice refuses a second mapping);
    that delete is the port's last entry, so DCB resets and PFC, set before, is set again:
    each operation reads the port again (a plan from one read would have skipped PFC)."""
    host = _port(PortQos(False, (3,), ((24, 2),), tuple(range(8)), (100,) + (0,) * 7))
    commands, answers = _run(host, apply_targets(SITE, "ens5f0np0"))
    assert all(a.exit_status == 0 for a in answers), answers
    assert commands.index(["dcb", "app", "del", "dev", "ens5f0np0", "dscp-prio", "24:2"]) < (
        commands.index(["dcb", "app", "add", "dev", "ens5f0np0", "dscp-prio", "24:3"])
    )
    assert not any(c[0] == "ethtool" for c in commands)  # LLDP agent already off
    assert any(c[:3] == ["dcb", "pfc", "set"] for c in commands)
    assert _state(host) == desired_port(SITE)


def test_a_bonded_port_refuses_dcb_changes():
    _, answers = _run(_port(bonded=True), apply_targets(SITE, "ens5f0np0"))
    assert [a.exit_status for a in answers[1:]] == [1, 1, 1]
    assert all(a.stderr == "Attribute write: Invalid argument\n" for a in answers[1:])


def _run_checked(host: LabHost, targets):
    _, answers = _run(host, targets)
    assert all(a.exit_status == 0 for a in answers), answers


def test_the_firmware_agent_off_resets_dcb_and_on_is_refused_in_dscp_mode():
    """ice_set_priv_flags: the agent off loads the software default DCB (what DCBX set is
    gone); Intel's out-of-tree ice refuses the agent on while the port is in DSCP mode."""
    host = _port()
    port = host.ports[0]
    port.dcb.pfc.add(3)  # as DCBX from the switch might have left it
    assert host.execute("ethtool --set-priv-flags ens5f0np0 fw-lldp-agent off").exit_status == 0
    assert port.dcb.pfc == set() and "FW LLDP is disabled" in " ".join(host.state.kernel_log)
    _run_checked(host, apply_targets(SITE, "ens5f0np0"))
    refused = host.execute("ethtool --set-priv-flags ens5f0np0 fw-lldp-agent on")
    assert refused.exit_status == 1 and not port.lldp_agent
    assert "FW Agent not allowed to start" in " ".join(host.state.kernel_log)


def test_restore_puts_back_what_was_there():
    host = _port()
    captured = asyncio.run(_capture(host))
    _run_checked(host, apply_targets(SITE, "ens5f0np0"))
    assert _state(host) == desired_port(SITE)
    commands, answers = _run(host, restore_targets(SITE, "ens5f0np0"), captured)
    assert all(a.exit_status == 0 for a in answers), answers
    assert _state(host) == FACTORY
    assert "Switched QoS to L2 VLAN mode" in " ".join(host.state.kernel_log)
    assert commands[-1] == ["ethtool", "--set-priv-flags", "ens5f0np0", "fw-lldp-agent", "on"]
    assert _run(host, restore_targets(SITE, "ens5f0np0"), captured) == ([], [])


async def _capture(host: LabHost) -> dict[str, str]:
    async def read(argv):
        return host.execute(shlex.join(argv))

    return await capture(Reader(read, read), SITE, "ens5f0np0")


def _dcb_lines() -> list[list[str]]:
    """Every dcb effect the operations can run: the change's, and a rollback's to a
    factory port's values and to a VLAN-mode port with a priority map."""
    lines = []
    for target in apply_targets(SITE, "lo"):
        lines.append(target.op.effect(target.want))
    factory = asyncio.run(_capture(_port()))
    for name, value in factory.items():
        op = next(op for op in operations(SITE, "lo") if op.name == name)
        lines.append(op.effect(value))
        if op.entry is not None:
            lines.append(op.effect("present"))
    lines.append(
        next(t.op for t in restore_targets(SITE, "lo") if t.op.name == "ets-map").effect(
            "prio-tc 0:0 1:0 2:0 3:1 4:1 5:1 6:1 7:1 tc-tsa 0:ets 1:ets 2:strict 3:strict"
            " 4:strict 5:strict 6:strict 7:strict tc-bw 0:50 1:50 2:0 3:0 4:0 5:0 6:0 7:0"
        )
    )
    return [line[1:] for line in lines if line[0] == "dcb"]


def test_every_dcb_line_is_valid_iproute2_syntax():
    """Run each line with dcb against lo in a fresh network namespace: a valid line fails
    only because lo has no DCB ("Operation not supported"), a malformed one with a parse error."""
    dcb = shutil.which("dcb") or "/usr/sbin/dcb"
    probe = (
        subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False)
        if shutil.which("unshare")
        else None
    )
    if not os.path.exists(dcb) or probe is None or probe.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail("dcb (iproute2) and unshare are needed for this test")
        pytest.skip("dcb or unshare -n not available")
    for words in _dcb_lines():
        result = subprocess.run(
            ["unshare", "-n", dcb, *words], capture_output=True, text=True, check=False
        )
        assert result.returncode != 0
        assert "Operation not supported" in result.stderr, (words, result.stderr)
        for bad in ("Usage", "What is", "Invalid", "expected"):
            assert bad not in result.stderr, (words, result.stderr)


def test_export_has_procedure_rollback_unit_and_switch_sheets(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text(MINIMAL_SITE)
    out = tmp_path / "out"
    export(load_site(path), build_plan(), out)
    base = out / "nodes/gpu-1"
    apply = (base / "qos/apply-qos.sh").read_text()
    assert (
        "effect dcb app add dev ens5f0np0 dscp-prio 24:3" in apply
        and "effect dcb pfc set dev ens5f0np0 $want" in apply
    )
    assert "nmcli connection down" in apply and "networkctl reconfigure" in apply
    assert "want=$(captured ens5f0np0 lldp)" in (base / "qos/rollback-qos.sh").read_text()
    unit = (base / "host/etc/systemd/system/gpu-node-wizard-roce-qos.service").read_text()
    assert (
        "After=sys-subsystem-net-devices-ens5f0np0.device" in unit
        and "Before=network-pre.target" in unit
    )
    assert "ExecStart=/usr/local/sbin/gpu-node-wizard-roce-qos" in unit
    boot = (base / "host/usr/local/sbin/gpu-node-wizard-roce-qos").read_text()
    assert "PORTS='ens5f0np0 ens5f1np1'" in boot and "tc-bw 0:50 1:0 2:0 3:50" in boot
    tos_unit = (base / "host/etc/systemd/system/gpu-node-wizard-roce-tos.service").read_text()
    assert "After=network-online.target" in tos_unit
    for sheet in ("intent.md", "arista-eos.txt", "cisco-nxos.txt"):
        text = (out / "cluster/switch" / sheet).read_text()
        assert "24" in text and "3" in text


# -- the maintenance flow in the lab -------------------------------------------------------------

UP_TO_QOS = (*K8S_PHASES, "qos")


def steps_of(plan, phases=UP_TO_QOS) -> list[str]:
    """The ids of the steps of ``phases`` (default: every phase up to QoS), in plan order."""
    return [s.id for p in plan.phases if p.id in phases for s in p.steps]


async def run_lab(tmp_path: Path, frontend, *faults: str):
    return await run_in_lab(tmp_path, frontend, *faults, phases=UP_TO_QOS)


def step_findings(outcome, step: str):
    return [f for (s, _), fs in outcome.summary.findings.items() if s == step for f in fs]


async def test_maintenance_flow_applies_identical_qos_and_uncordons(tmp_path):
    frontend = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
    outcome, lab = await run_lab(tmp_path, frontend)
    assert outcome.exit_code == 0, [
        (f.check, f.message) for _, _, f in outcome.findings if f.severity is Severity.FAIL
    ]
    host = lab.hosts["gpu-b300-01"]
    for port in host.ports:
        assert port.pfc == {3} and port.app == [(24, 3)] and not port.lldp_agent and port.enslaved
    assert host.configfs["/sys/kernel/config/rdma_cm/irdma0/ports/1/default_roce_tos"] == "96\n"
    assert "gpu-node-wizard-roce-qos.service" in host.state.enabled_units
    # The live run kept its capture where apply-qos.sh keeps one, for rollback-qos.sh:
    # the ports as they were (factory: the firmware LLDP agent on, no DSCP entry).
    kept, tos = parse_capture(host.files[CAPTURE_FILE])
    assert kept["ens5f0np0"]["lldp"] == "fw-lldp-agent on" and tos == "0"
    assert kept["ens5f1np1"]["dscp-24:3"] == "absent"
    node = lab.cluster.node("gpu-b300-01")
    assert not node["spec"].get("unschedulable")
    checks = {f.check: f for f in step_findings(outcome, "qos.apply")}
    assert checks["T08.qos-identical"].severity is Severity.PASS
    assert checks["T10.lacp"].severity is Severity.PASS
    # The ports left the bond through NetworkManager (which owns bond1 on RHEL) for the
    # change, and the ToS was written after the bond re-formed (a re-registered device
    # starts at 0).
    commands = host.commands
    port1, port2 = _port_uuids(host)
    assert commands.index(f"nmcli connection down uuid {port1}") < commands.index(
        "dcb app add dev ens5f0np0 dscp-prio 24:3"
    )
    assert not any(c.endswith("nomaster") for c in commands)
    tos_write = max(i for i, c in enumerate(commands) if "default_roce_tos" in c and "printf" in c)
    assert tos_write > commands.index(f"nmcli connection up uuid {port2}")


async def test_raw_ip_under_network_manager_is_undone_and_the_change_refused(tmp_path):
    """The old way (`ip link set PORT nomaster` with NetworkManager owning bond1): NM puts
    the port back at once, and the driver then refuses DCB on the still-bonded port."""
    host = LabHost("gpu-1", "gpu", "10.0.0.1", "192.168.50.1")
    host.execute("ip link set dev ens5f0np0 nomaster")
    assert host.ports[0].enslaved
    assert "released from controller device bond1" in " ".join(host.state.kernel_log)
    host.execute("ethtool --set-priv-flags ens5f0np0 fw-lldp-agent off")
    refused = host.execute("dcb app add dev ens5f0np0 dscp-prio 24:3")
    assert refused.exit_status == 1 and "Invalid argument" in refused.stderr


async def test_no_window_no_change(tmp_path):
    frontend = HeadlessFrontEnd(yes=True, window_open=False, out=io.StringIO())
    with pytest.raises(DecisionRequired, match="--maintenance-window-open"):
        await run_lab(tmp_path, frontend)


class Typist(HeadlessFrontEnd):
    """Approves everything but types the wrong node name at the window."""

    async def decide(self, decision):
        if decision.kind.value == "maintenance-window":
            return Reply(Answer.PROCEED, typed="gpu-b300-99")
        return await super().decide(decision)


async def test_wrong_node_name_skips_and_touches_nothing(tmp_path):
    outcome, lab = await run_lab(tmp_path, Typist(yes=True, window_open=True, out=io.StringIO()))
    assert outcome.summary.results[("qos.apply", "gpu-b300-01")].value == "skipped"
    host = lab.hosts["gpu-b300-01"]
    assert all(p.enslaved and not p.pfc and not p.app for p in host.ports)
    assert not any(c.startswith("dcb ") and " set " in c for c in host.commands)


@pytest.mark.parametrize("fault", ["ssh-over-bond1", "ssh-over-bond1-vlan"])
async def test_ssh_over_bond1_is_refused_before_any_question(tmp_path, fault):
    """On bond1's address, or on a VLAN stacked on bond1 (host-r2 B4: the guard followed
    only "master", and a VLAN's parent is "link")."""
    frontend = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
    outcome, lab = await run_lab(tmp_path, frontend, fault)
    refusal = next(f for f in step_findings(outcome, "qos.apply") if f.check == "T10.ssh-path")
    assert refusal.severity is Severity.FAIL and refusal.message.startswith("refused:")
    assert "oob_host" in refusal.remediation
    host = lab.hosts["gpu-b300-01"]
    assert all(p.enslaved for p in host.ports)
    assert not lab.cluster.node("gpu-b300-01")["spec"].get("unschedulable")


async def test_failed_verification_rolls_back_and_leaves_the_node_cordoned(tmp_path):
    out = io.StringIO()
    frontend = HeadlessFrontEnd(yes=True, window_open=True, out=out)
    outcome, lab = await run_lab(tmp_path, frontend, "pfc-not-applied")
    assert outcome.summary.results[("qos.apply", "gpu-b300-01")].value == "failed"
    findings = {f.check: f for f in step_findings(outcome, "qos.apply")}
    assert findings["T08.qos-ens5f1np1"].severity is Severity.FAIL
    # The rejoin with one port's PFC off: ice refused RDMA on the bond and logged it as
    # ice_lag.c netdev_info does; the step says so at once instead of waiting LACP_WAIT_S
    # for a device that will not come (no wait was reported, by apply nor by the undo,
    # whose rejoin with the captured QoS brings the device back: its rdma-back passes).
    verified, undone = [
        f for f in step_findings(outcome, "qos.apply") if f.check == "T08.rdma-back"
    ]
    assert undone.severity is Severity.PASS
    refused = verified
    assert refused.severity is Severity.FAIL
    assert (
        "'ice 0000:3b:00.0 ens5f0np0: Found netdev ens5f1np1 with different DCB config' "
        "after the rejoin (the bond members' DCB configs differ"
    ) in refused.message
    assert "same DCB" in refused.remediation and "rejoin" in refused.remediation
    assert "waiting for the RDMA device" not in out.getvalue()
    assert findings["T08.rollback"].message == "rolled back to the captured previous QoS"
    host = lab.hosts["gpu-b300-01"]
    # The capture is retired (as rollback-qos.sh retires it): the next window captures afresh.
    assert CAPTURE_FILE not in host.files and f"{CAPTURE_FILE}.restored" in host.files
    for port in host.ports:  # the factory state is back on both ports, and the bond is whole
        assert port.pfc == set() and port.app == [] and port.enslaved and port.admin_up
    assert lab.cluster.node("gpu-b300-01")["spec"]["unschedulable"] is True


# -- reboot, with the wizard killed while it waits ---------------------------------------------------


def test_reboot_survives_the_wizard_being_killed_and_resumed(tmp_path):
    site = tmp_path / "lab" / "site.yaml"
    state = tmp_path / "state"
    command = [sys.executable, "-m", "frontend.cli", "run", str(site), "--headless", "--yes",
               "--maintenance-window-open", "--step", "operate.reboot", "--state-dir", str(state)]  # fmt: skip
    with served_lab(site, "greenfield"):  # the node already in the cluster
        first = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        waiting = None
        while time.monotonic() < deadline and waiting is None:
            try:
                data = json.loads((state / "lab" / "state.json").read_text())
                record = data["steps"].get("operate.reboot", {}).get("gpu-b300-01", {})
                if record.get("state") == "waiting":
                    waiting = record
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        assert waiting is not None, "the reboot step never recorded 'waiting'"
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        before = waiting["extra"]["maintenance"]["capture"]["boot_id"]
        assert before, "the boot id was captured and persisted before the reboot"
        assert waiting["extra"]["maintenance"]["stage"] in ("applying", "verifying"), waiting
        second = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
        assert second.returncode == 0, second.stdout + second.stderr
        assert "operate.reboot was interrupted on gpu-b300-01" in second.stdout
        final = json.loads((state / "lab" / "state.json").read_text())["steps"]["operate.reboot"][
            "gpu-b300-01"
        ]
        assert final["state"] == "done", final
        assert final["extra"]["boot_id_after"] != before
        # Resumed from the capture: the node was rebooted once, not a second time.
        reboots = [
            e
            for e in _journal(state)
            if e.get("command", "").endswith("systemctl reboot") and "intent" in e
        ]
        assert len(reboots) == 1, reboots


def _journal(state: Path) -> list[dict]:
    return [
        json.loads(line)
        for line in (state / "lab" / "journal.jsonl").read_text().splitlines()
        if line.strip()
    ]


async def test_a_failed_change_rejoins_the_bond_even_when_the_rollback_is_declined(tmp_path):
    """bond1 carries the node's InternalIP: a DCB command that fails mid-change must not
    leave the ports out of the bond because the operator declined the rollback."""

    def refuse_ets(lab):
        host = lab.hosts["gpu-b300-01"]
        real = host.nic.cmd_dcb

        def dcb(args):
            if args[:2] == ["ets", "set"]:
                return Result(stderr="Attribute write: Invalid argument\n", exit_status=1)
            return real(args)

        host.nic.cmd_dcb = dcb

    frontend = ScriptedFrontEnd({"rollback": Reply(Answer.ABORT)})
    outcome, lab = await run_in_lab(tmp_path, frontend, phases=UP_TO_QOS, prepare=refuse_ets)
    assert outcome.exit_code != 0
    assert any(d.kind.value == "rollback" for d in frontend.decisions)  # it was offered
    host = lab.hosts["gpu-b300-01"]
    assert all(p.enslaved and p.admin_up for p in host.ports)
    port1, _ = _port_uuids(host)
    assert host.commands.index(f"nmcli connection up uuid {port1}") > host.commands.index(
        f"nmcli connection down uuid {port1}"
    )


def test_the_runbooks_rollback_runs_as_root_through_sudo_when_the_site_says_so():
    """`ssh ... 'sh -s' < rollback-qos.sh` as a non-root user cannot touch DCB: the
    runbook's line takes `sudo -n` exactly when the wizard itself would (ssh.sudo)."""
    from steps.qos.steps import ApplyQos

    def rollback(ssh: str) -> str:
        site = parse_site(MINIMAL_SITE.replace("name: lab\n", f"name: lab\nssh: {ssh}\n"))
        return ApplyQos().rollback(site, site.nodes[0]) or ""

    assert "'sudo -n sh -s' < nodes/gpu-1/qos/rollback-qos.sh" in rollback("{user: ops}")
    assert "'sh -s' < nodes/gpu-1/qos/rollback-qos.sh" in rollback("{user: root}")
    assert "sudo" not in rollback("{user: root}")
    assert "sudo" not in rollback("{user: ops, sudo: false}")


def _port_uuids(host) -> list[str]:
    """The UUIDs of the bond ports' own NetworkManager profiles, in port order."""
    return [uid for _, uid, _, _, bond_port in host.network.nm_connections() if bond_port]


async def test_the_live_window_addresses_the_port_profiles_by_uuid(tmp_path):
    """#24 point 4: with a same-named standalone profile listed first (nm-duplicate-profile),
    the live run leaves and rejoins the bond by the UUIDs `nmcli -t -f NAME,UUID,TYPE,DEVICE
    connection show` lists for the ports, and the bond re-forms."""
    frontend = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
    outcome, lab = await run_lab(tmp_path, frontend, "nm-duplicate-profile")
    host = lab.hosts["gpu-b300-01"]
    assert outcome.exit_code == 0, [
        (f.check, f.message) for _, _, f in outcome.findings if f.severity is Severity.FAIL
    ]
    assert all(p.enslaved and not p.nm_standalone for p in host.ports)
    assert all(f"nmcli connection up uuid {uid}" in host.commands for uid in _port_uuids(host))
    assert not any(c.startswith("nmcli connection up bond1-") for c in host.commands)
