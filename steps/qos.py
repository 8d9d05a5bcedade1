"""Phase 11, RoCE QoS on both E810 ports of a live bond: a maintenance-window change (T08, T10).

Desired and live QoS are read into the same ``PortQos`` form and diffed per port. The
change itself follows what Intel's RDMA-over-LAG allows: QoS must be identical on both
ports *before* bonding and is blocked after, so the ports leave bond1, get identical QoS,
and rejoin it, with the node cordoned and drained around it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any

import yaml

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
from wizard.artifacts import Artifact, Target, host_file, render
from wizard.facts.dcb import DcbApp, DcbEts, DcbPfc
from wizard.model import Finding, StepKind
from wizard.plan import Change, Phase, Scope, Step, StepContext
from wizard.probe import Report, probe, read_all
from wizard.site import Node, Site
from wizard.transports.base import read_file_command, write_value_command

UNIT = "gpu-node-wizard-roce-qos.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT}"
SCRIPT_PATH = "/usr/local/sbin/gpu-node-wizard-roce-qos"
IS_ENABLED = ["systemctl", "is-enabled", UNIT]
DAEMON_RELOAD = ["systemctl", "daemon-reload"]
ENABLE = ["systemctl", "enable", UNIT]
LACP_WAIT_S = 60.0
DRAIN_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class PortQos:
    """The QoS state of one port, as wanted or as read back (same form for the diff)."""

    lldp_agent: bool | None
    pfc: tuple[int, ...]
    dscp_prio: tuple[tuple[int, int], ...]
    prio_tc: tuple[int, ...] | None

    def render(self) -> str:
        data = {
            "fw-lldp-agent": None
            if self.lldp_agent is None
            else ("on" if self.lldp_agent else "off"),
            "pfc-on-priorities": list(self.pfc),
            "dscp-prio": [f"{d}:{p}" for d, p in self.dscp_prio],
            "prio-tc": None
            if self.prio_tc is None
            else " ".join(f"{i}:{t}" for i, t in enumerate(self.prio_tc)),
        }
        return yaml.safe_dump(data, sort_keys=False)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PortQos:
        return cls(
            data.get("lldp_agent"),
            tuple(data.get("pfc", ())),
            tuple(tuple(x) for x in data.get("dscp_prio", ())),  # type: ignore[misc]
            None if data.get("prio_tc") is None else tuple(data["prio_tc"]),
        )


# What an untouched E810 port reports: firmware LLDP on, no PFC, no DSCP entries, all TC0.
FACTORY = PortQos(True, (), (), tuple([0] * 8))


def desired_port(site: Site) -> PortQos:
    """In DSCP mode the E810 maps priority 1:1 to TC, so that is what it reads back."""
    qos = site.qos
    return PortQos(
        False, tuple(sorted(qos.pfc_priorities)), ((qos.dscp, qos.priority),), tuple(range(8))
    )


def live_port(
    pfc: DcbPfc | None, app: DcbApp | None, ets: DcbEts | None, lldp: bool | None
) -> PortQos:
    return PortQos(
        lldp,
        tuple(pfc.enabled()) if pfc else (),
        tuple(sorted((d, p) for d, p in app.dscp_prio)) if app else (),
        tuple(ets.prio_tc[str(i)] for i in range(8)) if ets and len(ets.prio_tc) == 8 else None,
    )


def _pfc_map(pfc: tuple[int, ...]) -> list[str]:
    return [f"{p}:{'on' if p in pfc else 'off'}" for p in range(8)]


def port_commands(site: Site, port: str, live: PortQos) -> list[list[str]]:
    """The ordered commands that take one port from ``live`` to the desired QoS.

    Order matters on an E810: the firmware LLDP agent off first (else DCB changes are
    rejected); PFC and the priority map before the first DSCP entry (which switches the port
    to DSCP mode); a DSCP entry that already exists would fail, so only missing ones are
    added and conflicting ones removed explicitly.
    """
    qos = site.qos
    wanted = desired_port(site)
    commands: list[list[str]] = []
    if live.lldp_agent is not False:
        commands.append(["ethtool", "--set-priv-flags", port, "fw-lldp-agent", "off"])
    if live.pfc != wanted.pfc:
        commands.append(["dcb", "pfc", "set", "dev", port, "prio-pfc", *_pfc_map(wanted.pfc)])
    if not live.dscp_prio:
        tc = [f"{p}:{qos.traffic_class if p == qos.priority else 0}" for p in range(8)]
        commands.append(["dcb", "ets", "set", "dev", port, "prio-tc", *tc])
    for dscp, prio in live.dscp_prio:
        if dscp == qos.dscp and prio != qos.priority:
            commands.append(["dcb", "app", "del", "dev", port, "dscp-prio", f"{dscp}:{prio}"])
    if (qos.dscp, qos.priority) not in live.dscp_prio:
        commands.append(
            ["dcb", "app", "add", "dev", port, "dscp-prio", f"{qos.dscp}:{qos.priority}"]
        )
    return commands


def restore_commands(site: Site, port: str, current: PortQos, previous: PortQos) -> list[list[str]]:
    """Commands that put one port back to a captured previous state."""
    commands: list[list[str]] = []
    if current.lldp_agent is not False or previous.lldp_agent is not False:
        commands.append(
            ["ethtool", "--set-priv-flags", port, "fw-lldp-agent", "off"]
        )  # DCB needs it off
    for entry in current.dscp_prio:
        if entry not in previous.dscp_prio:
            commands.append(
                ["dcb", "app", "del", "dev", port, "dscp-prio", f"{entry[0]}:{entry[1]}"]
            )
    for entry in previous.dscp_prio:
        if entry not in current.dscp_prio:
            commands.append(
                ["dcb", "app", "add", "dev", port, "dscp-prio", f"{entry[0]}:{entry[1]}"]
            )
    commands.append(["dcb", "pfc", "set", "dev", port, "prio-pfc", *_pfc_map(previous.pfc)])
    if previous.prio_tc is not None and not previous.dscp_prio:
        commands.append(
            [
                "dcb",
                "ets",
                "set",
                "dev",
                port,
                "prio-tc",
                *[f"{i}:{t}" for i, t in enumerate(previous.prio_tc)],
            ]
        )
    if previous.lldp_agent:
        commands.append(["ethtool", "--set-priv-flags", port, "fw-lldp-agent", "on"])
    return commands


def dcb_batch(commands: list[list[str]], port: str) -> str:
    """The dcb commands of a port as a `dcb -b` batch file (one command per line)."""
    lines = [
        f"# gpu-node-wizard: RoCE QoS for {port}; apply with `dcb -b FILE` (LLDP agent off first)"
    ]
    lines += [" ".join(c[1:]) for c in commands if c[0] == "dcb"]
    return "\n".join(lines) + "\n"


def shell(commands: list[list[str]]) -> str:
    """Commands as script lines (a ``<rdma-dev>`` placeholder stays readable: the runbook
    tells the operator to substitute it)."""
    return "\n".join(shown(c) for c in commands)


def tos_path(device: str) -> str:
    return f"/sys/kernel/config/rdma_cm/{device}/ports/1/default_roce_tos"


def tos_commands(device: str, tos: str | int) -> list[list[str]]:
    """The RoCE ToS of the device's connection manager (configfs: the folder first)."""
    return [
        ["mkdir", "-p", f"/sys/kernel/config/rdma_cm/{device}"],
        write_value_command(tos_path(device), str(tos)),
    ]


