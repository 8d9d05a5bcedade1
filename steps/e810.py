"""Phase 3, E810 and ice: the NIC, its driver and firmware, on both bond ports (T02)."""

from __future__ import annotations

from steps.common import ports, q
from wizard.model import StepKind
from wizard.plan import Phase, Step
from wizard.site import Node, Site


class IceDriver(Step):
    id = "e810.ice"
    title = "Intel E810 with the ice driver on both bond ports"
    kind = StepKind.CHECK
    gates = ("T02",)
    reads = ("node.bond", "nic")
    explain = (
        "An Intel E810 is present (PCI 8086:1591/1592/1593/159b...), both bond ports are "
        "driven by ice, and the driver is Intel's out-of-tree build: the in-tree ice removes "
        "RDMA from a port that joins a bond, so RoCE over the bond needs Intel's ice + irdma. "
        "Firmware (NVM) is recorded; below the site's minimum it warns."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        lines = ["lspci -nn | grep -i ethernet"]
        lines += [f"ethtool -i {q(port)}" for port in ports(node)]
        lines += ["modinfo ice", "modinfo irdma"]
        return lines


PHASE = Phase(
    id="e810",
    number=3,
    title="E810 and ice",
    summary="Identify the E810, its driver (in-tree or Intel's) and firmware on both ports.",
    steps=(IceDriver(),),
)
