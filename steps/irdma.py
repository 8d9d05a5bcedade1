"""Phase 5, irdma: the host RDMA stack, loaded, persistent and in RoCEv2 mode (T02)."""

from __future__ import annotations

from steps.common import ports, q
from wizard.artifacts import Artifact, Target, render
from wizard.model import StepKind
from wizard.plan import Phase, Step
from wizard.site import Node, Site

MODULES_LOAD = "/etc/modules-load.d/irdma.conf"
MODPROBE_OPTIONS = "/etc/modprobe.d/irdma.conf"


class EnableIrdma(Step):
    id = "irdma.enable"
    title = "irdma loaded at boot, in RoCEv2 mode"
    kind = StepKind.APPLY
    gates = ("T02",)
    reads = ("node.os", "nic")
    explain = (
        "irdma is listed in modules-load.d so it loads at boot, and RoCE is enabled through "
        "the driver's own mechanism: `options irdma roce_ena=1` for Intel's irdma (the "
        "in-tree driver uses devlink `enable_roce` instead). Files are diffed against the host."
    )

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        if node is None:
            return []
        base = f"nodes/{node.name}/host"
        return [
            Artifact(
                f"{base}{MODULES_LOAD}",
                render("host/irdma-modules-load.conf.j2"),
                Target.HOST_FILE,
                f"{MODULES_LOAD} on {node.name}",
                "load irdma at boot",
            ),
            Artifact(
                f"{base}{MODPROBE_OPTIONS}",
                render("host/irdma-modprobe.conf.j2"),
                Target.HOST_FILE,
                f"{MODPROBE_OPTIONS} on {node.name}",
                "RoCEv2 mode for Intel's irdma",
            ),
        ]

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return [
            f"cat {MODULES_LOAD} {MODPROBE_OPTIONS}",
            f"install -m 0644 <rendered irdma.conf> {MODULES_LOAD}",
            f"install -m 0644 <rendered irdma options> {MODPROBE_OPTIONS}",
            "modprobe irdma",
        ]


class VerifyRdma(Step):
    id = "irdma.verify"
    title = "RDMA devices up, RoCEv2, link layer Ethernet"
    kind = StepKind.CHECK
    gates = ("T02",)
    requires = ("irdma.enable",)
    reads = ("node.bond",)
    explain = (
        "Modules ice, irdma, ib_core, ib_uverbs and rdma_cm are loaded; `rdma link` shows "
        "the E810 ports ACTIVE; ibv_devinfo shows link_layer Ethernet and PORT_ACTIVE; RoCE "
        "v2 GIDs exist (not iWARP). The firmware LLDP agent flag is recorded for the QoS "
        "phase. If this fails, stop: nothing in Kubernetes is touched until host RDMA works."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        lines = [
            "lsmod",
            "rdma -j link show",
            "rdma -j dev show",
            "ibv_devices",
            "ibv_devinfo -v",
        ]
        lines += [f"ethtool --show-priv-flags {q(port)}" for port in ports(node)]
        return lines


PHASE = Phase(
    id="irdma",
    number=5,
    title="irdma (host RDMA)",
    summary="Load and persist irdma in RoCEv2 mode, then prove the host RDMA stack works.",
    steps=(EnableIrdma(), VerifyRdma()),
)
