"""What is read around a measurement: the bond's line rate, the ports' pause and
drop/error counters (``ethtool -S``) and the RDMA devices' DCQCN counters (ib_core
hw_counters), and their change over a run."""

from __future__ import annotations

from steps.common import bonding_command, shown, stats_command
from steps.perf.model import Endpoint
from wizard.facts.nic import parse_bonding, parse_ethtool_s
from wizard.facts.rdma import parse_rdma_hw_counters
from wizard.plan import StepContext
from wizard.probe import probe
from wizard.site import Node


async def line_rate_gbps(ctx: StepContext) -> tuple[float | None, float | None]:
    """(one port, the bond aggregate) in Gb/s from /proc/net/bonding."""
    assert ctx.node is not None
    bond = await probe(ctx, bonding_command(ctx.node), parse_bonding)
    if not bond.ok:
        return None, None
    speeds = [s.speed_mbps for s in bond.fact.slaves if s.speed_mbps]
    if not speeds:
        return None, None
    return max(speeds) / 1000, sum(speeds) / 1000


async def pause_counters(ctx: StepContext) -> dict[str, dict[str, dict[str, int]]]:
    """Per-port, per-priority pause (xoff) counters from ethtool -S."""
    assert ctx.node is not None
    result = {}
    for port in ctx.node.bond.ports:
        stats = await probe(ctx, stats_command(port), parse_ethtool_s)
        if stats.ok:
            result[port] = {p: {"rx": v.rx, "tx": v.tx} for p, v in stats.fact.prio_pause.items()}
    return result


# DCQCN's counters on an irdma device (ib_core hw_counters; seed 004 section 3: PFC, ECN,
# CNP and drop counters rising together explain a shaky RoCE path).
CONGESTION_COUNTERS = ("cnpSent", "cnpHandled", "cnpIgnored", "RxECNMrkd")
# ice's port-level drop and error counters in `ethtool -S` (../shared/fixtures/ethtool-s/01.txt:
# rx_dropped.nic, rx_crc_errors.nic, rx_length_errors.nic): packets a lossless class lost.
LOSS_COUNTERS = ("rx_dropped.nic", "rx_crc_errors.nic", "rx_length_errors.nic")


def hw_counter_command(device: str) -> list[str]:
    """The congestion counters of an RDMA device, one ``path:value`` line each."""
    base = f"/sys/class/infiniband/{device}/ports/1/hw_counters"
    return ["grep", "-H", ".", *(f"{base}/{name}" for name in CONGESTION_COUNTERS)]


async def congestion_counters(ctx: StepContext, endpoint: Endpoint) -> dict[str, int]:
    """An end's DCQCN counters now ({} when the device shows none)."""
    counters = await probe(
        ctx, hw_counter_command(endpoint.device), parse_rdma_hw_counters, on=endpoint.host
    )
    return dict(counters.fact.counters) if counters.ok else {}


async def loss_counters(ctx: StepContext) -> dict[str, int]:
    """The node's bond ports' drop and error counters, summed by name."""
    assert ctx.node is not None
    total: dict[str, int] = dict.fromkeys(LOSS_COUNTERS, 0)
    for port in ctx.node.bond.ports:
        stats = await probe(ctx, stats_command(port), parse_ethtool_s)
        if stats.ok:
            for name in LOSS_COUNTERS:
                total[name] += stats.fact.counters.get(name, 0)
    return total


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after}


def pause_counter_lines(node: Node, note: str = "per-priority pause counters") -> list[str]:
    return [shown(stats_command(port), note) for port in node.bond.ports]
