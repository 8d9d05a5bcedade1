"""RoCE QoS: the commands (valid iproute2 syntax), the maintenance flow in the lab with its
refusals and rollback, the boot unit, and a reboot that survives the wizard being killed."""

from __future__ import annotations

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

from steps import build_plan
from steps.qos import FACTORY, PortQos, dcb_batch, desired_port, port_commands, restore_commands
from tests.conftest import K8S_PHASES, MINIMAL_SITE, REPO, run_in_lab, served_lab
from tests.engine_world import ScriptedFrontEnd
from wizard.engine import DecisionRequired
from wizard.events import Answer, Reply
from wizard.export import export
from wizard.headless import HeadlessFrontEnd
from wizard.lab.host import LabHost, Result
from wizard.model import Severity
from wizard.site import load_site, parse_site

SITE = parse_site(MINIMAL_SITE)


def _port_after(commands: list[list[str]], start: PortQos = FACTORY, *, bonded: bool = False):
    """Run commands on a lab port the way the ice driver answers them (wizard/lab/dcb.py);
    the resulting port state, the answers, and the kernel log."""
    host = LabHost("gpu-1", "gpu", "10.0.0.1", "192.168.50.1")
    port = host.ports[0]
    port.enslaved = bonded
    port.lldp_agent = start.lldp_agent is not False
    for dscp, prio in start.dscp_prio:
        port.dcb.dscp_mode = True
        port.dcb.app.append((dscp, prio))
        port.dcb.prio_tc = list(range(8))
    port.dcb.pfc.update(start.pfc)
    answers = [host.execute(shlex.join(c)) for c in commands]
    ets = json.loads(host.execute("dcb -j ets show dev ens5f0np0").stdout)
    state = PortQos(
        port.lldp_agent, tuple(sorted(port.dcb.pfc)), tuple(sorted(port.dcb.app)),
        tuple(ets["prio_tc"]), tuple(ets["tc_bw"]),
    )  # fmt: skip
    return state, answers, host.kernel_log


def test_from_a_factory_port_the_driver_ends_in_the_desired_state():
    commands = port_commands(SITE, "ens5f0np0", FACTORY)
    state, answers, log = _port_after(commands)
    assert all(a.exit_status == 0 for a in answers), answers
    assert state == desired_port(SITE)
    assert state.tc_bw == (50, 0, 0, 50, 0, 0, 0, 0)  # the RoCE TC has a guaranteed share
    assert "Non-contiguous TCs - Disabling DCB" not in log
    # The ice order: LLDP agent off, the DSCP entry (switches to DSCP mode, resets ETS),
    # then PFC, ETS last; never a prio-tc.
    assert [c[:3] for c in commands] == [
        ["ethtool", "--set-priv-flags", "ens5f0np0"], ["dcb", "app", "add"],
        ["dcb", "pfc", "set"], ["dcb", "ets", "set"],
    ]  # fmt: skip
    assert not any("prio-tc" in c for c in commands)


def test_the_old_order_leaves_the_port_lossy_in_the_driver_model():
    """What the wizard sent before: PFC, then `ets prio-tc 3:3` (TCs 0 and 3, a gap), then
    the DSCP entry. The driver disables DCB on the gap and the DSCP entry resets ETS."""
    old = [
        ["ethtool", "--set-priv-flags", "ens5f0np0", "fw-lldp-agent", "off"],
        ["dcb", "pfc", "set", "dev", "ens5f0np0", "prio-pfc", *[f"{p}:{'on' if p == 3 else 'off'}" for p in range(8)]],
        ["dcb", "ets", "set", "dev", "ens5f0np0", "prio-tc", *[f"{p}:{3 if p == 3 else 0}" for p in range(8)]],
        ["dcb", "app", "add", "dev", "ens5f0np0", "dscp-prio", "24:3"],
    ]  # fmt: skip
    state, _, log = _port_after(old)
    assert "Non-contiguous TCs - Disabling DCB" in log
    assert state.pfc == () and state.tc_bw == (100, 0, 0, 0, 0, 0, 0, 0)
    assert state != desired_port(SITE)


