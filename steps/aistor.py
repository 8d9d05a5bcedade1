"""Phase 15, AIStor end to end: TCP, then the RDMA / direct path (T13, T14)."""

from __future__ import annotations

from steps.bench import benchmark_lines, run_benchmark
from wizard.model import Finding, StepKind
from wizard.plan import Phase, Scope, Step, StepContext
from wizard.probe import Report
from wizard.result_keys import measurements_of
from wizard.site import Node, Site


class _AIStorBenchmark(Step):
    """The operator's S3 benchmark runs against the AIStor service as a whole, not one
    peer: every node takes its turn, whatever the number of peers."""

    one_node_at_a_time = True

    def measured_with(self, site: Site, target: str) -> frozenset[str]:
        return frozenset({"service:AIStor"})


# What the TCP benchmark measured: the direct path is shown against it.
TCP_MEASURED = measurements_of("aistor.tcp")


class AIStorTcp(_AIStorBenchmark):
    id = "aistor.tcp"
    loads_far_end = True  # an AIStor peer: gated when it is production
    title = "AIStor over TCP (S3 benchmark)"
    provides = (TCP_MEASURED,)
    kind = StepKind.MEASURE
    gates = ("T13",)
    reads = ("measurements",)
    explain = "An operator-configured S3 benchmark against AIStor over TCP: the baseline."

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return benchmark_lines(site.measurements.aistor_tcp, "aistor_tcp")

    async def measure(self, ctx: StepContext) -> list[Finding]:
        report = Report("T13")
        await run_benchmark(
            ctx, report, "aistor-tcp", ctx.site.measurements.aistor_tcp, "AIStor over TCP"
        )
        return report.findings


class AIStorDirect(_AIStorBenchmark):
    id = "aistor.direct"
    loads_far_end = True  # an AIStor peer: gated when it is production
    title = "AIStor over the RDMA / direct path"
    uses = (TCP_MEASURED,)
    kind = StepKind.MEASURE
    gates = ("T14",)
    reads = ("measurements",)
    explain = (
        "The same benchmark over the RDMA / GPU-direct path. GPUDirect being possible does "
        "not mean S3/HTTP traffic uses it: the client library must use GPU buffers."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return benchmark_lines(site.measurements.aistor_direct, "aistor_direct")

    async def measure(self, ctx: StepContext) -> list[Finding]:
        report = Report("T14")
        direct = await run_benchmark(
            ctx,
            report,
            "aistor-direct",
            ctx.site.measurements.aistor_direct,
            "AIStor over the direct path",
        )
        tcp = (ctx.result_if_any(TCP_MEASURED) or {}).get("aistor-tcp")  # compared if any
        if direct is not None and tcp:
            report.ok(
                "aistor-vs-tcp",
                f"direct path {direct} vs TCP {tcp['value']} {tcp['unit']} "
                f"({direct / tcp['value']:.1f}x)",
            )
        report.skip(
            "aistor-gpudirect-note",
            "a GPUDirect-capable node does not make S3/HTTP traffic use GPU memory: only a client library "
            "that reads into GPU buffers over RDMA does; these numbers say what the configured client achieved",
        )
        return report.findings


class SupportConfirmation(Step):
    id = "aistor.support"
    title = "AIStor / NVIDIA support confirmation recorded"
    kind = StepKind.CHECK
    scope = Scope.CLUSTER
    gates = ("T14",)
    reads = ("aistor",)
    explain = (
        "Whether AIStor supports the Intel E810 RoCEv2 + GPUDirect RDMA path, and for which "
        "AIStor versions, is to be confirmed with NVIDIA and MinIO before the build (seed 002 "
        "section 1.2). The wizard cannot find that out: it records who confirmed it and "
        "where (aistor.support_confirmation), and warns while nobody has."
    )

    async def verify(self, ctx: StepContext) -> list[Finding]:
        report = Report("T14")
        confirmation = ctx.site.aistor.support_confirmation
        if confirmation:
            report.ok("support-confirmation", f"support confirmed: {confirmation}")
        else:
            report.warn(
                "support-confirmation",
                "no record that NVIDIA and MinIO confirmed AIStor over Intel E810 RoCEv2 with "
                "GPUDirect RDMA for this AIStor version",
                "confirm it with both vendors and record who and where in "
                "aistor.support_confirmation",
            )
        return report.findings


PHASE = Phase(
    id="aistor",
    number=15,
    title="AIStor end to end",
    summary="Storage traffic from the GPU node to AIStor: TCP first, then the direct path.",
    steps=(SupportConfirmation(), AIStorTcp(), AIStorDirect()),
)
