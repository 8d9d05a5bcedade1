"""Phase 6, host-to-host RDMA: GPU node to AIStor node with perftest, no GPU yet (T04, T06, T07)."""

from __future__ import annotations

from steps.irdma import GID_INDEX, RDMA_DEVICE
from steps.perf import rdma_suite, suite_lines
from wizard.model import Finding, StepKind
from wizard.plan import Phase, Step, StepContext
from wizard.probe import Report
from wizard.site import Node, Site


class HostPerftest(Step):
    id = "host-rdma.perftest"
    loads_far_end = True  # an AIStor peer: gated when it is production
    title = "perftest between the GPU node and an AIStor node"
    kind = StepKind.MEASURE
    one_node_at_a_time = True  # against the shared AIStor peer
    needs = (RDMA_DEVICE, GID_INDEX)
    gates = ("T04", "T06", "T07")
    requires = ("irdma.verify",)
    reads = ("aistor", "node.rdma_ip", "measurements")
    explain = (
        "A perftest server runs on the AIStor peer and the client on the GPU node: "
        "ib_write_bw, ib_read_bw, ib_send_bw and ib_send_lat with --report_gbits, device and "
        "RoCEv2 GID index from discovery, and a QP sweep of 1, 4 and 8 (the E810 often needs "
        "several QPs). Bandwidth is compared with line rate; the server is always cleaned up."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return suite_lines(site, node, qos=False) if node else []

    async def measure(self, ctx: StepContext) -> list[Finding]:
        report = Report("T04")
        await rdma_suite(ctx, report, series="host", qos=False)
        return report.findings


PHASE = Phase(
    id="host-rdma",
    number=6,
    title="Host-to-host RDMA",
    summary="Prove RDMA between the GPU node and AIStor before Kubernetes is involved.",
    steps=(HostPerftest(),),
)
