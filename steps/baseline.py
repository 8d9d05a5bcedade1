"""Phase 10, the baseline without QoS: TCP and RDMA numbers to compare against (T05-T07, T09)."""

from __future__ import annotations

import asyncio

from steps.irdma import GID_INDEX, RDMA_DEVICE
from steps.perf import (
    BW_QPS,
    endpoint_lines,
    endpoints,
    iperf3_lines,
    iperf3_pair,
    perftest_lines,
    perftest_pair,
    rdma_suite,
    suite_lines,
)
from wizard.model import Finding, StepKind
from wizard.plan import Phase, Step, StepContext, load_rate_gbps
from wizard.probe import Report
from wizard.result_keys import measurements_of
from wizard.site import Node, Site

# T09 runs perftest and iperf3 against the peer at once: against a production peer each takes
# half of aistor.load_rate_gbps, so that together they keep to the one cap the site promises.
COEXIST_SHARE = 0.5


class TcpBaseline(Step):
    id = "baseline.tcp"
    loads_far_end = True  # an AIStor peer: gated when it is production
    title = "TCP baseline (iperf3)"
    kind = StepKind.MEASURE
    one_node_at_a_time = True  # against the shared AIStor peer
    gates = ("T05",)
    reads = ("aistor", "measurements")
    explain = "iperf3 in both directions with several streams, over the bond, as the TCP baseline."

    def commands(self, site: Site, node: Node | None) -> list[str]:
        if node is None:
            return []
        return [*iperf3_lines(site, node), *iperf3_lines(site, node, reverse=True)]

    async def measure(self, ctx: StepContext) -> list[Finding]:
        report = Report("T05")
        for reverse in (False, True):
            direction = "peer -> node" if reverse else "node -> peer"
            gbps, problem = await iperf3_pair(ctx, reverse=reverse)
            key = "reverse" if reverse else "forward"
            if gbps is None:
                report.fail(
                    f"tcp-{key}",
                    f"iperf3 {direction} failed: {problem}",
                    "is iperf3 installed on both hosts?",
                )
            else:
                ctx.record(f"tcp.{key}", gbps, "Gb/s")
                report.ok(
                    f"tcp-{key}",
                    f"TCP {direction}: {gbps:.1f} Gb/s with {ctx.site.measurements.tcp_streams} streams",
                )
        return report.findings


# What the RDMA baseline measured (PFC and ECN off): the QoS measurement is shown against it.
RDMA_BASELINE = measurements_of("baseline.rdma")


class RdmaBaseline(Step):
    id = "baseline.rdma"
    loads_far_end = True  # an AIStor peer: gated when it is production
    title = "RDMA bandwidth and QP scaling, PFC and ECN off"
    provides = (RDMA_BASELINE,)
    kind = StepKind.MEASURE
    one_node_at_a_time = True  # against the shared AIStor peer
    needs = (RDMA_DEVICE, GID_INDEX)
    gates = ("T06", "T07")
    reads = ("aistor", "measurements")
    explain = (
        "With PFC and ECN off, perftest bandwidth (1, 4 and 8 QPs) and latency are recorded "
        "as the baseline that the QoS phase is compared against, as % of line rate."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return suite_lines(site, node, qos=False) if node else []

    async def measure(self, ctx: StepContext) -> list[Finding]:
        report = Report("T06")
        await rdma_suite(ctx, report, series="baseline", qos=False)
        return report.findings


class CiliumCoexistence(Step):
    id = "baseline.coexistence"
    loads_far_end = True  # an AIStor peer: gated when it is production
    title = "RDMA load and TCP traffic at the same time"
    kind = StepKind.MEASURE
    one_node_at_a_time = True  # against the shared AIStor peer
    needs = (RDMA_DEVICE, GID_INDEX)
    gates = ("T09",)
    reads = ("aistor", "measurements")
    explain = (
        "RDMA load (ib_write_bw, 4 QPs) and TCP traffic over the same bond (the path Cilium's "
        "pod traffic takes) run together; each is compared with its solo figure, so a QoS or "
        "bond problem that starves one shows up."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        if node is None:
            return []
        rdma = perftest_lines(site, node, "ib_write_bw", qps=BW_QPS)
        tcp = iperf3_lines(site, node)
        both = (
            "# then both at once"
            + (f", each at half the {cap:g} Gb/s cap:" if (cap := load_rate_gbps(site, node.name))
               else ":")
        )  # fmt: skip
        return [
            *endpoint_lines(site, node),
            "# alone, one after the other:",
            *tcp,
            *rdma,
            both,
            *perftest_lines(site, node, "ib_write_bw", qps=BW_QPS, share=COEXIST_SHARE),
            *iperf3_lines(site, node, share=COEXIST_SHARE),
        ]

    async def measure(self, ctx: StepContext) -> list[Finding]:
        report = Report("T09")
        client, server, _ = await endpoints(ctx)
        if client is None or server is None:
            report.fail("coexistence", "no RDMA endpoint pair", "run the RDMA phases first")
            return report.findings
        solo_tcp, problem = await iperf3_pair(ctx)
        solo_rdma, problem2 = await perftest_pair(ctx, "ib_write_bw", client, server, qps=BW_QPS)
        # Together they keep to the production peer's one cap (aistor.load_rate_gbps): each
        # gets COEXIST_SHARE of it (no effect at line rate, where there is no cap).
        (rdma, rdma_problem), (tcp, tcp_problem) = await asyncio.gather(
            perftest_pair(ctx, "ib_write_bw", client, server, qps=BW_QPS, share=COEXIST_SHARE),
            iperf3_pair(ctx, share=COEXIST_SHARE),
        )
        if (
            None in (solo_tcp, tcp)
            or solo_rdma is None
            or rdma is None
            or problem
            or problem2
            or rdma_problem
        ):
            report.fail(
                "coexistence",
                f"a run failed: {problem or problem2 or rdma_problem or tcp_problem}",
                "check iperf3 and perftest on both hosts",
            )
            return report.findings
        rdma_solo, rdma_mixed = solo_rdma.best_bw_gbps or 0, rdma.best_bw_gbps or 0
        ctx.record("coexistence.rdma", rdma_mixed, "Gb/s")
        ctx.record("coexistence.tcp", tcp, "Gb/s")
        ratio_rdma = rdma_mixed / rdma_solo if rdma_solo else 0
        ratio_tcp = tcp / solo_tcp if solo_tcp else 0
        text = (
            f"together: RDMA {rdma_mixed:.1f} Gb/s ({ratio_rdma:.0%} of solo), TCP {tcp:.1f} Gb/s "
            f"({ratio_tcp:.0%} of solo)"
        )
        if min(ratio_rdma, ratio_tcp) < 0.25:
            report.warn(
                "coexistence",
                text + ": one traffic class starves the other",
                "check the QoS mapping (DSCP 0 -> TC0, DSCP 24 -> TC3) on the NIC and the switch",
            )
        else:
            report.ok("coexistence", text)
        return report.findings


PHASE = Phase(
    id="baseline",
    number=10,
    title="Baseline without QoS",
    summary="Record TCP and RDMA numbers with PFC and ECN off.",
    steps=(TcpBaseline(), RdmaBaseline(), CiliumCoexistence()),
)
