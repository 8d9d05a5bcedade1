"""The exported apply-qos.sh and rollback-qos.sh, executed in a lab host's real shell
against the driver model (Intel's out-of-tree ice: a `dcb ... set` that changes nothing
is an error): first run, rerun without a change, a kill at every tool call then a rerun,
and the rollback to a captured state; after the script the live step finds nothing."""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import signal

import pytest

from steps import build_plan
from steps.qos import PortQos, port_commands, procedure, rollback_script
from steps.qos.model import live_port
from steps.remote import ssh_command
from tests.conftest import MINIMAL_SITE
from wizard.export import export
from wizard.facts import parse
from wizard.facts.dcb import DcbApp
from wizard.lab.host import LabHost
from wizard.lab.lab import Lab
from wizard.lab.shell import LabShell
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
    for port in NODE.bond.ports:
        assert port_commands(SITE, port, read_qos(host, port)) == []
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
    host.set_enslaved(host.ports[0], False)  # out of the bond: the driver takes DCB
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
        host.set_enslaved(port, False)
    assert (await shell.run(host, before)).exit_status == 0
    host.form_bond()
    captured = {p: read_qos(host, p) for p in NODE.bond.ports}
    assert captured["ens5f0np0"].pfc == (4,)
    start = state(host)
    assert (await shell.run(host, procedure(SITE, NODE))).exit_status == 0
    assert state(host) != start
    script = rollback_script(SITE, NODE, captured, None)
    for _ in range(2):  # and again: nothing left to do, no error
        result = await shell.run(host, script)
        assert result.exit_status == 0, result.stderr
        assert {p: read_qos(host, p) for p in NODE.bond.ports} == captured
        assert all(p.enslaved for p in host.ports)


async def test_the_scripts_verification_reads_back_ets_and_the_lldp_agent(shell):
    """A change that left ETS or the LLDP agent wrong fails the script's own check."""
    for broken, message in (
        ('    ets_set "$port" "$TC_BW"\n', "ETS is not tc-bw"),
        ('    lldp_off "$port"\n', "the firmware LLDP agent is still on"),
    ):
        host = fresh(shell)
        script = procedure(SITE, NODE)
        assert broken in script
        if "lldp" in broken:
            # DCB refuses changes with the agent on: turn it back on after the change.
            script = script.replace("for port in $PORTS; do verify_port", "for port in $PORTS; do "
                                    "ethtool --set-priv-flags \"$port\" fw-lldp-agent on; done\n"
                                    "for port in $PORTS; do verify_port")  # fmt: skip
        else:
            script = script.replace(broken, "", 1)
        result = await shell.run(host, script)
        assert result.exit_status != 0 and message in result.stderr, result.stderr


class UnbundledHost(LabHost):
    """The second port's link is up but LACP did not bundle it: bonding shows it with
    MII up in an aggregator of its own (as when the switch's port-channel lacks it)."""

    def _read(self, path):
        text = super()._read(path)
        if text and path == f"/proc/net/bonding/{self.bond_name}":
            head, _, second = text.partition("Slave Interface: ens5f1np1\n")
            text = (
                head
                + "Slave Interface: ens5f1np1\n"
                + second.replace("Aggregator ID: 1", "Aggregator ID: 2", 1)
            )
        return text


async def test_the_wait_for_the_bond_needs_both_ports_in_the_active_aggregator(shell):
    host = UnbundledHost("gpu-b300-01", "gpu", "10.10.0.21", "192.168.50.21")
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


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
@pytest.mark.parametrize("script", ["apply", "rollback"])
async def test_a_signal_mid_run_still_re_forms_the_bond(shell, signum, script):
    """A dropped SSH session (SIGHUP) or a kill (SIGTERM) after the ports left the bond:
    the script's EXIT trap puts them back, under dash as under bash."""
    text = procedure(SITE, NODE) if script == "apply" else rollback_script(SITE, NODE, None, "0")
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
    assert "rejoining" in result.stderr
    assert all(p.enslaved and p.admin_up for p in host.ports)


LEAVES = (("nmcli", "down"), ("ip", "nomaster"))


async def test_a_rollback_with_nothing_to_restore_leaves_the_bond_up(shell):
    """'Safe to run again' means no flap: the second rollback (and one on a node never
    changed) takes no port out of the bond and changes nothing."""
    host = fresh(shell)
    assert (await shell.run(host, procedure(SITE, NODE))).exit_status == 0
    script = rollback_script(SITE, NODE, None, "0")
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
