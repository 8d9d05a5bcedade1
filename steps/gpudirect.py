"""Phase 13, GPUDirect readiness: topology, IOMMU, ACS, open kernel module (T11, T12)."""

from __future__ import annotations

from wizard.model import StepKind
from wizard.plan import Phase, Step
from wizard.site import Node, Site


class Readiness(Step):
    id = "gpudirect.readiness"
    title = "GPU-to-NIC distance, IOMMU, ACS and DMA-BUF prerequisites"
    kind = StepKind.CHECK
    gates = ("T11", "T12")
    reads = ("versions",)
    explain = (
        "For every GPU, its distance to the RDMA NIC from `nvidia-smi topo -m` (NCCL uses "
        "GDR only up to PXB by default; NCCL_NET_GDR_LEVEL lifts the limit, not the physical "
        "path); IOMMU off or passthrough; ACS off; the open kernel module loaded and kernel "
        ">= 5.12 for DMA-BUF. On an E810, GPUDirect is experimental (not vendor supported)."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return [
            "nvidia-smi topo -m",
            "lspci -tv",
            "dmesg | grep -i -E 'iommu|dmar|default domain'",
            "lspci -vvv | grep -E '^[0-9a-f]|ACSCtl'",
            "modinfo nvidia | grep -E '^(license|version)'",
            "uname -r",
        ]


PHASE = Phase(
    id="gpudirect",
    number=13,
    title="GPUDirect readiness",
    summary="Is the GPU close enough to the NIC, and is the path open?",
    steps=(Readiness(),),
)