def leave_bond_commands(node: Node) -> list[list[str]]:
    """Release both ports from the bond (Intel's LAG blocks QoS changes on bonded ports)."""
    return [
        ["ip", "link", "set", "dev", port, state]
        for port in node.bond.ports
        for state in ("down", "nomaster")
    ]


def join_bond_commands(node: Node) -> list[list[str]]:
    return [
        command
        for port in node.bond.ports
        for command in (
            ["ip", "link", "set", "dev", port, "master", node.bond.name],
            ["ip", "link", "set", "dev", port, "up"],
        )
    ]


def change_lines(
    site: Site, node: Node, device: str, per_port: dict[str, list[list[str]]]
) -> list[str]:
    """The change itself, in order: out of the bond, each port's QoS, the ToS, back in."""
    lines = [shell(leave_bond_commands(node))]
    for port, commands in per_port.items():
        lines += [f"# {port}", shell(commands)]
    lines += [shell(tos_commands(device, site.qos.roce_tos)), shell(join_bond_commands(node))]
    return "\n".join(lines).splitlines()


def dcb_show(obj: str, port: str) -> list[str]:
    return ["dcb", "-j", obj, "show", "dev", port]


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


def procedure(site: Site, node: Node, device: str, per_port: dict[str, list[list[str]]]) -> str:
    """The whole ordered change for one node, as the operator would run it by hand."""
    bond = node.bond.name
    lines = [
        "#!/bin/sh",
        f"# gpu-node-wizard: RoCE QoS on {node.name} ({bond} = {' + '.join(node.bond.ports)}).",
        "# Maintenance window: the node is cordoned and drained first (from the jump host):",
        f"#   kubectl cordon {node.name} && kubectl drain {node.name} --ignore-daemonsets --delete-emptydir-data",
        "# Intel's RDMA-over-LAG blocks QoS changes on bonded ports: leave the bond, change, rejoin.",
        "# With NetworkManager, prefer `nmcli connection down`/`up` of the bond's port profiles.",
        "set -eu",
        *change_lines(site, node, device, per_port),
        shown(bonding_command(node)),
        f"# then, from the jump host: kubectl uncordon {node.name}",
    ]
    return "\n".join(lines) + "\n"


