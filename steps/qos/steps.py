"""The steps of phase 11: the switch side, the change (a maintenance window), its boot
persistence, and the measurement with QoS on."""

from __future__ import annotations

import asyncio
import shlex
import time
from dataclasses import asdict
from typing import Any

from steps.bond import evaluate_bond
from steps.common import (
    RDMA_LINKS,
    bonding_command,
    check_host_files,
    host_file_changes,
    host_file_lines,
    on_host,
    priv_flags_command,
    q,
    read_lines,
    shown,
    stats_command,
    write_host_files,
)
from steps.preflight import SSH_PATH_READS, evaluate_ssh_path
from steps.qos.commands import (
    DCB_SCRIPT_PATH,
    DCB_UNIT,
    DCB_UNIT_PATH,
    LACP_WAIT_S,
    NETWORK_MANAGER,
    NETWORKD_LINKS,
    NM_DEVICES,
    TOS_SCRIPT_PATH,
    TOS_UNIT,
    TOS_UNIT_PATH,
    boot_dcb_script,
    boot_tos_script,
    dcb_batch,
    dcb_unit,
    dscp_restore_commands,
    join_bond_commands,
    leave_bond_commands,
    port_commands,
    procedure,
    rollback_script,
    settle_commands,
    tos_commands,
    tos_path,
    tos_unit,
)
from steps.qos.model import FACTORY, PortQos, desired_port
from steps.qos.probes import bond_manager, dcb_show, rdma_device, read_port, read_tos
from steps.remote import remote_shell, ssh_command
from wizard.artifacts import Artifact, Target, host_file, render
from wizard.model import Finding, StepKind
from wizard.plan import Change, Scope, Step, StepContext
from wizard.probe import Report, probe, read_all
from wizard.site import Node, Site
from wizard.transports.base import read_file_command

# The key qos.apply records once its verification ran: the QoS it saw in place.
QOS_VERIFIED = "qos_verified"

UNITS = (DCB_UNIT, TOS_UNIT)
IS_ENABLED = ["systemctl", "is-enabled", *UNITS]
DAEMON_RELOAD = ["systemctl", "daemon-reload"]
ENABLE = ["systemctl", "enable", *UNITS]
DRAIN_TIMEOUT_S = 600.0


def state_lines(node: Node, device: str, note: str) -> list[str]:
    """The runbook lines of reading the QoS state back (``read_port`` and ``read_tos``)."""
    lines = []
    for port in node.bond.ports:
        lines += [
            shown(priv_flags_command(port), note),
            *(shown(dcb_show(obj, port)) for obj in ("pfc", "app", "ets")),
        ]
    return [*lines, shown(read_file_command(tos_path(device)))]


def verify_lines(node: Node, device: str = "<rdma-dev>") -> list[str]:
    """The runbook lines of ``ApplyQos.verify`` (also run again after a reboot)."""
    return [
        *state_lines(node, device, "read back: both ports as desired"),
        shown(bonding_command(node), f"until LACP is up again (at most {LACP_WAIT_S:g} s)"),
        shown(RDMA_LINKS, "the RDMA device is ACTIVE again"),
    ]


