"""Phase 11, RoCE QoS on both E810 ports of a live bond: a maintenance-window change (T08, T10)."""

from __future__ import annotations

from steps.common import bond_name, ports, q
from wizard.model import StepKind
from wizard.plan import Phase, Scope, Step
from wizard.site import Node, Site


def port_qos_commands(site: Site, port: str) -> list[str]:
    """The dcb commands that give one port the site's RoCE QoS (E810, DSCP mode)."""
    qos = site.qos
    pfc = " ".join(f"{p}:{'on' if p in qos.pfc_priorities else 'off'}" for p in range(8))
    prio_tc = " ".join(f"{p}:{qos.traffic_class if p == qos.priority else 0}" for p in range(8))
    p = q(port)
    return [
        f"ethtool --set-priv-flags {p} fw-lldp-agent off",
        f"dcb app add dev {p} dscp-prio {qos.dscp}:{qos.priority}",
        f"dcb pfc set dev {p} prio-pfc {pfc}",
        f"dcb ets set dev {p} prio-tc {prio_tc}",
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
        "priority 3, and DSCP 0 to TC0 with PFC off (ECN later). The operator configures "
        "the switch and confirms."
    )

    def instructions(self, site: Site, node: Node | None) -> str:
        qos = site.qos
        return (
            f"Configure the switch ports of every bond member: DSCP {qos.dscp} -> priority "
            f"{qos.priority} -> TC{qos.traffic_class} with PFC on priority {qos.priority}; "
            "DSCP 0 -> TC0 with PFC off. Confirm when done."
        )


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
        "runs over the bond without an out-of-band address; cordon and drain; release the "
        "ports from the bond; turn the firmware LLDP agent off; add DSCP 24 -> priority 3 "
        "(this switches the port to DSCP mode); PFC on priority 3 only; ToS 96 in the "
        "rdma_cm configfs; re-form the bond; verify identical QoS on both ports, LACP and "
        "the RDMA device; uncordon. A rollback script restores the captured state."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        name = q(node.name) if node else "<node>"
        bond = q(bond_name(node))
        lines = [
            f"kubectl cordon {name}",
            f"kubectl drain {name} --ignore-daemonsets --delete-emptydir-data --timeout=10m",
        ]
        lines += [f"ip link set {q(p)} nomaster" for p in ports(node)]
        for port in ports(node):
            lines += port_qos_commands(site, port)
        configfs = "/sys/kernel/config/rdma_cm/<rdma-dev>"
        lines += [
            f"mkdir -p {configfs}",
            f"echo {site.qos.roce_tos} > {configfs}/ports/1/default_roce_tos",
        ]
        lines += [f"ip link set {q(p)} master {bond}" for p in ports(node)]
        lines += [f"cat /proc/net/bonding/{bond}", f"kubectl uncordon {name}"]
        return lines


class BootPersistence(Step):
    id = "qos.persist"
    title = "QoS restored at boot (systemd unit)"
    kind = StepKind.APPLY
    gates = ("T08", "T17")
    requires = ("qos.apply",)
    reads = ("qos", "node.bond")
    explain = (
        "dcb and configfs settings do not survive a reboot: a oneshot systemd unit, ordered "
        "after the ice driver and before the bond forms, reapplies them."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return [
            "systemctl cat gpu-node-wizard-roce-qos.service",
            "systemctl enable gpu-node-wizard-roce-qos.service",
        ]


PHASE = Phase(
    id="qos",
    number=11,
    title="RoCE QoS (maintenance window)",
    summary="DSCP 24 -> priority 3 -> TC3 with PFC on priority 3, identical on both ports.",
    steps=(SwitchIntent(), ApplyQos(), BootPersistence()),
)
