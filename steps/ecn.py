"""Phase 12, ECN (DCQCN) after PFC works alone (T08)."""

from __future__ import annotations

from steps.common import ports, q
from wizard.model import StepKind
from wizard.plan import Phase, Step
from wizard.site import Node, Site


class EnableEcn(Step):
    id = "ecn.enable"
    title = "ECN / DCQCN on the RDMA device"
    kind = StepKind.MAINTENANCE
    gates = ("T08",)
    reads = ("qos",)
    explain = (
        "Only after PFC alone works (to isolate NIC / switch / PFC / ECN faults): irdma's "
        "DCQCN is enabled through /sys/kernel/config/irdma/<dev>/roce_dcqcn_enable, and the "
        "per-priority pause counters (ethtool -S) are watched before and after load."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        lines = ["cat /sys/kernel/config/irdma/<rdma-dev>/roce_dcqcn_enable"]
        lines += [f"ethtool -S {q(p)}  # rx/tx_priority_N_xon/xoff.nic" for p in ports(node)]
        return lines


PHASE = Phase(
    id="ecn",
    number=12,
    title="ECN",
    summary="Turn on ECN / DCQCN only once PFC works on its own.",
    steps=(EnableEcn(),),
)
