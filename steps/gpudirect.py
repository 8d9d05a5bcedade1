"""Phase 13, GPUDirect readiness: topology, IOMMU, ACS, open kernel module (T11, T12)."""

from __future__ import annotations

import re

from steps.common import read_lines
from steps.irdma import RDMA_DEVICE
from steps.preflight import ACS_READ, IOMMU_READ, evaluate_acs
from wizard.driver_root import nvidia_smi_command
from wizard.facts.gpu import NvidiaSmiTopo, link_rank, parse_nvidia_smi_topo
from wizard.model import Finding, StepKind
from wizard.plan import Phase, Step, StepContext
from wizard.probe import Read, Report, read_all
from wizard.result_keys import ResultKey
from wizard.site import Node, Site
from wizard.transports.base import read_file_command

DRIVER_VERSION = "/proc/driver/nvidia/version"

NCCL_DEFAULT_GDR_LEVEL = "PXB"


def evaluate_topology(topo: NvidiaSmiTopo, device: str, report: Report) -> dict[str, str]:
    """Each GPU's distance to the RDMA NIC, and what NCCL will do with it by default."""
    distances = {gpu: topo.distance(gpu, device) or "?" for gpu in topo.gpus()}
    if not distances or all(d == "?" for d in distances.values()):
        report.fail(
            "topology",
            f"{device} is not in nvidia-smi topo -m (NIC legend: {topo.nic_legend})",
            "check the RDMA device name and that the driver sees the NIC",
        )
        return distances
    limit = link_rank(NCCL_DEFAULT_GDR_LEVEL)
    close = [g for g, d in distances.items() if link_rank(d) <= limit]
    far = [g for g, d in distances.items() if link_rank(d) > limit]
    detail = ", ".join(f"{g}: {d}" for g, d in distances.items())
    if not far:
        report.ok(
            "topology",
            f"every GPU is within {NCCL_DEFAULT_GDR_LEVEL} of {device} ({detail}): NCCL uses "
            "GPUDirect RDMA by default",
        )
    else:
        report.warn(
            "topology",
            f"{', '.join(far)} are farther than {NCCL_DEFAULT_GDR_LEVEL} from {device} ({detail}): by default NCCL "
            f"uses GPUDirect RDMA only for {', '.join(close) or 'none'}. NCCL_NET_GDR_LEVEL=SYS lifts the limit, "
            "not the physical path (it crosses the CPU interconnect).",
            "place the NIC under the same PCIe switch as the GPUs that use it, or add a NIC per GPU group",
        )
    return distances


def evaluate_driver(version_text: str | None, kernel: str, report: Report) -> None:
    if version_text is None:
        report.fail(
            "open-module",
            "the NVIDIA driver is not loaded on the node (/proc/driver/nvidia/version)",
            "finish the GPU Operator phase first",
            gate="T12",
        )
    elif "Open Kernel Module" in version_text:
        report.ok(
            "open-module", "the open kernel module is loaded (needed for DMA-BUF)", gate="T12"
        )
    else:
        report.fail(
            "open-module",
            "the proprietary kernel module is loaded: DMA-BUF GPUDirect needs the open one",
            "set versions.kernel_module_type: open and re-apply the GPU Operator values",
            gate="T12",
        )
    match = re.match(r"(\d+)\.(\d+)", kernel)
    if match and (int(match.group(1)), int(match.group(2))) >= (5, 12):
        report.ok("kernel-dmabuf", f"kernel {kernel} >= 5.12 (DMA-BUF)", gate="T12")
    else:
        report.fail(
            "kernel-dmabuf",
            f"kernel {kernel} is older than 5.12: no DMA-BUF",
            "use a newer kernel",
            gate="T12",
        )


READINESS_READS = (
    Read(nvidia_smi_command("topo", "-m"), parse_nvidia_smi_topo),
    IOMMU_READ,
    ACS_READ,
    Read(read_file_command(DRIVER_VERSION)),
    Read(["uname", "-r"]),
    Read(["lspci", "-tv"], note="the PCIe tree, kept as evidence (seed 000 section 31)"),
)


# Each GPU's distance to the NIC (`nvidia-smi topo -m`: X, PIX, PXB, PHB, NODE, SYS; "?"
# when unknown): the CUDA perftest's GPU choice and the NCCL verdict's explanation.
DISTANCES = ResultKey("gpudirect.readiness", "distances", dict, "GPU -> distance to the NIC")


class Readiness(Step):
    id = "gpudirect.readiness"
    title = "GPU-to-NIC distance, IOMMU, ACS and DMA-BUF prerequisites"
    kind = StepKind.CHECK
    gates = ("T11", "T12")
    reads = ("versions",)
    needs = (RDMA_DEVICE,)
    provides = (DISTANCES,)
    explain = (
        "For every GPU, its distance to the RDMA NIC from `nvidia-smi topo -m` (NCCL uses "
        "GDR only up to PXB by default; NCCL_NET_GDR_LEVEL lifts the limit, not the physical "
        "path); IOMMU off or passthrough; ACS off; the open kernel module loaded and kernel "
        ">= 5.12 for DMA-BUF. On an E810, GPUDirect is experimental (not vendor supported)."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return read_lines(READINESS_READS)

    async def verify(self, ctx: StepContext) -> list[Finding]:
        report = Report("T11")
        device = ctx.need(RDMA_DEVICE)
        topo, dmesg, acs, version_read, kernel_read, tree = await read_all(ctx, *READINESS_READS)
        if tree.result.ok:
            report.ok("pcie-tree", "lspci -tv (kept as evidence)", tree.evidence())
        if topo.ok:
            ctx.provide(DISTANCES, evaluate_topology(topo.fact, device, report))
        else:
            report.unreadable("topology", topo, "the GPU/NIC topology")
        if dmesg.ok and dmesg.fact.translated:
            report.fail(
                "iommu",
                "the IOMMU default domain is Translated: GPU-NIC peer-to-peer is remapped",
                "boot with iommu=pt (or the IOMMU off) and reboot",
                dmesg.evidence(),
            )
        else:
            report.ok("iommu", "IOMMU is not translating DMA (off or passthrough)")
        if acs.ok:
            scratch = Report("T11")
            evaluate_acs(acs.fact, scratch, acs)
            for (
                finding
            ) in scratch.findings:  # enforced now: a warning in preflight is a failure here
                if finding.severity.value == "warn":
                    report.fail("acs", finding.message, finding.remediation, *finding.evidence)
                else:
                    report.findings.append(finding)
        version = version_read.result.stdout if version_read.result.ok else None
        kernel = kernel_read.result.stdout.strip()
        evaluate_driver(version, kernel, report)
        return report.findings


PHASE = Phase(
    id="gpudirect",
    number=13,
    title="GPUDirect readiness",
    summary="Is the GPU close enough to the NIC, and is the path open?",
    steps=(Readiness(),),
)
