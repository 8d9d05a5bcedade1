"""The exported apply-qos.sh and rollback-qos.sh, executed in a lab host's real shell
against the driver model (Intel's out-of-tree ice: a `dcb ... set` that changes nothing
is an error): first run, rerun without a change, a kill at every tool call then a rerun,
and the rollback to a captured state; after the script the live step finds nothing."""

from __future__ import annotations

import asyncio
import copy
import os
import shlex
import shutil
import signal

import pytest

from simulator.host import LabHost
from simulator.lab import Lab
from simulator.shell import LabShell
from steps import build_plan
from steps.qos import BootPersistence, PortQos, procedure, rollback_script
from steps.qos.model import live_port
from steps.qos.operations import (
    Reader,
    apply_targets,
    capture,
    capture_text,
    converge,
    parse_capture,
    pending,
    restore_targets,
)
from steps.remote import ssh_command
from tests.conftest import MINIMAL_SITE
from wizard.export import export
from wizard.facts import parse
from wizard.facts.dcb import DcbApp
from wizard.site import load_site, parse_site

SITE = parse_site(MINIMAL_SITE.replace("gpu-1", "gpu-b300-01"))
NODE = SITE.nodes[0]
TOS = "/sys/kernel/config/rdma_cm/irdma0/ports/1/default_roce_tos"
# Tool calls that change a host (every other call only reads).
CHANGING = (("dcb", "set"), ("dcb", "add"), ("dcb", "del"), ("ethtool", "--set-priv-flags"),
            ("nmcli", "connection"), ("ip", "set"), ("networkctl", "reconfigure"), ("tee", ""),
            ("mkdir", ""))  # fmt: skip


def changes(calls: list[tuple[str, list[str]]]) -> list[list[str]]:
    return [argv for _, argv in calls
            if any(argv[0] == tool and (not word or word in argv) for tool, word in CHANGING)]  # fmt: skip


def read_qos(host: LabHost, port: str) -> PortQos:
    """The port as the wizard's own probes read it (the same commands and parsers)."""
    flags = parse("ethtool-priv-flags", host.execute(f"ethtool --show-priv-flags {port}").stdout)
    pfc = parse("dcb-pfc", host.execute(f"dcb -j pfc show dev {port}").stdout)
    app_text = host.execute(f"dcb -j app show dev {port}").stdout
    app = parse("dcb-app", app_text) if app_text.strip() else DcbApp([], [], {})
    ets = parse("dcb-ets", host.execute(f"dcb -j ets show dev {port}").stdout)
    return live_port(pfc, app, ets, flags.flags.get("fw-lldp-agent"))


def reader(host: LabHost) -> Reader:
    """The operations' reads and effects on a lab host, as the live run makes them."""

    async def run(argv: list[str]):
        return host.execute(shlex.join(argv))

    return Reader(run, run)


async def live_pending(host: LabHost) -> list[str]:
    """What the live qos.apply would still change on this host (the function it uses)."""
    return [d for p in NODE.bond.ports for d in await pending(reader(host), apply_targets(SITE, p))]


CAPTURE_FILE = "/var/lib/gpu-node-wizard/qos-capture"


def state(host: LabHost) -> tuple:
    return (tuple(read_qos(host, p.name) for p in host.ports),
            tuple((p.enslaved, p.admin_up) for p in host.ports), host.configfs.get(TOS))  # fmt: skip


@pytest.fixture
async def shell():
    shell = LabShell({})
    await shell.start()
    try:
        yield shell
    finally:
        await shell.stop()


def fresh(shell: LabShell) -> LabHost:
    host = LabHost("gpu-b300-01", "gpu", "10.10.0.21", "192.168.50.21")
    shell.hosts[host.name] = host
    return host


async def test_first_run_then_a_rerun_that_changes_nothing(shell):
    host = fresh(shell)
    first = await shell.run(host, procedure(SITE, NODE))
    assert first.exit_status == 0, first.stderr
    assert changes(shell.calls)
    # The live step, reading the node as it does, finds nothing to change.
    assert await live_pending(host) == []
    assert host.configfs[TOS] == f"{SITE.qos.roce_tos}\n"
    shell.calls.clear()
    second = await shell.run(host, procedure(SITE, NODE))
    assert second.exit_status == 0, second.stderr
    assert changes(shell.calls) == []


