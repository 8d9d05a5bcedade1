"""Phase 4, bond1: LACP state and the rule that both slaves are ports of one E810 (T10)."""

from __future__ import annotations

from steps.common import bond_name, q
from wizard.model import StepKind
from wizard.plan import Phase, Step
from wizard.site import Node, Site


class Lacp(Step):
    id = "bond.lacp"
    title = "bond1 is a healthy 802.3ad bond of one E810's two ports"
    kind = StepKind.CHECK
    gates = ("T10",)
    reads = ("node.bond",)
    explain = (
        "The bond is IEEE 802.3ad with layer3+4 hashing, MII up, every slave up and in the "
        "active aggregator, and both slaves are functions of the same E810 device (same PCI "
        "bus and device, different function): Intel's RDMA-over-LAG needs both ports on one NIC."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        bond = bond_name(node)
        return [f"cat /proc/net/bonding/{q(bond)}", f"ip -d -j link show {q(bond)}"]


PHASE = Phase(
    id="bond",
    number=4,
    title="bond1 (LACP)",
    summary="Check the cluster-internal bond before RDMA is layered on it.",
    steps=(Lacp(),),
)