def rollback_script(
    site: Site, node: Node, previous: dict[str, PortQos], device: str, tos: str | None
) -> str:
    lines = [
        "#!/bin/sh",
        f"# gpu-node-wizard: restore the QoS captured before the change on {node.name}.",
        "set -eu",
        shell(leave_bond_commands(node)),
    ]
    for port in node.bond.ports:
        lines.append(f"# {port}")
        lines += [
            shell([c]) for c in restore_commands(site, port, desired_port(site), previous[port])
        ]
    lines.append(shown(write_value_command(tos_path(device), str(tos or 0))))
    lines.append(shell(join_bond_commands(node)))
    return "\n".join(lines) + "\n"


def boot_script(site: Site, node: Node, device: str) -> str:
    """Plain commands (no shell logic) run by the oneshot unit before the bond forms."""
    lines = [
        "#!/bin/sh",
        f"# gpu-node-wizard: RoCE QoS for {node.name}; dcb and configfs settings do not survive a reboot.",
        "# Run by " + UNIT + " after the ice driver and before the bond forms.",
        "set -eu",
    ]
    for port in node.bond.ports:
        lines += [shell([c]) for c in port_commands(site, port, FACTORY)]
    lines.append(shell(tos_commands(device, site.qos.roce_tos)))
    if site.qos.ecn:
        lines.append(shell(dcqcn_commands(device)))
    return "\n".join(lines) + "\n"


def dcqcn_path(device: str) -> str:
    return f"/sys/kernel/config/irdma/{device}/roce_dcqcn_enable"


def dcqcn_commands(device: str) -> list[list[str]]:
    """DCQCN (ECN) on in irdma's configfs for the device (the folder first)."""
    return [
        ["mkdir", "-p", f"/sys/kernel/config/irdma/{device}"],
        write_value_command(dcqcn_path(device), "1"),
    ]


def boot_unit(node: Node) -> str:
    return render("host/roce-qos.service.j2", node=node, script=SCRIPT_PATH)


async def read_port(ctx: StepContext, port: str) -> tuple[PortQos, list[Any]]:
    flags = await probe(ctx, priv_flags_command(port), "ethtool-priv-flags")
    pfc = await probe(ctx, dcb_show("pfc", port), "dcb-pfc")
    app_result = await ctx.run(dcb_show("app", port))
    app = None
    if app_result.ok and app_result.stdout.strip():
        app_probe = await probe(ctx, dcb_show("app", port), "dcb-app")
        app = app_probe.fact
    elif app_result.ok:
        app = DcbApp([], [], {})  # dcb prints nothing when there are no entries
    ets = await probe(ctx, dcb_show("ets", port), "dcb-ets")
    lldp = flags.fact.flags.get("fw-lldp-agent") if flags.ok else None
    evidence = [p.evidence() for p in (flags, pfc, ets)]
    return live_port(pfc.fact, app, ets.fact, lldp), evidence


async def rdma_device(ctx: StepContext) -> str | None:
    recorded = ctx.recorded("irdma.verify").get("rdma_device")
    if recorded:
        return str(recorded)
    links = await probe(ctx, RDMA_LINKS, "rdma-link")
    if not links.ok or ctx.node is None:
        return None
    bond_ports = set(ctx.node.bond.ports) | {ctx.node.bond.name}
    return next((link.device for link in links.fact.links if link.netdev in bond_ports), None)


async def read_tos(ctx: StepContext, device: str) -> str | None:
    value = await ctx.read_file(tos_path(device))
    return None if value is None else value.strip()


