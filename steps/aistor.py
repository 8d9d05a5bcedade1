"""Phase 15, AIStor end to end: TCP, then the RDMA / direct path (T13, T14)."""

from __future__ import annotations

from wizard.model import StepKind
from wizard.plan import Phase, Step


class AIStorTcp(Step):
    id = "aistor.tcp"
    title = "AIStor over TCP (S3 benchmark)"
    kind = StepKind.MEASURE
    gates = ("T13",)
    reads = ("aistor",)
    explain = "An operator-configured S3 benchmark against AIStor over TCP: the baseline."


class AIStorDirect(Step):
    id = "aistor.direct"
    title = "AIStor over the RDMA / direct path"
    kind = StepKind.MEASURE
    gates = ("T14",)
    reads = ("aistor",)
    explain = (
        "The same benchmark over the RDMA / GPU-direct path. GPUDirect being possible does "
        "not mean S3/HTTP traffic uses it: the client library must use GPU buffers."
    )


PHASE = Phase(
    id="aistor",
    number=15,
    title="AIStor end to end",
    summary="Storage traffic from the GPU node to AIStor: TCP first, then the direct path.",
    steps=(AIStorTcp(), AIStorDirect()),
)