async def test_a_naive_rerun_dies_on_the_drivers_no_change_answer(shell):
    """Why every effect is guarded: the out-of-tree ice refuses a set that changes
    nothing, so a script that sets unconditionally fails on its second run."""
    host = fresh(shell)
    assert (await shell.run(host, procedure(SITE, NODE))).exit_status == 0
    host.network.set_enslaved(host.ports[0], False)  # out of the bond: the driver takes DCB
    naive = "#!/bin/sh\nset -e\n" + (
        "dcb pfc set dev ens5f0np0 prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off\n"
    )
    result = await shell.run(host, naive)
    assert result.exit_status == 1
    assert "Attribute write: Unknown error -1\n" in result.stderr


async def test_a_kill_at_every_tool_call_then_a_rerun_converges(shell):
    host = fresh(shell)
    assert (await shell.run(host, procedure(SITE, NODE))).exit_status == 0
    wanted, total = state(host), len(shell.calls)
    for kill_at in range(1, total + 1):
        host = fresh(shell)
        shell.calls.clear()
        shell.kill_at = kill_at
        killed = await shell.run(host, procedure(SITE, NODE))
        shell.kill_at = None
        assert killed.exit_status != 0, kill_at
        rerun = await shell.run(host, procedure(SITE, NODE))
        assert rerun.exit_status == 0, (kill_at, rerun.stderr)
        assert state(host) == wanted, kill_at


async def test_the_rollback_restores_the_captured_state(shell):
    host = fresh(shell)
    before = (
        "#!/bin/sh\nset -e\nfor p in ens5f0np0 ens5f1np1; do\n"
        "  ethtool --set-priv-flags $p fw-lldp-agent off\n"
        "  dcb app add dev $p dscp-prio 26:4\n  dcb pfc set dev $p prio-pfc 4:on\n"
        "  dcb ets set dev $p tc-tsa all:ets tc-bw 0:60 1:0 2:0 3:0 4:40 5:0 6:0 7:0\n"
        "done\n"
    )
    for port in host.ports:
        host.network.set_enslaved(port, False)
    assert (await shell.run(host, before)).exit_status == 0
    host.network.form_bond()
    captured = {p: read_qos(host, p) for p in NODE.bond.ports}
    assert captured["ens5f0np0"].pfc == (4,)
    # What the live run captures (the same operations' reads), before the change.
    live = {p: await capture(reader(host), SITE, p) for p in NODE.bond.ports}
    start = state(host)
    assert (await shell.run(host, procedure(SITE, NODE))).exit_status == 0
    assert state(host) != start
    # The script kept on the node what the live run keeps, ETS (selection and
    # bandwidth) and the priority map included, and the ToS.
    kept, tos = parse_capture(host.files[CAPTURE_FILE])
    assert kept == live and tos == "0"
    assert kept["ens5f0np0"]["ets"] == (
        "tc-tsa 0:ets 1:ets 2:ets 3:ets 4:ets 5:ets 6:ets 7:ets tc-bw 0:60 1:0 2:0 3:0 4:40 5:0 6:0 7:0"
    )
    # A rerun keeps the first capture (what is there now is the script's own doing).
    assert (await shell.run(host, procedure(SITE, NODE))).exit_status == 0
    assert parse_capture(host.files[CAPTURE_FILE])[0] == live
    # The exported rollback (the node's capture) and the one the wizard shows at the
    # window gate (its own capture, embedded) are one script.
    for script in (
        rollback_script(SITE, NODE, None),
        rollback_script(SITE, NODE, capture_text(live, "0")),
    ):
        assert (await shell.run(host, procedure(SITE, NODE))).exit_status == 0
        assert state(host) != start
        for _ in range(2):  # and again: nothing left to do, no error
            result = await shell.run(host, script)
            assert result.exit_status == 0, result.stderr
            assert {p: read_qos(host, p) for p in NODE.bond.ports} == captured
            assert all(p.enslaved for p in host.ports)


def agent_back_host() -> LabHost:
    """The firmware LLDP agent reported on again once the bond re-formed (the agent cannot
    be turned on by command in DSCP mode: this host's flag flips under the script)."""
    host = LabHost("gpu-b300-01", "gpu", "10.10.0.21", "192.168.50.21")
    reregister = host.network.reregister_rdma

    def and_the_agent_back() -> None:
        reregister()
        for port in host.ports:
            port.lldp_agent = True

    host.network.reregister_rdma = and_the_agent_back  # type: ignore[method-assign]
    return host