class SwitchIntent(Step):
    id = "qos.switch"
    title = "Switch side matches: DSCP 24 -> TC3 lossless"
    kind = StepKind.MANUAL
    gates = ("T08",)
    scope = Scope.CLUSTER
    reads = ("qos",)
    explain = (
        "The switch ports facing both E810 ports map DSCP 24 to priority 3 / TC3 with PFC on "
        "priority 3, and DSCP 0 to TC0 with PFC off (ECN later). The operator configures the "
        "switch from the intent sheet and confirms; the wizard records the per-priority pause "
        "counters as the before-load baseline."
    )

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        context = {"site": site, "qos": site.qos}
        return [
            Artifact(
                "cluster/switch/intent.md",
                render("switch/intent.md.j2", **context),
                Target.SWITCH,
                "the switch ports facing every bond member",
                "what the switch must do",
            ),
            Artifact(
                "cluster/switch/arista-eos.txt",
                render("switch/arista-eos.txt.j2", **context),
                Target.SWITCH,
                "Arista EOS (example)",
                "example configuration",
            ),
            Artifact(
                "cluster/switch/cisco-nxos.txt",
                render("switch/cisco-nxos.txt.j2", **context),
                Target.SWITCH,
                "Cisco NX-OS (example)",
                "example configuration",
            ),
        ]

    def instructions(self, site: Site, node: Node | None) -> str:
        qos = site.qos
        return (
            f"Configure the switch ports of every bond member (see cluster/switch/intent.md): DSCP "
            f"{qos.dscp} -> priority {qos.priority} -> TC{qos.traffic_class} with PFC on priority "
            f"{qos.priority}; DSCP 0 -> TC0 with PFC off; ECN only later. Examples for Arista EOS and "
            "Cisco NX-OS are in cluster/switch/. Confirm when the switch is configured."
        )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        """After the operator confirms: every node's pause counters, before any QoS load."""
        return [
            shown(stats_command(port), on_host(n.name, "pause counters before the load"))
            for n in site.nodes
            for port in n.bond.ports
        ]

    async def verify(self, ctx: StepContext) -> list[Finding]:
        report = Report("T08")
        for node in ctx.site.nodes:
            counters = {}
            for port in node.bond.ports:
                stats = await probe(ctx, stats_command(port), "ethtool-s", on=node.name)
                if stats.ok:
                    counters[port] = {p: asdict(v) for p, v in stats.fact.prio_pause.items()}
            ctx.data.setdefault("pause_before", {})[node.name] = counters
            prio = str(ctx.site.qos.priority)
            if all(prio in c for c in counters.values()) and counters:
                report.ok(
                    f"pause-counters-{node.name}",
                    f"{node.name}: per-priority pause counters recorded",
                )
            else:
                report.warn(
                    f"pause-counters-{node.name}",
                    f"{node.name}: the driver shows no per-priority pause counters",
                    "PFC cannot be observed from the host; check on the switch",
                )
        return report.findings