# -- steps ----------------------------------------------------------------------------------------


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
    explain = (
        "Intel's RDMA-over-LAG needs identical QoS on both ports before bonding and blocks "
        "QoS changes after. So: confirm the window and type the node name; refuse if SSH "
        "runs over the bond without an out-of-band address; cordon and drain (respecting "
        "PodDisruptionBudgets); release the ports from the bond; turn the firmware LLDP agent "
        "off; PFC on priority 3 only; DSCP 24 -> priority 3 (this switches the port to DSCP "
        "mode); ToS 96 in the rdma_cm configfs; re-form the bond; verify identical QoS on both "
        "ports, LACP and the RDMA device; uncordon. A failed verification offers the rollback "
        "to the captured previous state."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        if node is None:
            return []
        device = "<rdma-dev>"
        # The change as from a port in factory state; the wizard computes it from the live one.
        per_port = {p: port_commands(site, p, FACTORY) for p in node.bond.ports}
        name = q(node.name)
        return [
            *read_lines(SSH_PATH_READS, "does the SSH session run over the bond?"),
            shown(RDMA_LINKS, "only when irdma.verify recorded no device"),
            *state_lines(node, device, "the live state, kept for the rollback"),
            f"# from the jump host: kubectl cordon {name}",
            f"# from the jump host: kubectl drain {name} --ignore-daemonsets --delete-emptydir-data --timeout=10m",
            *change_lines(site, node, device, per_port),
            *verify_lines(node, device),
            f"# from the jump host, once verified: kubectl uncordon {name}",
        ]

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
        device = "<rdma-dev>"
        files += [
            Artifact(
                f"{base}/apply-qos.sh",
                procedure(site, node, device, per_port),
                Target.SCRIPT,
                f"the change on {node.name} (maintenance window)",
                "the ordered procedure",
                mode=0o755,
            ),
            Artifact(
                f"{base}/rollback-qos.sh",
                rollback_script(site, node, dict.fromkeys(node.bond.ports, FACTORY), device, "0"),
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
        return rollback_script(
            site, node, dict.fromkeys(node.bond.ports, FACTORY), "<rdma-dev>", "0"
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
        """Both ports' QoS and the RoCE ToS as they are: what a rollback restores. The
        engine persists it before the first effect and never captures again on a resume."""
        device = ctx.data.get("rdma_device") or await rdma_device(ctx)
        live = await self._live(ctx)
        return {
            "ports": {p: state.to_json() for p, state in live.items()},
            "tos": await read_tos(ctx, device) if device else None,
            "rdma_device": device,
        }

    def rollback_plan(self, site: Site, node: Node | None, capture: dict[str, Any]) -> str | None:
        if node is None:
            return None
        previous = {p: PortQos.from_json(s) for p, s in capture.get("ports", {}).items()}
        if set(previous) != set(node.bond.ports):
            return self.rollback(site, node)
        return rollback_script(
            site,
            node,
            previous,
            capture.get("rdma_device") or "<rdma-dev>",
            capture.get("tos") or "0",
        )

    def actions(self, site: Site, node: Node | None) -> list[str]:
        if node is None:
            return []
        return [
            line
            for line in self.commands(site, node)
            if not line.startswith("#") and not line.startswith("set ")
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
        commands it still needs, and the bond is re-formed in every case."""
        assert ctx.node is not None
        node = ctx.node
        device = ctx.data["capture"].get("rdma_device") or ctx.data["rdma_device"]
        live = await self._live(ctx)
        per_port = {p: port_commands(ctx.site, p, live[p]) for p in node.bond.ports}
        if any(per_port.values()):
            await self._leave_bond(ctx)
            for port in node.bond.ports:
                for command in per_port[port]:
                    await ctx.run(command, check=True)
        if await read_tos(ctx, device) != str(ctx.site.qos.roce_tos):
            await ctx.run(["mkdir", "-p", f"/sys/kernel/config/rdma_cm/{device}"], check=True)
            await ctx.run(
                write_value_command(tos_path(device), str(ctx.site.qos.roce_tos)), check=True
            )
        await self._join_bond(ctx)

    async def _leave_bond(self, ctx: StepContext) -> None:
        assert ctx.node is not None
        for port in ctx.node.bond.ports:
            await ctx.run(["ip", "link", "set", "dev", port, "down"], check=True)
            await ctx.run(["ip", "link", "set", "dev", port, "nomaster"], check=True)

    async def _join_bond(self, ctx: StepContext) -> None:
        assert ctx.node is not None
        for port in ctx.node.bond.ports:
            await ctx.run(
                ["ip", "link", "set", "dev", port, "master", ctx.node.bond.name], check=True
            )
            await ctx.run(["ip", "link", "set", "dev", port, "up"], check=True)

    async def verify(self, ctx: StepContext) -> list[Finding]:
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
                    f"{ctx.site.qos.dscp} -> priority {ctx.site.qos.priority}",
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
                "both must match (Intel LAG)",
            )
        elif states:
            report.ok("qos-identical", "both bond ports have identical QoS")
        device = ctx.data.get("rdma_device") or await rdma_device(ctx)
        tos = await read_tos(ctx, device) if device else None
        if tos == str(ctx.site.qos.roce_tos):
            report.ok("roce-tos", f"{device} default_roce_tos = {tos} (DSCP {ctx.site.qos.dscp})")
        else:
            report.fail(
                "roce-tos",
                f"{device} default_roce_tos = {tos}, expected {ctx.site.qos.roce_tos}",
                f"mkdir -p /sys/kernel/config/rdma_cm/{device} and write the ToS",
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
            healthy = (
                bonding.ok
                and len(bonding.fact.slaves) == 2
                and all(s.mii_status == "up" for s in bonding.fact.slaves)
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
        capture = ctx.data["capture"]
        previous = {p: PortQos.from_json(s) for p, s in capture["ports"].items()}
        current = await self._live(ctx)
        await self._leave_bond(ctx)
        for port in ctx.node.bond.ports:
            for command in restore_commands(ctx.site, port, current[port], previous[port]):
                await ctx.run(command)
        device = capture.get("rdma_device")
        if device and capture.get("tos") is not None:
            await ctx.run(write_value_command(tos_path(device), str(capture["tos"])))
        await self._join_bond(ctx)
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
    title = "QoS restored at boot (systemd unit)"
    kind = StepKind.APPLY
    gates = ("T08", "T17")
    requires = ("qos.apply",)
    reads = ("qos", "node.bond")
    explain = (
        "dcb and configfs settings do not survive a reboot: a oneshot systemd unit, ordered "
        "after the ice driver and before the network (so before bond1 forms), reapplies them."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        if node is None:
            return []
        reads, writes = host_file_lines(self._files(site, node, "<rdma-dev>"))
        return [
            shown(RDMA_LINKS, "only when irdma.verify recorded no device"),
            *reads,
            shown(IS_ENABLED),
            *writes,
            shown(DAEMON_RELOAD),
            shown(ENABLE),
        ]

    def _files(self, site: Site, node: Node, device: str) -> list[Artifact]:
        return [
            host_file(
                node.name,
                SCRIPT_PATH,
                boot_script(site, node, device),
                "reapplies the QoS at boot",
                0o755,
            ),
            host_file(node.name, UNIT_PATH, boot_unit(node), "runs it after ice, before the bond"),
        ]

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        return self._files(site, node, "<rdma-dev>") if node else []

    async def changes(self, ctx: StepContext) -> list[Change]:
        assert ctx.node is not None
        device = await rdma_device(ctx) or "<rdma-dev>"
        result = await host_file_changes(ctx, self._files(ctx.site, ctx.node, device))
        enabled = await ctx.run(IS_ENABLED)
        result.append(
            Change(
                Artifact(
                    f"nodes/{ctx.node.name}/host/unit-state",
                    "enabled\n",
                    Target.SCRIPT,
                    f"systemctl is-enabled {UNIT}",
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
        device = await rdma_device(ctx) or "<rdma-dev>"
        await check_host_files(
            ctx, report, "persist-files", self._files(ctx.site, ctx.node, device)
        )
        enabled = await ctx.run(IS_ENABLED)
        if enabled.stdout.strip() == "enabled":
            report.ok("persist-enabled", f"{UNIT} is enabled")
        else:
            report.fail("persist-enabled", f"{UNIT} is not enabled", f"systemctl enable {UNIT}")
        return report.findings


class QosMeasure(Step):
    id = "qos.measure"
    title = "RDMA with QoS on, against the baseline; PFC counters before and after"
    kind = StepKind.MEASURE
    one_node_at_a_time = True  # against the shared AIStor peer
    gates = ("T08",)
    requires = ("qos.apply",)
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
            f"pause frames on priority {prio} during the load: "
            + ", ".join(f"{p}: {c}" for p, c in delta.items()),
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


PHASE = Phase(
    id="qos",
    number=11,
    title="RoCE QoS (maintenance window)",
    summary="DSCP 24 -> priority 3 -> TC3 with PFC on priority 3, identical on both ports.",
    steps=(SwitchIntent(), ApplyQos(), BootPersistence(), QosMeasure()),
)