async def test_the_scripts_verification_reads_back_ets_and_the_lldp_agent(shell):
    """A change that left ETS or the LLDP agent wrong fails the script's own check."""
    host = fresh(shell)
    script = procedure(SITE, NODE)
    assert "effect dcb ets set dev" in script
    broken = script.replace("effect dcb ets set dev", "true")  # on both ports (they must match)
    result = await shell.run(host, broken)
    assert result.exit_status != 0
    assert "ETS (selection and bandwidth per TC): tc-tsa" in result.stderr, result.stderr
    host = agent_back_host()
    shell.hosts[host.name] = host
    result = await shell.run(host, script)
    assert result.exit_status != 0
    message = "the firmware LLDP agent: fw-lldp-agent on, not fw-lldp-agent off"
    assert message in result.stderr, result.stderr


def unbundled_host() -> LabHost:
    """The second port's link is up but LACP did not bundle it: bonding shows it with
    MII up in an aggregator of its own (as when the switch's port-channel lacks it)."""
    host = LabHost("gpu-b300-01", "gpu", "10.10.0.21", "192.168.50.21")
    bonding = host.nic.bonding

    def unbundled() -> str:
        head, _, second = bonding().partition("Slave Interface: ens5f1np1\n")
        return (
            head
            + "Slave Interface: ens5f1np1\n"
            + second.replace("Aggregator ID: 1", "Aggregator ID: 2", 1)
        )

    host.nic.bonding = unbundled  # type: ignore[method-assign]
    return host


async def test_the_wait_for_the_bond_needs_both_ports_in_the_active_aggregator(shell):
    host = unbundled_host()
    shell.hosts[host.name] = host
    assert "MII Status: up" in host.execute("cat /proc/net/bonding/bond1").stdout
    result = await shell.run(host, procedure(SITE, NODE))
    assert result.exit_status != 0
    assert "did not come back within 60 s" in result.stderr


def _runbook_block(runbook: str, step: str, heading: str) -> str:
    """The first ```sh block after ``heading`` in ``step``'s section of RUNBOOK.md."""
    section = runbook.split(f"### {step}:", 1)[1].split("\n### ", 1)[0]
    after = section.split(f"\n{heading}", 1)[1]
    return after.split("```sh\n", 1)[1].split("\n```", 1)[0]


