"""Phase 14, NCCL proof: GPU memory over RDMA, with the log read channel by channel (T11, T12)."""

from __future__ import annotations

from steps.common import first_peer_ip, q
from wizard.model import StepKind
from wizard.plan import Phase, Step
from wizard.site import Node, Site


class CudaPerftest(Step):
    id = "nccl.cuda-perftest"
    title = "perftest from GPU memory (--use_cuda, DMA-BUF)"
    kind = StepKind.MEASURE
    gates = ("T11", "T12")
    reads = ("aistor",)
    explain = (
        "A CPU-memory ib_write_bw does not prove the GPU path: perftest built with CUDA runs "
        "with --use_cuda=<gpu> (T11) and --use_cuda_dmabuf (T12) when the installed perftest "
        "supports it."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        peer = q(first_peer_ip(site))
        base = "ib_write_bw -d <rdma-dev> -x <gid-index> --report_gbits --use_cuda=0"
        return [f"{base} {peer}", f"{base} --use_cuda_dmabuf {peer}"]


class NcclTests(Step):
    id = "nccl.all-reduce"
    title = "nccl-tests all_reduce_perf with NCCL_DEBUG=INFO"
    kind = StepKind.MEASURE
    gates = ("T11", "T12")
    reads = ("qos", "device_plugin")
    explain = (
        "all_reduce_perf -b 8 -e 16G -f 2 -g 1 runs as a Kubernetes Job (IPC_LOCK, "
        "memory-backed /dev/shm, NCCL_IB_HCA from discovery, NCCL_IB_TC=96 with QoS on). The "
        "log decides: every net channel 'via NET/IB/N/GDRDMA' = GPU memory direct; 'via "
        "NET/IB/N' = through host memory; 'NET/Socket' = no RDMA at all. On an E810, a T12 "
        "pass is 'Experimental / vendor support risk', never 'Production candidate'."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return [
            "kubectl apply -f nccl-all-reduce-job.yaml",
            "kubectl logs job/nccl-all-reduce  # NCCL INFO lines and the result table",
        ]


PHASE = Phase(
    id="nccl",
    number=14,
    title="NCCL / GPUDirect proof",
    summary="Prove GPU memory goes straight to the NIC, with numbers and NCCL's own words.",
    steps=(CudaPerftest(), NcclTests()),
)
