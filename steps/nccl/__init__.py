"""Phase 14, the NCCL / GPUDirect proof (T11, T12): a package of the objects it creates
(``manifests``), how NCCL's log is judged (``verdict``) and the steps (``steps``)."""

from steps.nccl.steps import PHASE, CudaPerftest, InterNodeNccl, NvlinkBaseline
from steps.nccl.verdict import VENDOR_SUPPORTED, explain_verdict, explain_warnings

__all__ = [
    "PHASE",
    "VENDOR_SUPPORTED",
    "CudaPerftest",
    "InterNodeNccl",
    "NvlinkBaseline",
    "explain_verdict",
    "explain_warnings",
]
