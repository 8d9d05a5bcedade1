"""What NCCL's own log says about the path: the verdict table of DOMAIN.md, and every
``NCCL WARN`` line read into it."""

from __future__ import annotations

from wizard.facts.nccl import NcclLog
from wizard.probe import Report

VENDOR_SUPPORTED = {"connectx"}  # NVIDIA's GPUDirect RDMA matrix: ConnectX / BlueField only

# (substring of a WARN message, what it means, what to do), most specific first. The
# wording is NCCL's (src/transport.cc, src/bootstrap.cc, src/misc/socket.cc,
# src/transport/net_ib.cc, src/plugin/net.cc), stable across 2.18 to 2.30.
WARN_MEANINGS = (
    ("No transport found", "NCCL found no transport between two ranks (P2P, SHM and NET all "
     "refused)", "on one node, NCCL never uses the NIC between NVLink-joined GPUs: run the "
     "inter-node job; across nodes, check the RDMA resource, NCCL_IB_HCA and IPC_LOCK"),
    ("Bootstrap", "NCCL's bootstrap (the TCP rendezvous between ranks) failed",
     "check NCCL_SOCKET_IFNAME and that the pods reach each other on the bootstrap interface"),
    ("socket interface", "NCCL found no usable socket interface for its bootstrap",
     "set NCCL_SOCKET_IFNAME to the pod network interface"),
    ("NET/IB : No device found", "NCCL found no RDMA device in the pod",
     "request the RDMA resource and check NCCL_IB_HCA against the device names"),
    ("Connect to", "a rank could not connect to its peer",
     "check the RoCE path (GID index, MTU, PFC) between the nodes"),
    ("ncclSocketInit", "NCCL could not open a socket to a peer",
     "check NCCL_SOCKET_IFNAME and the pod network between the ranks"),
    ("ibv_modify_qp", "a queue pair could not be brought up (address, GID or route)",
     "check the RoCEv2 GID index, that the peer's RDMA IP answers over bond1, and the MTU"),
    ("Got completion", "an RDMA operation completed with an error on the fabric",
     "check PFC on priority 3 end to end, the MTU and the GID index on both ends"),
    ("Got async event", "the RDMA device reported an asynchronous error",
     "read dmesg on the node (irdma) and the switch port counters"),
    ("net plugin", "NCCL could not load its network plugin", "check the image's NCCL plugin"),
)  # fmt: skip


def explain_warnings(log: NcclLog, report: Report) -> bool:
    """Fail the path on a warning that means nothing was measured; True when it did.
    Other warnings are named in a warning finding, never dropped."""
    fatal = None
    for message in log.warnings:
        for needle, meaning, remedy in WARN_MEANINGS:
            if needle.lower() in message.lower():
                fatal = fatal or (message, meaning, remedy)
    if fatal is not None:
        message, meaning, remedy = fatal
        report.fail("nccl-path", f"{meaning}: NCCL WARN {message}", remedy, gate="T11")
        report.fail(
            "gdr", "not measured: the NCCL run failed before any data moved", "fix T11 first",
            gate="T12",
        )  # fmt: skip
        return True
    if log.warnings:
        shown = "; ".join(log.warnings[:5]) + (" ..." if len(log.warnings) > 5 else "")
        report.warn(
            "nccl-warnings",
            f"NCCL warned {len(log.warnings)} time(s): {shown}",
            "read the job's log: a warning may explain a slower path",
            gate="T11",
        )
    return False


def explain_verdict(
    log: NcclLog, distances: dict[str, str] | None, profile: str, report: Report
) -> None:
    """Apply DOMAIN.md's verdict table to what NCCL itself said, warnings first: a run that
    warned of no transport, a failed bootstrap or a network plugin never measured the path."""
    if explain_warnings(log, report):
        return
    devices = ", ".join(f"{d.name}/{d.link_layer}" for d in log.net_devices) or "none"
    if log.verdict == "socket":
        report.fail(
            "nccl-path",
            f"NCCL fell back to sockets (NET/Socket): no RDMA at all (NET/IB devices: {devices})",
            "the pod sees no RDMA device: check NCCL_IB_HCA, the RDMA resource request and IPC_LOCK",
            gate="T11",
        )
        report.fail(
            "gdr", "no GPUDirect RDMA: the traffic never reached RDMA", "fix T11 first", gate="T12"
        )
        return
    if log.verdict == "no-net":
        report.fail(
            "nccl-path",
            "NCCL used no network channel",
            "check NCCL_P2P_DISABLE/SHM_DISABLE",
            gate="T11",
        )
        return
    report.ok("nccl-path", f"NCCL used RDMA ({devices})", gate="T11")
    far = [g for g, d in (distances or {}).items() if d not in ("X", "PIX", "PXB", "?")]
    if log.verdict == "host-memory":
        why = []
        if far:
            why.append(
                f"{', '.join(far)} are farther than PXB from the NIC (NCCL's default GDR limit)"
            )
        if log.gdr_disabled:
            why.append(
                "NCCL says GPU Direct RDMA is disabled for "
                + ", ".join(
                    f"{d['hca']}{' (' + d['reason'] + ')' if d['reason'] else ''}"
                    for d in log.gdr_disabled
                )
            )
        if not log.dmabuf_gpus:
            why.append(
                "no 'DMA-BUF is available' line: the open kernel module / kernel >= 5.12 are missing"
            )
        report.fail(
            "gdr",
            "RDMA works but through host memory (no /GDRDMA on the channels)"
            + (f": {'; '.join(why)}" if why else ""),
            "see the GPUDirect readiness findings; NCCL_NET_GDR_LEVEL only lifts the distance limit",
            gate="T12",
        )
        return
    if log.verdict == "mixed":
        report.warn(
            "gdr",
            "some channels use GPUDirect RDMA, some host memory",
            "check per-GPU distances",
            gate="T12",
        )
        return
    dmabuf = "DMA-BUF" if log.dmabuf_gpus else "peermem"
    if profile in VENDOR_SUPPORTED:
        report.ok(
            "gdr",
            f"every NET channel uses GPUDirect RDMA ({dmabuf}): production candidate",
            gate="T12",
        )
    else:
        report.warn(
            "gdr",
            f"every NET channel uses GPUDirect RDMA ({dmabuf}) over an Intel E810: technically working, "
            "Experimental / vendor support risk (NVIDIA supports GPUDirect RDMA with ConnectX/BlueField only)",
            "accept as experimental, or run the same gates on a ConnectX node (Architecture B) to decide on numbers",
            gate="T12",
        )