def test_each_command_can_run_twice_and_conflicts_are_removed_first():
    live = PortQos(False, (3,), ((24, 2), (46, 5)), tuple(range(8)), (100,) + (0,) * 7)
    commands = port_commands(SITE, "ens5f0np0", live)
    assert commands.index(["dcb", "app", "del", "dev", "ens5f0np0", "dscp-prio", "24:2"]) < (
        commands.index(["dcb", "app", "add", "dev", "ens5f0np0", "dscp-prio", "24:3"])
    )
    assert not any(c[0] == "ethtool" for c in commands)  # LLDP agent already off
    done = desired_port(SITE)
    assert port_commands(SITE, "ens5f0np0", done) == []  # nothing left to do
    # The driver refuses a second add of the same entry: the commands never repeat one.
    twice = port_commands(SITE, "ens5f0np0", FACTORY)
    _, answers, _ = _port_after(twice + [c for c in twice if c[2] == "add"])
    assert answers[-1].stderr == "Attribute write: File exists\n"


def test_a_bonded_port_refuses_dcb_changes():
    _, answers, _ = _port_after(port_commands(SITE, "ens5f0np0", FACTORY), bonded=True)
    assert [a.exit_status for a in answers[1:]] == [1, 1, 1]
    assert all(a.stderr == "Attribute write: Invalid argument\n" for a in answers[1:])


def test_restore_puts_back_what_was_there():
    commands = restore_commands("ens5f0np0", desired_port(SITE), FACTORY)
    state, answers, log = _port_after(commands, desired_port(SITE))
    assert all(a.exit_status == 0 for a in answers), answers
    assert state == FACTORY
    assert "Switched QoS to L2 VLAN mode" in " ".join(log)
    assert commands[-1] == ["ethtool", "--set-priv-flags", "ens5f0np0", "fw-lldp-agent", "on"]


def _dcb_lines() -> list[list[str]]:
    lines = []
    for live in (FACTORY, PortQos(False, (3,), ((24, 2),), None)):
        lines += [c[1:] for c in port_commands(SITE, "lo", live) if c[0] == "dcb"]
    lines += [c[1:] for c in restore_commands("lo", desired_port(SITE), FACTORY) if c[0] == "dcb"]
    batch = dcb_batch(port_commands(SITE, "lo", FACTORY), "lo")
    lines += [line.split() for line in batch.splitlines() if not line.startswith("#")]
    return lines


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


