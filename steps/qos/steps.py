"""The steps of phase 11: the switch side, the change (a maintenance window), its boot
persistence, and the measurement with QoS on."""

from __future__ import annotations

import asyncio
import shlex
import time
from dataclasses import asdict, dataclass
from typing import Any

from steps.baseline import RDMA_BASELINE
from steps.bond import evaluate_bond
from steps.common import (
    RDMA_LINKS,
    bonding_command,
    check_host_files,
    host_file_changes,
    host_file_lines,
    on_host,
    priv_flags_command,
    read_lines,
    shown,
    stats_command,
    write_host_files,
)
from steps.e810 import (
    BUS_INFO,
    DMESG,
    LagRefusal,
    lag_refusal,
    lag_refusals_after,
    newest_stamp,
)
from steps.irdma import GID_INDEX, RDMA_DEVICE
from steps.preflight import SSH_PATH_READS, evaluate_ssh_path, ssh_over_bond
from steps.qos.commands import (
    DCB_SCRIPT_PATH,
    DCB_UNIT_PATH,
    DISABLE,
    IS_ENABLED,
    LACP_WAIT_S,
    NETWORK_MANAGER,
    NETWORKD_LINKS,
    NM_CONNECTIONS,
    NM_DEVICES,
    TOS_SCRIPT_PATH,
    TOS_UNIT_PATH,
    UNITS,
    boot_dcb_script,
    boot_tos_script,
    dcb_unit,
    join_bond_commands,
    leave_bond_commands,
    procedure,
    rollback_script,
    tos_commands,
    tos_path,
    tos_unit,
)
from steps.qos.model import PortQos, desired_port
from steps.qos.operations import (
    ABSENT,
    CAPTURE_FILE,
    Reader,
    apply_targets,
    capture_text,
    converge,
    pending,
    restore_targets,
    runbook_lines,
)
from steps.qos.operations import capture as capture_values
from steps.qos.operations import reads as operation_reads
from steps.qos.probes import bond_manager, dcb_show, rdma_device, read_port, read_tos
from steps.remote import remote_shell, ssh_command
from wizard.artifacts import Artifact, Target, host_file, render
from wizard.drain import back_in_service, out_of_service
from wizard.facts.nic import parse_bonding, parse_ethtool_s
from wizard.model import Finding, StepKind
from wizard.plan import Change, Scope, Step, StepContext
from wizard.probe import Report, probe, read_all
from wizard.result_keys import ResultKey
from wizard.site import Node, Site
from wizard.transports.base import CommandResult, read_file_command

# What qos.apply records once its verification ran: the QoS it saw in place (ports, dscp,
# priority, traffic_class, tos); "with QoS" steps need it.
QOS_VERIFIED = ResultKey("qos.apply", "qos_verified", dict, "the QoS qos.apply verified")

# The kernel log is read at the first poll of the wait for the RDMA device and then after
# gaps that double (2, 4, 8, 16 s): a refusal shows within seconds of the rejoin, and a
# whole dmesg is not journaled every poll of a minute-long wait.
LOG_CHECK_FIRST_GAP_S = 2.0


@dataclass(frozen=True)
class OnBond:
    """What the wait after the rejoin found: the RDMA device, or ice's refusals of RDMA on
    the bond that the kernel logged after the rejoin (each line with its reason)."""

    device: str | None
    refusals: tuple[tuple[str, LagRefusal], ...] = ()


def refused_finding(report: Report, node: Node, refusals: tuple[tuple[str, LagRefusal], ...]):
    """rdma-back failed because Intel's LAG refused RDMA on the bond after the rejoin: the
    kernel's lines, the cause and the fix."""
    lines = "; ".join(f"'{line}'" for line, _ in refusals)
    causes = "; ".join(dict.fromkeys(r.cause for _, r in refusals))
    fixes = "; ".join(dict.fromkeys(r.remediation for _, r in refusals))
    report.fail(
        "rdma-back",
        f"no RDMA device on {node.bond.name} after the rejoin: Intel's ice refused RDMA on the "
        f"bond and logged {lines} after the rejoin ({causes}), so the wizard stopped waiting "
        "for a device ice will not register",
        fixes,
        gate="T08",
    )


