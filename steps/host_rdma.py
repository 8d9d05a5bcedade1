"""Phase 6, host-to-host RDMA: GPU node to AIStor node with perftest, no GPU yet (T04, T06, T07)."""

from __future__ import annotations

from steps.common import first_peer_ip, q
from wizard.model import StepKind
from wizard.plan import Phase, Step
from wizard.site import Node, Site

PERFTEST_TESTS = ("ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_send_lat")
QP_SWEEP = (1, 4, 8)


class HostPerftest(Step):
    id = "host-rdma.perftest"
    title = "perftest between the GPU node and an AIStor node"
    kind = StepKind.MEASURE
    gates = ("T04", "T06", "T07")
    requires = ("irdma.verify",)
    reads = ("aistor", "node.rdma_ip")
    explain = (
        "A perftest server runs on the AIStor peer and the client on the GPU node: "
        "ib_write_bw, ib_read_bw, ib_send_bw and ib_send_lat with --report_gbits, device and "
        "RoCEv2 GID index from discovery, and a QP sweep of 1, 4 and 8 (the E810 often needs "
        "several QPs). Bandwidth is compared with line rate; the server is always cleaned up."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        peer = q(first_peer_ip(site))
        lines = ["# on the AIStor peer, per test: <test> -d <dev> -x <gid> --report_gbits -q N"]
        for test in PERFTEST_TESTS:
            lines.append(f"{test} -d <rdma-dev> -x <gid-index> --report_gbits {peer}")
        for qps in QP_SWEEP:
            lines.append(f"ib_write_bw -d <rdma-dev> -x <gid-index> --report_gbits -q {qps} {peer}")
        return lines


PHASE = Phase(
    id="host-rdma",
    number=6,
    title="Host-to-host RDMA",
    summary="Prove RDMA between the GPU node and AIStor before Kubernetes is involved.",
    steps=(HostPerftest(),),
)
