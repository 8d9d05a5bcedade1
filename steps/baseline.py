"""Phase 10, the baseline without QoS: TCP and RDMA numbers to compare against (T05-T07, T09)."""

from __future__ import annotations

from steps.common import first_peer_ip, q
from wizard.model import StepKind
from wizard.plan import Phase, Step
from wizard.site import Node, Site


class TcpBaseline(Step):
    id = "baseline.tcp"
    title = "TCP baseline (iperf3)"
    kind = StepKind.MEASURE
    gates = ("T05",)
    reads = ("aistor",)
    explain = "iperf3 in both directions with several streams, over the bond, as the TCP baseline."

    def commands(self, site: Site, node: Node | None) -> list[str]:
        peer = q(first_peer_ip(site))
        return [f"iperf3 -c {peer} -P 8 -t 30 -J", f"iperf3 -c {peer} -P 8 -t 30 -R -J"]


class RdmaBaseline(Step):
    id = "baseline.rdma"
    title = "RDMA bandwidth and QP scaling, PFC and ECN off"
    kind = StepKind.MEASURE
    gates = ("T06", "T07")
    reads = ("aistor",)
    explain = (
        "With PFC and ECN off, perftest bandwidth (1, 4 and 8 QPs) and latency are recorded "
        "as the baseline that the QoS phase is compared against, as % of line rate."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        peer = q(first_peer_ip(site))
        return [
            f"ib_write_bw -d <rdma-dev> -x <gid-index> --report_gbits -q {n} {peer}"
            for n in (1, 4, 8)
        ] + [f"ib_send_lat -d <rdma-dev> -x <gid-index> {peer}"]


class CiliumCoexistence(Step):
    id = "baseline.coexistence"
    title = "RDMA load and pod TCP traffic at the same time"
    kind = StepKind.MEASURE
    gates = ("T09",)
    reads = ("aistor",)
    explain = (
        "RDMA load and Cilium pod-to-pod TCP traffic run together; each is compared with its "
        "solo figure, so a QoS or bond problem that starves one shows up."
    )


PHASE = Phase(
    id="baseline",
    number=10,
    title="Baseline without QoS",
    summary="Record TCP and RDMA numbers with PFC and ECN off.",
    steps=(TcpBaseline(), RdmaBaseline(), CiliumCoexistence()),
)