class ApplyQos(Step):
    id = "qos.apply"
    title = "RoCE QoS on both bond ports (maintenance window)"
    kind = StepKind.MAINTENANCE
    gates = ("T08", "T10")
    requires = ("qos.switch",)
    reads = ("qos", "node.bond", "node.oob_host")
    # What the verification saw in place; only a done step keeps it (the engine drops it
    # otherwise), so the steps that build on the change are skipped or blocked without it.
    provides = (QOS_VERIFIED,)
    explain = (
        "Intel's RDMA-over-LAG needs identical QoS on both ports before bonding and refuses "
        "DCB changes while bonded. So: confirm the window and type the node name; refuse if "
        "SSH runs over the bond without an out-of-band address; cordon and drain; release "
        "the ports through whoever manages the bond (NetworkManager port profiles, "
        "systemd-networkd, or ip); per port: the firmware LLDP agent off, DSCP 24 -> "
        "priority 3 (this switches the port to DSCP mode and resets ETS), PFC on priority 3 "
        "only, ETS bandwidth for TC3 and TC0; re-form the bond; wait for the RDMA device "
        "Intel's LAG registers again on it and write ToS 96 there (a re-registered device "
        "starts at 0); verify identical QoS on both ports, the ToS, LACP and RDMA; uncordon. "
        "A failed verification offers the rollback to the captured state."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        if node is None:
            return []
        device = "<rdma-dev>"
        # The change as from a port in factory state; the wizard computes it from the live one.
        per_port = {p: port_commands(site, p, FACTORY) for p in node.bond.ports}
        profiles = {p: f"<profile-of-{p}>" for p in node.bond.ports}
        name = q(node.name)
        lines = [
            *read_lines(SSH_PATH_READS, "does the SSH session run over the bond?"),
            shown(RDMA_LINKS, "only when irdma.verify recorded no device"),
            *state_lines(node, device, "the live state, kept for the rollback"),
            shown(NM_DEVICES, "who manages the bond: NetworkManager (and its port profiles)?"),
            shown(NETWORKD_LINKS, "or systemd-networkd? (else: plain ip)"),
            f"# from the jump host: kubectl cordon {name}",
            f"# from the jump host: kubectl drain {name} --ignore-daemonsets --delete-emptydir-data --timeout=10m",
            *(
                shown(c, "NetworkManager")
                for c in leave_bond_commands(NETWORK_MANAGER, node, profiles)
            ),
            *(shown(c, "networkd or unmanaged") for c in leave_bond_commands("none", node, {})),
        ]
        for port, commands in per_port.items():
            lines += [f"# {port}", *(shown(c) for c in commands)]
        lines += [
            *(
                shown(c, "NetworkManager")
                for c in join_bond_commands(NETWORK_MANAGER, node, profiles)
            ),
            *(shown(c, "networkd") for c in join_bond_commands("networkd", node, {})),
            *(shown(c, "unmanaged") for c in join_bond_commands("none", node, {})),
            shown(RDMA_LINKS, "the RDMA device Intel's LAG registered again on the bond"),
            *(shown(c) for c in tos_commands(device, site.qos.roce_tos)),
            *verify_lines(node, device),
            f"# from the jump host, once verified: kubectl uncordon {name}",
        ]
        return lines

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        if node is None:
            return []
        base = f"nodes/{node.name}/qos"
        per_port = {p: port_commands(site, p, FACTORY) for p in node.bond.ports}
        files = [
            Artifact(
                f"{base}/dcb-{port}.batch",
                dcb_batch(cmds, port),
                Target.SCRIPT,
                f"`dcb -b` on {node.name}",
                f"the dcb commands for {port}",
            )
            for port, cmds in per_port.items()
        ]
        files += [
            Artifact(
                f"{base}/apply-qos.sh",
                procedure(site, node),
                Target.SCRIPT,
                f"the change on {node.name} (maintenance window)",
                "the ordered procedure",
                mode=0o755,
            ),
            Artifact(
                f"{base}/rollback-qos.sh",
                rollback_script(site, node, None, "0"),
                Target.SCRIPT,
                f"undo on {node.name}",
                "restores the state captured before the change (factory state in a dry run)",
                mode=0o755,
            ),
        ]
        return files

    def rollback(self, site: Site, node: Node | None) -> str | None:
        if node is None:
            return None
        ssh = ssh_command(site, node, oob=True)
        return (
            "# From the export folder, over the node's out-of-band address (the bond goes\n"
            "# down): both ports back to a port's factory state (LLDP agent on, no DSCP entry,\n"
            "# no PFC, TC0 100 %), the ToS to 0. At the window gate the wizard shows and runs\n"
            "# the rollback computed from the node's live state instead.\n"
            f"{shlex.join([*ssh, remote_shell(node)])} < nodes/{node.name}/qos/rollback-qos.sh"
        )

    async def preconditions(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        report = Report("T10")
        connection_read, addrs = await read_all(ctx, *SSH_PATH_READS)
        connection = connection_read.result.stdout.split()
        if not addrs.ok:
            report.unreadable("ssh-path", addrs, "the interface addresses")
            return report.findings
        scratch = Report("T10")
        interface = evaluate_ssh_path(
            ctx.node, connection[2] if len(connection) >= 4 else None, addrs.fact, scratch
        )
        over_bond = addrs.fact.by_name(interface or "") is not None and (
            interface == ctx.node.bond.name
            or addrs.fact.by_name(interface).master == ctx.node.bond.name
        )
        if over_bond and not ctx.node.oob_host:
            report.fail(
                "ssh-path",
                f"refused: the wizard's SSH session to {ctx.node.name} runs over {ctx.node.bond.name}, "
                "which this change takes down",
                "set nodes[].oob_host to an address on another interface (bond0, BMC network) and run again",
            )
        elif over_bond:
            ctx.use_oob = True
            report.ok(
                "ssh-path", f"using the out-of-band address {ctx.node.oob_host} for this change"
            )
        device = await rdma_device(ctx)
        if device is None:
            report.fail(
                "rdma-device",
                "no RDMA device on the bond ports",
                "run the irdma phase first",
                gate="T08",
            )
        else:
            ctx.data["rdma_device"] = device
        return report.findings

    async def _live(self, ctx: StepContext) -> dict[str, PortQos]:
        assert ctx.node is not None
        return {port: (await read_port(ctx, port))[0] for port in ctx.node.bond.ports}

    async def capture(self, ctx: StepContext) -> dict[str, Any]:
        """Both ports' QoS, the RoCE ToS and who manages the bond (with its port profiles),
        as they are: what a rollback restores and how the ports leave and rejoin. The engine
        persists it before the first effect and never captures again on a resume (a port
        whose profile is down mid-change no longer shows it)."""
        device = ctx.data.get("rdma_device") or await rdma_device(ctx)
        live = await self._live(ctx)
        manager, profiles = await bond_manager(ctx)
        return {
            "ports": {p: state.to_json() for p, state in live.items()},
            "tos": await read_tos(ctx, device) if device else None,
            "rdma_device": device,
            "manager": manager,
            "profiles": profiles,
        }

    def rollback_plan(self, site: Site, node: Node | None, capture: dict[str, Any]) -> str | None:
        if node is None:
            return None
        previous = {p: PortQos.from_json(s) for p, s in capture.get("ports", {}).items()}
        if set(previous) != set(node.bond.ports):
            return rollback_script(site, node, None, "0")
        return rollback_script(site, node, previous, capture.get("tos") or "0")

    def actions(self, site: Site, node: Node | None) -> list[str]:
        if node is None:
            return []
        per_port = {p: port_commands(site, p, FACTORY) for p in node.bond.ports}
        lines = [f"leave {node.bond.name} through its manager (NetworkManager / networkd / ip)"]
        for commands in per_port.values():
            lines += [shown(c) for c in commands]
        return [
            *lines,
            f"rejoin {node.bond.name}; wait (at most {LACP_WAIT_S:g} s) for LACP and the RDMA device",
            f"write and read back the RoCE ToS {site.qos.roce_tos} on that device",
            "verify both ports identical, LACP, RDMA ACTIVE",
        ]

    async def changes(self, ctx: StepContext) -> list[Change]:
        assert ctx.node is not None
        capture = ctx.data.get("capture") or await self.capture(ctx)
        device = capture.get("rdma_device") or "<rdma-dev>"
        live = {p: PortQos.from_json(s) for p, s in capture["ports"].items()}
        wanted = desired_port(ctx.site)
        result = [
            Change(
                Artifact(
                    f"nodes/{ctx.node.name}/qos/{port}.state",
                    wanted.render(),
                    Target.HOST_FILE,
                    f"QoS of {port} on {ctx.node.name}",
                    "dcb and LLDP state",
                ),
                live[port].render(),
            )
            for port in ctx.node.bond.ports
        ]
        tos = capture.get("tos")
        result.append(
            Change(
                Artifact(
                    f"nodes/{ctx.node.name}/qos/roce-tos",
                    f"default_roce_tos: {ctx.site.qos.roce_tos}\n",
                    Target.HOST_FILE,
                    f"{tos_path(device)} on {ctx.node.name}",
                    "RoCE ToS (DSCP 24)",
                ),
                None if tos is None else f"default_roce_tos: {tos}\n",
            )
        )
        return result

    async def apply(self, ctx: StepContext, changes: list[Change]) -> None:
        """Converge from what is live now (a resume after a kill runs this again): the ports
        leave the bond only when a port still needs a DCB change, each port gets only the
        commands it still needs, the bond is re-formed in every case, and the ToS is
        written on the device the re-formed bond carries."""
        assert ctx.node is not None
        node = ctx.node
        capture = ctx.data["capture"]
        manager, profiles = capture.get("manager", "none"), capture.get("profiles", {})
        live = await self._live(ctx)
        per_port = {p: port_commands(ctx.site, p, live[p]) for p in node.bond.ports}
        if any(per_port.values()):
            enslaved = await self._enslaved(ctx)
            try:
                for command in leave_bond_commands(manager, node, profiles, enslaved):
                    await ctx.run(command, check=True)
                for port in node.bond.ports:
                    for command in per_port[port]:
                        await ctx.run(command, check=True)
            except Exception:
                # bond1 carries the node's InternalIP: whatever the operator then answers
                # to the rollback (declining it too), the ports go back into the bond
                # first, as the exported script's EXIT trap does. Then the failure stands.
                await self._rejoin(ctx, manager, profiles, check=False)
                raise
        await self._rejoin(ctx, manager, profiles, check=True)
        device = await self._device_on_bond(ctx)
        if device is None:
            return  # verify says so, with the evidence
        ctx.data["rdma_device"] = device
        if await read_tos(ctx, device) != str(ctx.site.qos.roce_tos):
            for command in tos_commands(device, ctx.site.qos.roce_tos):
                await ctx.run(command, check=True)

    async def _rejoin(
        self, ctx: StepContext, manager: str, profiles: dict[str, str], *, check: bool
    ) -> None:
        """Put the ports that are out of the bond back into it (through its manager)."""
        assert ctx.node is not None
        enslaved = await self._enslaved(ctx)
        missing = [p for p in ctx.node.bond.ports if p not in enslaved]
        for command in join_bond_commands(manager, ctx.node, profiles, missing):
            await ctx.run(command, check=check)

    async def _enslaved(self, ctx: StepContext) -> list[str]:
        """The bond's ports that are in it now (a resume finds some already out)."""
        assert ctx.node is not None
        bonding = await probe(ctx, bonding_command(ctx.node), "bonding")
        if not bonding.ok:
            return list(ctx.node.bond.ports)  # unreadable: assume in, as before the change
        names = {slave.name for slave in bonding.fact.slaves}
        return [p for p in ctx.node.bond.ports if p in names]

    async def _device_on_bond(self, ctx: StepContext) -> str | None:
        """The RDMA device Intel's LAG registers again once the bond has formed (bounded)."""
        deadline = time.monotonic() + LACP_WAIT_S
        while True:
            device = await rdma_device(ctx, live=True)
            if device is not None or time.monotonic() > deadline:
                return device
            await asyncio.sleep(2)

    async def verify(self, ctx: StepContext) -> list[Finding]:
        findings = await self._verify(ctx)
        assert ctx.node is not None
        qos = ctx.site.qos
        ctx.data[QOS_VERIFIED] = {
            "ports": list(ctx.node.bond.ports),
            "dscp": qos.dscp,
            "priority": qos.priority,
            "traffic_class": qos.traffic_class,
            "tos": qos.roce_tos,
        }
        return findings

    async def _verify(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        node = ctx.node
        report = Report("T08")
        wanted = desired_port(ctx.site)
        states = {}
        for port in node.bond.ports:
            state, evidence = await read_port(ctx, port)
            states[port] = state
            if state == wanted:
                report.ok(
                    f"qos-{port}",
                    f"{port}: LLDP agent off, PFC on {list(wanted.pfc)}, DSCP "
                    f"{ctx.site.qos.dscp} -> priority {ctx.site.qos.priority}, TC"
                    f"{ctx.site.qos.traffic_class} {ctx.site.qos.roce_bandwidth_percent} % of ETS",
                )
            else:
                report.fail(
                    f"qos-{port}",
                    f"{port} QoS differs from the desired state:\n{state.render()}",
                    "read the diff; rerun this step in the window or use the rollback script",
                    *evidence,
                )
        if len(set(states.values())) > 1:
            report.fail(
                "qos-identical",
                "the two bond ports have different QoS",
                "both must match before bonding, or Intel's LAG leaves RDMA off",
            )
        elif states:
            report.ok("qos-identical", "both bond ports have identical QoS")
        device = await rdma_device(ctx, live=True) or ctx.data.get("rdma_device")
        tos = await read_tos(ctx, device) if device else None
        if tos == str(ctx.site.qos.roce_tos):
            report.ok("roce-tos", f"{device} default_roce_tos = {tos} (DSCP {ctx.site.qos.dscp})")
        else:
            report.fail(
                "roce-tos",
                f"{device} default_roce_tos = {tos}, expected {ctx.site.qos.roce_tos}",
                f"mkdir -p /sys/kernel/config/rdma_cm/{device} and write the ToS (after the bond formed)",
            )
        report.findings.extend(await self._bond_and_rdma(ctx))
        return report.findings

    async def _bond_and_rdma(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        node = ctx.node
        report = Report("T10")
        deadline = time.monotonic() + LACP_WAIT_S
        while True:
            bonding = await probe(ctx, bonding_command(node), "bonding")
            # Up means bundled: both ports with MII up and in the active aggregator (a port
            # LACP did not bundle has MII up in an aggregator of its own).
            healthy = (
                bonding.ok
                and len(bonding.fact.slaves) == 2
                and bonding.fact.active_aggregator_id is not None
                and all(
                    s.mii_status == "up" and s.aggregator_id == bonding.fact.active_aggregator_id
                    for s in bonding.fact.slaves
                )
            )
            if healthy or time.monotonic() > deadline:
                break
            await asyncio.sleep(2)
        if not bonding.ok:
            report.unreadable("lacp", bonding, f"/proc/net/bonding/{node.bond.name}")
        else:
            bus = ctx.recorded("e810.ice").get("bus_info") or {}
            evaluate_bond(node, bonding.fact, bus, report, bonding)
        links = await probe(ctx, RDMA_LINKS, "rdma-link")
        bond_ports = set(node.bond.ports) | {node.bond.name}
        active = [
            lk
            for lk in (links.fact.links if links.ok else [])
            if lk.netdev in bond_ports and lk.state == "ACTIVE"
        ]
        if active:
            report.ok(
                "rdma-back", f"{active[0].device} is ACTIVE again on {active[0].netdev}", gate="T08"
            )
        else:
            report.fail(
                "rdma-back",
                "the RDMA device is not ACTIVE after the change",
                "check dmesg for irdma/ice",
                links.evidence(),
                gate="T08",
            )
        return report.findings

    async def undo(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        node = ctx.node
        capture = ctx.data["capture"]
        manager, profiles = capture.get("manager", "none"), capture.get("profiles", {})
        previous = {p: PortQos.from_json(s) for p, s in capture["ports"].items()}
        current = await self._live(ctx)
        for command in leave_bond_commands(manager, node, profiles, await self._enslaved(ctx)):
            await ctx.run(command)
        for port in node.bond.ports:
            for command in dscp_restore_commands(port, current[port], previous[port]):
                await ctx.run(command)
        settled = await self._live(ctx)  # what the DSCP step left: only what differs next
        for port in node.bond.ports:
            for command in settle_commands(port, previous[port], settled[port]):
                await ctx.run(command)
        enslaved = await self._enslaved(ctx)
        missing = [p for p in node.bond.ports if p not in enslaved]
        for command in join_bond_commands(manager, node, profiles, missing):
            await ctx.run(command)
        device = await self._device_on_bond(ctx)
        if device and capture.get("tos") is not None:
            for command in tos_commands(device, capture["tos"]):
                await ctx.run(command)
        findings = await self._bond_and_rdma(ctx)
        restored = await self._live(ctx)
        report = Report("T08")
        if restored == previous:
            report.warn(
                "rollback", "rolled back to the captured previous QoS", "find the cause, then retry"
            )
        else:
            report.fail(
                "rollback",
                "the rollback did not restore the previous QoS",
                "use the rollback script by hand",
            )
        return findings + report.findings


class BootPersistence(Step):
    id = "qos.persist"
    title = "QoS restored at boot (two systemd units)"
    kind = StepKind.APPLY
    gates = ("T08", "T17")
    requires = ("qos.apply",)
    # The boot units re-apply the QoS the window gate confirmed: never one nobody confirmed.
    needs = (("qos.apply", QOS_VERIFIED),)
    reads = ("qos", "node.bond")
    explain = (
        "dcb and configfs settings do not survive a reboot. One oneshot unit, ordered before "
        "the network (so before bond1 forms, as Intel's LAG needs), sets DCB on both ports; "
        "a second one, after the network is online, waits (bounded) for bond1 and the RDMA "
        "device Intel's LAG registers on it, then writes and reads back the ToS (and DCQCN "
        "with qos.ecn). Both scripts are idempotent and log to the journal."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        if node is None:
            return []
        reads, writes = host_file_lines(self._files(site, node))
        return [*reads, shown(IS_ENABLED), *writes, shown(DAEMON_RELOAD), shown(ENABLE)]

    def _files(self, site: Site, node: Node) -> list[Artifact]:
        return [
            host_file(node.name, DCB_SCRIPT_PATH, boot_dcb_script(site, node),
                      "sets DCB on both ports at boot", 0o755),
            host_file(node.name, DCB_UNIT_PATH, dcb_unit(node), "runs it before the network"),
            host_file(node.name, TOS_SCRIPT_PATH, boot_tos_script(site, node),
                      "writes the ToS once the bond's RDMA device is up", 0o755),
            host_file(node.name, TOS_UNIT_PATH, tos_unit(site, node), "runs it after the network"),
        ]  # fmt: skip

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        return self._files(site, node) if node else []

    async def changes(self, ctx: StepContext) -> list[Change]:
        assert ctx.node is not None
        result = await host_file_changes(ctx, self._files(ctx.site, ctx.node))
        enabled = await ctx.run(IS_ENABLED)
        result.append(
            Change(
                Artifact(
                    f"nodes/{ctx.node.name}/host/unit-state",
                    "enabled\n" * len(UNITS),
                    Target.SCRIPT,
                    f"systemctl is-enabled {' '.join(UNITS)}",
                    "enabled at boot",
                ),
                enabled.stdout or "disabled\n",
            )
        )
        return result

    async def apply(self, ctx: StepContext, changes: list[Change]) -> None:
        await write_host_files(ctx, changes)
        await ctx.run(DAEMON_RELOAD, check=True)
        await ctx.run(ENABLE, check=True)

    async def verify(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        report = Report("T08")
        await check_host_files(ctx, report, "persist-files", self._files(ctx.site, ctx.node))
        enabled = await ctx.run(IS_ENABLED)
        if enabled.stdout.split() == ["enabled"] * len(UNITS):
            report.ok("persist-enabled", f"{' and '.join(UNITS)} are enabled")
        else:
            report.fail(
                "persist-enabled",
                f"not both enabled: {' '.join(UNITS)} -> {' '.join(enabled.stdout.split()) or '?'}",
                f"systemctl enable {' '.join(UNITS)}",
            )
        return report.findings


class QosMeasure(Step):
    id = "qos.measure"
    loads_far_end = True  # an AIStor peer: gated when it is production
    title = "RDMA with QoS on, against the baseline; PFC counters before and after"
    kind = StepKind.MEASURE
    one_node_at_a_time = True  # against the shared AIStor peer
    gates = ("T08",)
    requires = ("qos.apply",)
    # "With QoS" is only true once qos.apply verified the QoS on the node.
    needs = (
        ("qos.apply", QOS_VERIFIED),
        ("irdma.verify", "rdma_device"),
        ("irdma.verify", "gid_index"),
    )
    reads = ("qos", "aistor", "measurements")
    explain = (
        "The same perftest suite as the baseline, now through the connection manager with ToS 96 "
        "(-R -T 96), side by side with the baseline; the per-priority pause counters are read "
        "before and after the load: pause frames on priority 3 show PFC at work."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        from steps.perf import pause_counter_lines, suite_lines

        if node is None:
            return []
        return [
            *pause_counter_lines(node, "pause counters before the load"),
            *suite_lines(site, node, qos=True),
            *pause_counter_lines(node, "and after it"),
        ]

    async def measure(self, ctx: StepContext) -> list[Finding]:
        from steps.perf import pause_counters, rdma_suite

        report = Report("T08")
        verified = ctx.need(QOS_VERIFIED)
        before = await pause_counters(ctx)
        await rdma_suite(ctx, report, series="qos", qos=True)
        after = await pause_counters(ctx)
        prio = str(ctx.site.qos.priority)
        delta = {
            port: sum(after[port][prio].values())
            - sum(before.get(port, {}).get(prio, {"rx": 0, "tx": 0}).values())
            for port in after
            if prio in after[port]
        }
        ctx.data["pause_before"], ctx.data["pause_after"] = before, after
        for port, count in delta.items():
            ctx.record(f"qos.pause.{port}.prio{prio}", float(count), "frames")
        report.ok(
            "pfc-counters",
            f"with the QoS qos.apply verified (DSCP {verified['dscp']} -> priority "
            f"{verified['priority']}, ToS {verified['tos']}): pause frames on priority {prio} "
            "during the load: " + ", ".join(f"{p}: {c}" for p, c in delta.items()),
        )
        baseline = ctx.engine.checkpoint.record("baseline.rdma", ctx.target).get("measurements", {})
        mine = {m.name: m.value for m in ctx.measurements}
        rows = []
        for name, entry in baseline.items():
            twin = name.replace("baseline.", "qos.", 1)
            if twin in mine and entry.get("unit") == "Gb/s":
                rows.append(f"{name.split('.', 1)[1]}: {entry['value']:.1f} -> {mine[twin]:.1f}")
        if rows:
            report.ok("vs-baseline", "baseline -> with QoS (Gb/s): " + "; ".join(rows))
        return report.findings