async def test_the_runbooks_rollback_runs_as_written_from_the_export_folder(tmp_path):
    """RUNBOOK.md's rollback for the QoS change is a command, followed mechanically: from
    the export folder, over OpenSSH, into the node's real shell."""
    if shutil.which("ssh") is None:
        if os.environ.get("CI"):
            pytest.fail("ssh is missing: .ci/run installs openssh")
        pytest.skip("ssh not installed")
    async with Lab(tmp_path / "lab") as lab:
        site = load_site(lab.site_path)
        out = tmp_path / "out"
        export(site, build_plan(), out)
        node = site.nodes[0]
        host = lab.hosts[node.name]
        apply = f"{shlex.join([*ssh_command(site, node), 'sh -s'])} < nodes/{node.name}/qos/apply-qos.sh"
        for script in (
            apply,
            _runbook_block((out / "RUNBOOK.md").read_text(), "qos.apply", "Rollback"),
        ):
            process = await asyncio.create_subprocess_shell(
                script, cwd=out, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            _, err = await asyncio.wait_for(process.communicate(), 120)
            assert process.returncode == 0, (script, err.decode())
            if script is apply:
                assert all(p.app == [(24, 3)] for p in host.ports)
    assert all((p.lldp_agent, p.pfc, p.app) == (True, set(), []) for p in host.ports)
    assert all(p.enslaved for p in host.ports) and host.configfs[TOS] == "0\n"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("script", ["apply", "rollback"])
async def test_a_signal_mid_run_still_re_forms_the_bond(shell, signum, script):
    """A kill (SIGTERM) or Ctrl-C (SIGINT) after the ports left the bond: the script's
    EXIT trap puts them back. A hang-up is not a kill: the
    script ignores it and finishes the window (test_a_dropped_session_mid_run_...)."""
    text = procedure(SITE, NODE) if script == "apply" else rollback_script(SITE, NODE, None)
    host = fresh(shell)
    if script == "rollback":
        assert (await shell.run(host, procedure(SITE, NODE))).exit_status == 0
    shell.calls.clear()
    assert (await shell.run(fresh(shell) if script == "apply" else host, text)).exit_status == 0
    # The first DCB change, which runs with both ports out of the bond.
    at = next(i for i, (_, argv) in enumerate(shell.calls, 1)
              if argv[0] == "dcb" and argv[1] in ("set", "add", "del", "pfc", "ets", "app")
              and any(w in argv for w in ("set", "add", "del")))  # fmt: skip
    host = fresh(shell)
    if script == "rollback":
        assert (await shell.run(host, procedure(SITE, NODE))).exit_status == 0
    shell.calls.clear()
    shell.kill_at, shell.kill_signal = at, signum
    try:
        result = await shell.run(host, text)
    finally:
        shell.kill_at, shell.kill_signal = None, signal.SIGKILL
    assert result.exit_status == 128 + signum, result.stderr
    assert "rejoined" in result.stderr
    assert all(p.enslaved and p.admin_up for p in host.ports)


def _first_dcb_change(calls: list[tuple[str, list[str]]]) -> int:
    """The call number of the first DCB change, which runs with both ports out of the bond."""
    return next(i for i, (_, argv) in enumerate(calls, 1)
                if argv[0] == "dcb" and any(w in argv for w in ("set", "add", "del")))  # fmt: skip


@pytest.mark.parametrize("shell_path", ["/bin/dash", "/bin/bash"])
@pytest.mark.parametrize("tty", [False, True], ids=["pipe", "pty"])
@pytest.mark.parametrize("script", ["apply", "rollback"])
async def test_a_dropped_session_mid_run_leaves_the_bond_whole(shell, script, tty, shell_path):
    """host-r2 B1: the SSH session goes away while the ports are out of the bond. Its
    channel is the script's stdout and stderr, so the reader is closed (no signal, as
    OpenSSH's sshd does without a pty; SIGHUP and EIO with one, as under Ansible's -tt),
    not kept open as a kill test does. Both ports must be back in the bond afterwards."""
    if not os.path.exists(shell_path):
        pytest.skip(f"{shell_path} not installed")
    text = procedure(SITE, NODE) if script == "apply" else rollback_script(SITE, NODE, None)

    async def prepared() -> LabHost:
        host = fresh(shell)
        if script == "rollback":
            assert (await shell.run(host, procedure(SITE, NODE))).exit_status == 0
        shell.calls.clear()
        return host

    probe = await prepared()
    assert (await shell.run(probe, text, shell=shell_path)).exit_status == 0
    at = _first_dcb_change(shell.calls)
    host = await prepared()
    result = await shell.run_dropped(host, text, at, tty=tty, shell=shell_path)
    assert all(p.enslaved and p.admin_up for p in host.ports), (result.exit_status, result.stderr)
    assert result.exit_status == 0, result.stderr  # the window is finished, not abandoned


BOOT_UNITS = ("gpu-node-wizard-roce-qos.service", "gpu-node-wizard-roce-tos.service")


async def test_a_rollback_lasts_past_the_next_reboot(shell):
    """host-r2 B2: the boot units qos.persist enabled would apply the QoS again at the next
    boot, after the rollback retired its capture. The rollback disables them; a reboot
    (the driver's software DCB and configfs gone, the enabled units run) then leaves the
    ports as captured."""
    host = fresh(shell)
    captured = state(host)
    assert (await shell.run(host, procedure(SITE, NODE))).exit_status == 0
    for artifact in BootPersistence().artifacts(SITE, NODE):  # as qos.persist installs them
        host.files[artifact.host_path] = artifact.content
    host.state.enabled_units |= set(BOOT_UNITS)
    result = await shell.run(host, rollback_script(SITE, NODE, None))
    assert result.exit_status == 0, result.stderr
    enabled = host.execute(shlex.join(["systemctl", "is-enabled", *BOOT_UNITS]))
    assert enabled.stdout.split() == ["disabled", "disabled"]
    host.reboot()
    await shell.boot(host)
    assert state(host)[:2] == captured[:2]
    assert host.configfs.get(TOS, "0\n") == "0\n"


LEAVES = (("nmcli", "down"), ("ip", "nomaster"))


async def test_a_rollback_with_nothing_to_restore_leaves_the_bond_up(shell):
    """'Safe to run again' means no flap: the second rollback (and one on a node never
    changed) takes no port out of the bond and changes nothing."""
    host = fresh(shell)
    assert (await shell.run(host, procedure(SITE, NODE))).exit_status == 0
    script = rollback_script(SITE, NODE, None)
    first = await shell.run(host, script)
    assert first.exit_status == 0, first.stderr
    after = state(host)
    for _ in range(2):
        shell.calls.clear()
        again = await shell.run(host, script)
        assert again.exit_status == 0, again.stderr
        assert changes(shell.calls) == [], changes(shell.calls)
        assert not [a for _, a in shell.calls if any(a[0] == t and w in a for t, w in LEAVES)]
        assert state(host) == after
    shell.calls.clear()
    untouched = fresh(shell)
    assert (await shell.run(untouched, script)).exit_status == 0
    # Only the ToS is written there (its configfs entry did not exist): no DCB, no bond.
    assert {a[0] for a in changes(shell.calls)} <= {"mkdir", "tee"}, changes(shell.calls)


# Ports as an operator or a DCBX-willing agent might have left them before the change
# (software DCB, the firmware LLDP agent off), each a rollback whose order matters on ice.
BEFORE = {
    # VLAN mode with two TCs: restored with the bandwidth before the map, ice_dcb_bwchk
    # (one TC after the last DSCP entry is deleted) stores TC0 = 100 % and iproute2 then
    # refuses the next `dcb ets set` ("tc-bw sum to 150%").
    "two-tc-vlan": (
        "dcb ets set dev $p prio-tc 3:1 4:1 5:1 6:1 7:1\n"
        "dcb ets set dev $p tc-bw 0:50 1:50 2:0 3:0 4:0 5:0 6:0 7:0\n"
        "dcb pfc set dev $p prio-pfc 3:on\n"
    ),
    # The site's DSCP (24) on another priority: the change removes it, the rollback must
    # remove the change's 24:3 before it adds 24:2 back ("DSCP value ... already user mapped").
    "dscp-24-on-2": "dcb app add dev $p dscp-prio 24:2\ndcb pfc set dev $p prio-pfc 2:on\n",
}


async def _prepared(shell: LabShell, before: str) -> LabHost:
    host = fresh(shell)
    for port in host.ports:
        host.network.set_enslaved(port, False)
    script = "#!/bin/sh\nset -e\nfor p in ens5f0np0 ens5f1np1; do\n"
    script += "  ethtool --set-priv-flags $p fw-lldp-agent off\n" + before + "done\n"
    result = await shell.run(host, script)
    assert result.exit_status == 0, result.stderr
    host.network.form_bond()
    return host


@pytest.mark.parametrize("case", sorted(BEFORE))
@pytest.mark.parametrize("path", ["script", "live"])
async def test_a_rollback_whose_order_matters_restores_the_capture(shell, case, path):
    host = await _prepared(shell, BEFORE[case])
    captured = {p: read_qos(host, p) for p in NODE.bond.ports}
    live = {p: await capture(reader(host), SITE, p) for p in NODE.bond.ports}
    assert (await shell.run(host, procedure(SITE, NODE))).exit_status == 0
    assert {p: read_qos(host, p) for p in NODE.bond.ports} != captured
    if path == "script":
        result = await shell.run(host, rollback_script(SITE, NODE, None))
        assert result.exit_status == 0, result.stderr
    else:  # what the live undo runs, with the ports out of the bond as it takes them
        for port in host.ports:
            host.network.set_enslaved(port, False)
        for port in NODE.bond.ports:
            await converge(reader(host), restore_targets(SITE, port), live[port])
        host.network.form_bond()
    assert {p: read_qos(host, p) for p in NODE.bond.ports} == captured


async def test_a_rollback_to_the_firmware_agent_leaves_pfc_and_ets_to_it(shell):
    """Captured with the firmware LLDP agent on, PFC and ETS were the firmware's (DCBX):
    the rollback removes the change's DSCP entry and turns the agent back on, and sets
    neither (restored in software mode first, they are where ice refuses)."""
    host = fresh(shell)
    assert all(p.lldp_agent for p in host.ports)
    for port in host.ports:  # what the switch's DCBX gave the firmware: two TCs, PFC on 3
        port.dcb.pfc, port.dcb.prio_tc = {3}, [0, 0, 0, 1, 1, 1, 1, 1]
        port.dcb.tc_bw = [50, 50, 0, 0, 0, 0, 0, 0]
    assert (await shell.run(host, procedure(SITE, NODE))).exit_status == 0
    shell.calls.clear()
    result = await shell.run(host, rollback_script(SITE, NODE, None))
    assert result.exit_status == 0, result.stderr
    sets = [argv for argv in changes(shell.calls) if argv[0] == "dcb" and "set" in argv]
    assert sets == []
    assert all(p.lldp_agent for p in host.ports)
    assert ["dcb", "app", "del", "dev", "ens5f0np0", "dscp-prio", "24:3"] in changes(shell.calls)


async def test_a_rollback_killed_at_every_tool_call_then_rerun_restores_the_capture(shell):
    """Issue #24 point 3: the rollback from a two-TC VLAN port (where its order matters),
    killed at each of its tool calls in turn, then run again: the capture is restored
    and the bond is whole."""
    host = await _prepared(shell, BEFORE["two-tc-vlan"])
    captured = {p: read_qos(host, p) for p in NODE.bond.ports}
    assert (await shell.run(host, procedure(SITE, NODE))).exit_status == 0
    changed = copy.deepcopy(host)
    shell.calls.clear()
    assert (await shell.run(host, rollback_script(SITE, NODE, None))).exit_status == 0
    total = len(shell.calls)
    assert total > 10
    for kill_at in range(1, total + 1):
        host = copy.deepcopy(changed)
        shell.hosts[host.name] = host
        shell.calls.clear()
        shell.kill_at = kill_at
        killed = await shell.run(host, rollback_script(SITE, NODE, None))
        shell.kill_at = None
        assert killed.exit_status != 0, kill_at
        rerun = await shell.run(host, rollback_script(SITE, NODE, None))
        assert rerun.exit_status == 0, (kill_at, rerun.stderr)
        assert {p: read_qos(host, p) for p in NODE.bond.ports} == captured, kill_at
        assert all(p.enslaved for p in host.ports), kill_at


async def test_a_successful_rollback_retires_the_capture_so_the_next_window_captures_afresh(shell):
    host = await _prepared(shell, BEFORE["dscp-24-on-2"])
    assert (await shell.run(host, procedure(SITE, NODE))).exit_status == 0
    first = host.files[CAPTURE_FILE]
    assert (await shell.run(host, rollback_script(SITE, NODE, None))).exit_status == 0
    assert CAPTURE_FILE not in host.files
    assert host.files[CAPTURE_FILE + ".restored"] == first
    # The port changes between the windows; the next window captures what is there then.
    for port in host.ports:
        host.network.set_enslaved(port, False)
    again = "#!/bin/sh\nset -e\nfor p in ens5f0np0 ens5f1np1; do\n  dcb pfc set dev $p prio-pfc 5:on\ndone\n"
    assert (await shell.run(host, again)).exit_status == 0
    host.network.form_bond()
    captured = {p: read_qos(host, p) for p in NODE.bond.ports}
    assert (await shell.run(host, procedure(SITE, NODE))).exit_status == 0
    assert host.files[CAPTURE_FILE] != first
    assert (await shell.run(host, rollback_script(SITE, NODE, None))).exit_status == 0
    assert {p: read_qos(host, p) for p in NODE.bond.ports} == captured


async def test_a_rollback_from_a_capture_for_another_dscp_says_so_and_changes_nothing(shell):
    host = await _prepared(shell, BEFORE["dscp-24-on-2"])
    assert (await shell.run(host, procedure(SITE, NODE))).exit_status == 0
    changed = state(host)
    other = SITE.model_copy(update={"qos": SITE.qos.model_copy(update={"dscp": 26})})
    shell.calls.clear()
    result = await shell.run(host, rollback_script(other, other.nodes[0], None))
    assert result.exit_status == 1
    assert "the capture does not match this site's QoS (qos.dscp 26)" in result.stderr
    assert "ens5f0np0: the DSCP entry 26:0" in result.stderr
    assert changes(shell.calls) == [] and state(host) == changed
    assert CAPTURE_FILE in host.files