def test_export_has_batches_procedure_rollback_unit_and_switch_sheets(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text(MINIMAL_SITE)
    out = tmp_path / "out"
    export(load_site(path), build_plan(), out)
    base = out / "nodes/gpu-1"
    batch = (base / "qos/dcb-ens5f0np0.batch").read_text()
    assert (
        "app add dev ens5f0np0 dscp-prio 24:3" in batch
        and "pfc set dev ens5f0np0 prio-pfc" in batch
    )
    apply = (base / "qos/apply-qos.sh").read_text()
    assert "nmcli connection down" in apply and "networkctl reconfigure" in apply
    assert "fw-lldp-agent on" in (base / "qos/rollback-qos.sh").read_text()
    unit = (base / "host/etc/systemd/system/gpu-node-wizard-roce-qos.service").read_text()
    assert (
        "After=sys-subsystem-net-devices-ens5f0np0.device" in unit
        and "Before=network-pre.target" in unit
    )
    assert "ExecStart=/usr/local/sbin/gpu-node-wizard-roce-qos" in unit
    boot = (base / "host/usr/local/sbin/gpu-node-wizard-roce-qos").read_text()
    assert "PORTS='ens5f0np0 ens5f1np1'" in boot and "TC_BW='0:50 1:0 2:0 3:50" in boot
    tos_unit = (base / "host/etc/systemd/system/gpu-node-wizard-roce-tos.service").read_text()
    assert "After=network-online.target" in tos_unit
    for sheet in ("intent.md", "arista-eos.txt", "cisco-nxos.txt"):
        text = (out / "cluster/switch" / sheet).read_text()
        assert "24" in text and "3" in text


# -- the maintenance flow in the lab -------------------------------------------------------------

UP_TO_QOS = (*K8S_PHASES, "qos")


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
    assert "gpu-node-wizard-roce-qos.service" in host.enabled_units
    node = lab.cluster.node("gpu-b300-01")
    assert not node["spec"].get("unschedulable")
    checks = {f.check: f for f in step_findings(outcome, "qos.apply")}
    assert checks["T08.qos-identical"].severity is Severity.PASS
    assert checks["T10.lacp"].severity is Severity.PASS
    # The ports left the bond through NetworkManager (which owns bond1 on RHEL) for the
    # change, and the ToS was written after the bond re-formed (a re-registered device
    # starts at 0).
    commands = host.commands
    assert commands.index("nmcli connection down bond1-port1") < commands.index(
        "dcb app add dev ens5f0np0 dscp-prio 24:3"
    )
    assert not any(c.endswith("nomaster") for c in commands)
    tos_write = max(i for i, c in enumerate(commands) if "default_roce_tos" in c and "printf" in c)
    assert tos_write > commands.index("nmcli connection up bond1-port2")


async def test_raw_ip_under_network_manager_is_undone_and_the_change_refused(tmp_path):
    """The old way (`ip link set PORT nomaster` with NetworkManager owning bond1): NM puts
    the port back at once, and the driver then refuses DCB on the still-bonded port."""
    host = LabHost("gpu-1", "gpu", "10.0.0.1", "192.168.50.1")
    host.execute("ip link set dev ens5f0np0 nomaster")
    assert host.ports[0].enslaved
    assert "released from controller device bond1" in " ".join(host.kernel_log)
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


async def test_ssh_over_bond1_is_refused_before_any_question(tmp_path):
    frontend = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
    outcome, lab = await run_lab(tmp_path, frontend, "ssh-over-bond1")
    refusal = next(f for f in step_findings(outcome, "qos.apply") if f.check == "T10.ssh-path")
    assert refusal.severity is Severity.FAIL and refusal.message.startswith("refused:")
    assert "oob_host" in refusal.remediation
    host = lab.hosts["gpu-b300-01"]
    assert all(p.enslaved for p in host.ports)
    assert not lab.cluster.node("gpu-b300-01")["spec"].get("unschedulable")


async def test_failed_verification_rolls_back_and_leaves_the_node_cordoned(tmp_path):
    frontend = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
    outcome, lab = await run_lab(tmp_path, frontend, "pfc-not-applied")
    assert outcome.summary.results[("qos.apply", "gpu-b300-01")].value == "failed"
    findings = {f.check: f for f in step_findings(outcome, "qos.apply")}
    assert findings["T08.qos-ens5f1np1"].severity is Severity.FAIL
    assert findings["T08.rollback"].message == "rolled back to the captured previous QoS"
    host = lab.hosts["gpu-b300-01"]
    for port in host.ports:  # the factory state is back on both ports, and the bond is whole
        assert port.pfc == set() and port.app == [] and port.enslaved and port.admin_up
    assert lab.cluster.node("gpu-b300-01")["spec"]["unschedulable"] is True


# -- reboot, with the wizard killed while it waits ---------------------------------------------------


def test_reboot_survives_the_wizard_being_killed_and_resumed(tmp_path):
    site = tmp_path / "lab" / "site.yaml"
    state = tmp_path / "state"
    command = [sys.executable, "-m", "wizard.cli", "run", str(site), "--headless", "--yes",
               "--maintenance-window-open", "--step", "operate.reboot", "--state-dir", str(state)]  # fmt: skip
    with served_lab(site):
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
        real = host.cmd_dcb

        def dcb(args):
            if args[:2] == ["ets", "set"]:
                return Result(stderr="Attribute write: Invalid argument\n", exit_status=1)
            return real(args)

        host.cmd_dcb = dcb

    frontend = ScriptedFrontEnd({"rollback": Reply(Answer.ABORT)})
    outcome, lab = await run_in_lab(tmp_path, frontend, phases=UP_TO_QOS, prepare=refuse_ets)
    assert outcome.exit_code != 0
    assert any(d.kind.value == "rollback" for d in frontend.decisions)  # it was offered
    host = lab.hosts["gpu-b300-01"]
    assert all(p.enslaved and p.admin_up for p in host.ports)
    assert host.commands.index("nmcli connection up bond1-port1") > host.commands.index(
        "nmcli connection down bond1-port1"
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