# systemctl(1): is-enabled exits non-zero when a unit is not enabled (before this step).
IS_ENABLED_EXITS = {1: "not enabled yet"}
DAEMON_RELOAD = ["systemctl", "daemon-reload"]
CAPTURE_FOLDER = ["mkdir", "-p", "-m", "0700", CAPTURE_FILE.rsplit("/", 1)[0]]
ENABLE = ["systemctl", "enable", *UNITS]


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
                stats = await probe(ctx, stats_command(port), parse_ethtool_s, on=node.name)
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
    uses = (RDMA_DEVICE, BUS_INFO)  # rdma_device() reads it live without; bond check warns
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
        profiles = {p: f"<uuid-of-{p}>" for p in node.bond.ports}
        lines = [
            *read_lines(SSH_PATH_READS, "does the SSH session run over the bond?"),
            shown(RDMA_LINKS, "only when irdma.verify recorded no device"),
            *state_lines(node, device, "the live state, kept for the rollback"),
            shown(
                read_file_command(CAPTURE_FILE), "a capture kept by apply-qos.sh or a run before?"
            ),
            shown(CAPTURE_FOLDER, "only when there is none:"),
            f"install -m 0600 <capture> {CAPTURE_FILE}  # only when there is none: the values read "
            "above, for rollback-qos.sh",
            *(
                shown(list(read), "each operation's read, again before each command below")
                for port in node.bond.ports
                for read in operation_reads(site, port)
            ),
            shown(NM_DEVICES, "who manages the bond: NetworkManager?"),
            shown(NM_CONNECTIONS, "then <uuid-of-PORT>: the UUID of the profile active on PORT"),
            shown(NETWORKD_LINKS, "or systemd-networkd? (else: plain ip)"),
            *(f"{line}  # from the jump host" for line in out_of_service(node.name)),
            *(
                shown(c, "NetworkManager")
                for c in leave_bond_commands(NETWORK_MANAGER, node, profiles)
            ),
            *(shown(c, "networkd or unmanaged") for c in leave_bond_commands("none", node, {})),
        ]
        for port in node.bond.ports:
            lines += [f"# {port}", *runbook_lines(port, apply_targets(site, port), shown)]
        lines += [
            shown(DMESG, "the kernel log's newest timestamp, before the rejoin"),
            *(
                shown(c, "NetworkManager")
                for c in join_bond_commands(NETWORK_MANAGER, node, profiles)
            ),
            *(shown(c, "networkd") for c in join_bond_commands("networkd", node, {})),
            *(shown(c, "unmanaged") for c in join_bond_commands("none", node, {})),
            shown(RDMA_LINKS, "the RDMA device Intel's LAG registered again on the bond"),
            shown(DMESG, "while it is not there: a LAG refusal of ice logged since the rejoin?"),
            *(shown(c) for c in tos_commands(device, site.qos.roce_tos)),
            *verify_lines(node, device),
            f"{back_in_service(node.name)}  # from the jump host, once verified",
        ]
        return lines

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        if node is None:
            return []
        base = f"nodes/{node.name}/qos"
        files: list[Artifact] = []
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
                rollback_script(site, node, None),
                Target.SCRIPT,
                f"undo on {node.name}",
                "restores the state apply-qos.sh kept on the node before its first change",
                mode=0o755,
            ),
        ]
        return files

    def by_hand(self, site: Site, node: Node | None) -> str | None:
        """The window from the jump host: the node out of service (wizard/drain.py), the
        exported apply-qos.sh (the one definition, rendered) over the out-of-band address,
        which exits 0 only once both ports, the ToS and the bond verified, then back."""
        if node is None:
            return None
        ssh = shlex.join([*ssh_command(site, node, oob=True), remote_shell(node)])
        return "\n".join([
            *out_of_service(node.name),
            f"{ssh} < nodes/{node.name}/qos/apply-qos.sh",
            f"{back_in_service(node.name)}  # only once apply-qos.sh exited 0 (verified)",
        ])  # fmt: skip

    def rollback(self, site: Site, node: Node | None) -> str | None:
        if node is None:
            return None
        ssh = ssh_command(site, node, oob=True)
        return (
            "# From the export folder, over the node's out-of-band address (the bond goes\n"
            "# down): both ports and the ToS back to what apply-qos.sh kept on the node\n"
            "# (/var/lib/gpu-node-wizard/qos-capture) before its first change. At the window\n"
            "# gate the wizard shows and runs the rollback to its own capture instead.\n"
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
        over_bond = ssh_over_bond(ctx.node, addrs.fact, interface)
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
        reader = self._reader(ctx)
        return {
            "ports": {p: state.to_json() for p, state in live.items()},
            # The operations' values (steps/qos/operations.py), as apply-qos.sh keeps them.
            "values": {p: await capture_values(reader, ctx.site, p) for p in live},
            "tos": await read_tos(ctx, device) if device else None,
            "rdma_device": device,
            "manager": manager,
            "profiles": profiles,
        }

    def rollback_plan(self, site: Site, node: Node | None, capture: dict[str, Any]) -> str | None:
        if node is None:
            return None
        values = capture.get("values") or {}
        if set(values) != set(node.bond.ports):
            return rollback_script(site, node, None)  # a capture from before the values
        return rollback_script(site, node, capture_text(values, capture.get("tos") or "0"))

    def actions(self, site: Site, node: Node | None) -> list[str]:
        if node is None:
            return []
        lines = [f"leave {node.bond.name} through its manager (NetworkManager / networkd / ip)"]
        for port in node.bond.ports:
            lines.append(f"{port}: another mapping of DSCP {site.qos.dscp} deleted first, then")
            lines += [
                shown(t.op.effect(t.want))
                for t in apply_targets(site, port)
                if t.want is not None and t.want != ABSENT
            ]
        lines.append("(each command only where the port does not show its value already)")
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
        if await ctx.read_file(CAPTURE_FILE) is None and capture.get("values"):
            # Kept where apply-qos.sh keeps its own, so that the exported rollback-qos.sh
            # restores this run's capture too (never over one already there: that one
            # holds the state from before the first change).
            text = capture_text(capture["values"], capture.get("tos") or "0")
            await ctx.run(CAPTURE_FOLDER, check=True)
            await ctx.write_file(CAPTURE_FILE, text, 0o600)
        reader = self._reader(ctx)
        targets = {p: apply_targets(ctx.site, p) for p in node.bond.ports}
        if [p for p in node.bond.ports if await pending(reader, targets[p])]:
            enslaved = await self._enslaved(ctx)
            try:
                for command in leave_bond_commands(manager, node, profiles, enslaved):
                    await ctx.run(command, check=True)
                for port in node.bond.ports:
                    await converge(reader, targets[port])
            except Exception:
                # bond1 carries the node's InternalIP: whatever the operator then answers
                # to the rollback (declining it too), the ports go back into the bond
                # first, as the exported script's EXIT trap does. Then the failure stands.
                await self._rejoin(ctx, manager, profiles, check=False)
                raise
        mark = await self._log_mark(ctx)
        await self._rejoin(ctx, manager, profiles, check=True)
        found = await self._device_on_bond(ctx, mark)
        ctx.data["lag_refusals"] = [line for line, _ in found.refusals]  # verify names them
        device = found.device
        if device is None:
            return  # verify says so, with the evidence
        ctx.data["rdma_device"] = device
        if await read_tos(ctx, device) != str(ctx.site.qos.roce_tos):
            for command in tos_commands(device, ctx.site.qos.roce_tos):
                await ctx.run(command, check=True)

    def _reader(self, ctx: StepContext, *, check: bool = True) -> Reader:
        """The operations' reads and effects on this node (each journaled by ctx.run).
        An undo goes on past a failed effect (``check``): the ports must rejoin."""

        async def read(argv: list[str]) -> CommandResult:
            return await ctx.run(argv, check=True)

        async def effect(argv: list[str]) -> CommandResult:
            return await ctx.run(argv, check=check)

        return Reader(read, effect)

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
        bonding = await probe(ctx, bonding_command(ctx.node), parse_bonding)
        if not bonding.ok:
            return list(ctx.node.bond.ports)  # unreadable: assume in, as before the change
        names = {slave.name for slave in bonding.fact.slaves}
        return [p for p in ctx.node.bond.ports if p in names]

    async def _log_mark(self, ctx: StepContext) -> float | None:
        """The newest kernel log timestamp before the rejoin (e810.ice's `dmesg`): only a
        refusal logged after it ends the wait early. None (unreadable, no timestamps): no
        refusal does, and the wait runs its full bound."""
        log = await ctx.run(DMESG)
        return newest_stamp(log.stdout) if log.ok else None

    async def _device_on_bond(
        self, ctx: StepContext, mark: float | None, *, refusal_ends_wait: bool = True
    ) -> OnBond:
        """The RDMA device Intel's LAG registers again once the bond has formed (bounded),
        or, at once, the refusal ice logged after ``mark`` instead (ice_lag.c
        ice_lag_chk_rdma unplugs the RDMA device then: no device is coming).

        Only after the apply, whose ports have their firmware LLDP agent off (software DCB,
        set once), does a refusal end the wait. ice checks again on every bonding event and
        plugs RDMA back when a later check passes (ice_lag.c ice_lag_process_event ->
        ice_lag_chk_rdma), and a rollback turns the agent back on last: then each port's
        DCB arrives from the switch on its own time (ice_dcb_lib.c, DCBX) and the two may
        differ for a moment, so the rollback (``refusal_ends_wait=False``) waits its full
        bound and names a refusal only if no device came."""
        assert ctx.node is not None
        deadline = time.monotonic() + LACP_WAIT_S
        told = False
        check_at, gap = time.monotonic(), LOG_CHECK_FIRST_GAP_S
        refusals: list[tuple[str, LagRefusal]] = []
        while True:
            device = await rdma_device(ctx, live=True)
            now = time.monotonic()
            if device is None and mark is not None and now >= check_at:
                log = await ctx.run(DMESG)
                refusals = lag_refusals_after(log.stdout, mark) if log.ok else []
                check_at, gap = now + gap, gap * 2
            if device is not None or (refusals and refusal_ends_wait) or now > deadline:
                if told:
                    ctx.wait_ends()
                return OnBond(device, () if device is not None else tuple(refusals))
            if not told:
                told = True
                ctx.wait_begins(
                    # Intel's LAG registers it again once the bond has formed.
                    f"waiting for the RDMA device on {ctx.node.bond.name}",
                    deadline - time.monotonic(),
                )
            await asyncio.sleep(2)

    async def verify(self, ctx: StepContext) -> list[Finding]:
        findings = await self._verify(ctx)
        assert ctx.node is not None
        qos = ctx.site.qos
        ctx.data[QOS_VERIFIED.name] = {
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
        qos = ctx.site.qos
        # Judged as the change and the scripts judge it (apply-qos.sh port_differs): the
        # operations' own reads against their wanted values, fresh, so a port the apply
        # leaves alone is a verified port (another DSCP entry, a TC beyond the NVM's count
        # are not the change's business); `dcb -j` is read for the evidence only.
        reader = self._reader(ctx)
        states = {}
        for port in node.bond.ports:
            differs = await pending(reader, apply_targets(ctx.site, port))
            states[port] = tuple(sorted((await capture_values(reader, ctx.site, port)).items()))
            if not differs:
                report.ok(
                    f"qos-{port}",
                    f"{port}: LLDP agent off, PFC on {list(qos.pfc_priorities)}, DSCP "
                    f"{qos.dscp} -> priority {qos.priority}, TC"
                    f"{qos.traffic_class} {qos.roce_bandwidth_percent} % of ETS",
                )
            else:
                _, evidence = await read_port(ctx, port)
                report.fail(
                    f"qos-{port}",
                    f"{port} QoS differs from the desired state: " + "; ".join(differs),
                    f"rerun this step in a window (run SITE --redo qos.apply@{node.name}), "
                    f"or restore the port with nodes/{node.name}/qos/rollback-qos.sh of the "
                    "export",
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
        refusals = tuple(
            (line, refusal)
            for line in ctx.data.get("lag_refusals") or ()
            if (refusal := lag_refusal(line)) is not None
        )
        report.findings.extend(await self._bond_and_rdma(ctx, refusals))
        return report.findings

    async def _bond_and_rdma(
        self, ctx: StepContext, refusals: tuple[tuple[str, LagRefusal], ...] = ()
    ) -> list[Finding]:
        """LACP bundled both ports (bounded wait) and the RDMA device is ACTIVE again;
        without one, ``refusals`` (the rejoin's wait found them) say why."""
        assert ctx.node is not None
        node = ctx.node
        report = Report("T10")
        deadline = time.monotonic() + LACP_WAIT_S
        told = False
        while True:
            bonding = await probe(ctx, bonding_command(node), parse_bonding)
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
                if told:
                    ctx.wait_ends()
                break
            if not told:
                told = True
                ctx.wait_begins(
                    f"waiting for LACP to bundle both ports of {node.bond.name}",
                    deadline - time.monotonic(),
                )
            await asyncio.sleep(2)
        if not bonding.ok:
            report.unreadable("lacp", bonding, f"/proc/net/bonding/{node.bond.name}")
        else:
            # Without e810.ice's PCI addresses the same-NIC check warns that it cannot tell.
            bus = ctx.result_if_any(BUS_INFO) or {}
            evaluate_bond(node, bonding.fact, bus, report, bonding)
        links = await probe(ctx, RDMA_LINKS)
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
        elif refusals:
            refused_finding(report, node, refusals)
        else:
            report.fail(
                "rdma-back",
                "the RDMA device is not ACTIVE after the change",
                "check dmesg for irdma/ice",
                links.evidence(),
                gate="T08",
            )
        return report.findings

    async def _restored(
        self,
        ctx: StepContext,
        targets: dict[str, list],
        values: dict[str, dict[str, str]],
        previous: dict[str, PortQos],
    ) -> bool:
        """Whether the rollback's end state is there, judged as rollback-qos.sh judges it:
        the operations' own reads against the capture (``pending``, fresh reads, a port
        the firmware owns again skipped), not a second parser's model of the port. A
        capture from before the operations (no values) falls back to that model."""
        if not values:
            return await self._live(ctx) == previous
        reader = self._reader(ctx, check=False)
        return not [p for p in targets if await pending(reader, targets[p], values.get(p))]

    async def undo(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        node = ctx.node
        capture = ctx.data["capture"]
        manager, profiles = capture.get("manager", "none"), capture.get("profiles", {})
        previous = {p: PortQos.from_json(s) for p, s in capture["ports"].items()}
        values = capture.get("values") or {}
        reader = self._reader(ctx, check=False)
        targets = {p: restore_targets(ctx.site, p) for p in node.bond.ports}
        # The boot units would apply the change again at the next boot (rollback-qos.sh
        # turns them off the same way): off first, so that the rollback lasts.
        if (await ctx.run(IS_ENABLED, expected=IS_ENABLED_EXITS)).exit_status == 0:
            await ctx.run(DISABLE)
        todo = [p for p in node.bond.ports if await pending(reader, targets[p], values.get(p))]
        if todo:
            for command in leave_bond_commands(manager, node, profiles, await self._enslaved(ctx)):
                await ctx.run(command)
            for port in node.bond.ports:
                await converge(reader, targets[port], values.get(port))
        enslaved = await self._enslaved(ctx)
        missing = [p for p in node.bond.ports if p not in enslaved]
        mark = await self._log_mark(ctx)  # the change's own refusal is history here
        for command in join_bond_commands(manager, node, profiles, missing):
            await ctx.run(command)
        found = await self._device_on_bond(ctx, mark, refusal_ends_wait=False)
        device = found.device
        if device and capture.get("tos") is not None:
            for command in tos_commands(device, capture["tos"]):
                await ctx.run(command)
        findings = await self._bond_and_rdma(ctx, found.refusals)
        report = Report("T08")
        if await self._restored(ctx, targets, values, previous):
            report.warn(
                "rollback", "rolled back to the captured previous QoS", "find the cause, then retry"
            )
            if await ctx.read_file(CAPTURE_FILE) is not None:
                # Retired, as rollback-qos.sh does: the next window captures afresh.
                await ctx.run(["mv", "-f", CAPTURE_FILE, f"{CAPTURE_FILE}.restored"])
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
    needs = (QOS_VERIFIED,)
    reads = ("qos", "node.bond")
    explain = (
        "dcb and configfs settings do not survive a reboot. One oneshot unit, ordered before "
        "the network (so before bond1 forms, as Intel's LAG needs), sets DCB on both ports; "
        "a second one, after the network is online, waits (bounded) for bond1 and the RDMA "
        "device Intel's LAG registers on it, then writes and reads back the ToS (and DCQCN "
        "with qos.ecn). Both scripts are idempotent and log to the journal."
    )

    def rollback(self, site: Site, node: Node | None) -> str | None:
        """Off again: rollback-qos.sh (and the live undo of qos.apply) disable both units,
        so a rolled-back node keeps its captured QoS across the next boot."""
        if node is None:
            return None
        return shlex.join(DISABLE)

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
        enabled = await ctx.run(IS_ENABLED, expected=IS_ENABLED_EXITS)
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
        enabled = await ctx.run(IS_ENABLED, expected=IS_ENABLED_EXITS)
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
        QOS_VERIFIED,
        RDMA_DEVICE,
        GID_INDEX,
    )
    uses = (RDMA_BASELINE,)
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
        baseline = ctx.result_if_any(RDMA_BASELINE) or {}  # compared when it was measured
        mine = {m.name: m.value for m in ctx.measurements}
        rows = []
        for name, entry in baseline.items():
            twin = name.replace("baseline.", "qos.", 1)
            if twin in mine and entry.get("unit") == "Gb/s":
                rows.append(f"{name.split('.', 1)[1]}: {entry['value']:.1f} -> {mine[twin]:.1f}")
        if rows:
            report.ok("vs-baseline", "baseline -> with QoS (Gb/s): " + "; ".join(rows))
        return report.findings
