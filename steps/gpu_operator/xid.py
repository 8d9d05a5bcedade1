"""What an XID code means for a new node: NVIDIA's XID catalogue, reduced to a verdict.

The catalogue ("Analyzing Xid Errors with the Xid Catalog",
docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, Ampere and later) gives each
XID a "Resolution Bucket (Immediate Action)". Those whose action is the application's
(RESTART_APP, IGNORE: a job's illegal address, an MMU fault of its own, a channel reset or
the preemptive clean-up after one) say nothing about the GPU: a WARN naming the code. Those
that need the GPU reset, the node rebooted or the GPU serviced (RESET_GPU, RESTART_BM,
CONTACT_SUPPORT: ECC double-bit errors, row remapping, NVLink, fallen off the bus, GSP
faults) fail the node before it takes work. A code the table does not know fails too: a new
node should show none, and a person should look it up.
"""

from __future__ import annotations

from enum import StrEnum

CATALOGUE = "docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"


class XidClass(StrEnum):
    APPLICATION = "application"
    HARDWARE = "hardware"
    UNKNOWN = "unknown"


# Immediate action RESTART_APP / IGNORE in the catalogue: a workload's fault.
APPLICATION_XIDS: dict[int, str] = {
    13: "graphics engine exception (a job's illegal instruction or address)",
    31: "GPU memory page fault (a job's MMU fault)",
    43: "GPU stopped processing (a job's channel was reset)",
    45: "preemptive clean-up after an earlier error",
    68: "video decoder exception",
}
# Immediate action RESET_GPU / RESTART_BM / CONTACT_SUPPORT: the GPU or the node needs work.
HARDWARE_XIDS: dict[int, str] = {
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt",
    63: "row remapping event (reset the GPU to apply it)",
    64: "row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}


def classify(code: int) -> XidClass:
    if code in APPLICATION_XIDS:
        return XidClass.APPLICATION
    if code in HARDWARE_XIDS:
        return XidClass.HARDWARE
    return XidClass.UNKNOWN


def describe(code: int) -> str:
    """The catalogue's meaning in a few words, or that the wizard's table lacks it."""
    return APPLICATION_XIDS.get(code) or HARDWARE_XIDS.get(code) or "not in the wizard's table"
