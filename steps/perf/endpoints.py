"""Where a measurement runs: the RDMA device and RoCEv2 GID index of the GPU node and of
its far end (an AIStor peer or the node's pair), found on the hosts or recorded by
irdma.verify, and the runbook's placeholders for them."""

from __future__ import annotations

import ipaddress

from steps.common import RDMA_LINKS, on_host, shown
from steps.irdma import GID_INDEX, RDMA_DEVICE
from steps.perf.model import Endpoint
from wizard.facts.rdma import parse_ibv_devinfo
from wizard.plan import FarEnd, StepContext, measurement_far_end
from wizard.probe import probe
from wizard.site import Node, Site


def devinfo_command(device: str) -> list[str]:
    return ["ibv_devinfo", "-v", "-d", device]


def _gid_matches(gid: str, address: str) -> bool:
    packed = ipaddress.IPv4Address(address).packed
    hex_tail = f"ffff:{packed[0]:02x}{packed[1]:02x}:{packed[2]:02x}{packed[3]:02x}"
    return gid.endswith(f"::ffff:{address}") or gid.lower().endswith(hex_tail)


async def discover(
    ctx: StepContext, host: str, address: str, device: str | None = None
) -> Endpoint | None:
    """The RDMA device and RoCEv2 GID index for ``address`` on ``host``."""
    if device is None:
        links = await probe(ctx, RDMA_LINKS, on=host)
        active = [lk for lk in (links.fact.links if links.ok else []) if lk.state == "ACTIVE"]
        if not active:
            return None
        device = active[0].device
    info = await probe(ctx, devinfo_command(device), parse_ibv_devinfo, on=host)
    gid_index = None
    if info.ok:
        for dev in info.fact.devices:
            for port in dev.ports:
                for gid in port.gids:
                    if gid.type and "v2" in gid.type.lower() and _gid_matches(gid.gid, address):
                        gid_index = gid.index
    return Endpoint(host, device, gid_index, address)


async def endpoints(ctx: StepContext) -> tuple[Endpoint | None, Endpoint | None, FarEnd | None]:
    """The GPU node's and its far end's endpoints (from discovery): an AIStor peer, or the
    node's pair (``measurements.pair_nodes``)."""
    assert ctx.node is not None
    peer = measurement_far_end(ctx.site, ctx.target)
    if {RDMA_DEVICE, GID_INDEX} <= set(ctx.step.needs):
        # Typed results: irdma.verify recorded both (the engine blocked the step otherwise).
        client = Endpoint(ctx.target, ctx.need(RDMA_DEVICE), ctx.need(GID_INDEX), ctx.node.rdma_ip)
    else:
        client = await discover(ctx, ctx.target, ctx.node.rdma_ip)
    server = await discover(ctx, peer.name, peer.rdma_ip, peer.rdma_device) if peer else None
    return client, server, peer


def planned_endpoints(site: Site, node: Node) -> tuple[Endpoint, Endpoint | None]:
    """The endpoints as the runbook shows them: what discovery finds is a placeholder."""
    client = Endpoint(node.name, "<rdma-dev>", "<gid-index>", node.rdma_ip)
    peer = measurement_far_end(site, node.name)
    server = (
        Endpoint(peer.name, peer.rdma_device or "<rdma-dev>", "<gid-index>", peer.rdma_ip)
        if peer
        else None
    )
    return client, server


def endpoint_lines(site: Site, node: Node) -> list[str]:
    """The runbook lines of ``endpoints``: discovery of the RDMA device and GID index."""
    peer = measurement_far_end(site, node.name)
    lines = [
        shown(RDMA_LINKS, "only when irdma.verify recorded no device and GID"),
        shown(devinfo_command("<rdma-dev>"), "then, for the device it shows"),
    ]
    if peer is not None:
        if peer.rdma_device is None:
            lines.append(shown(RDMA_LINKS, on_host(peer.name)))
        lines.append(shown(devinfo_command(peer.rdma_device or "<rdma-dev>"), on_host(peer.name)))
    return lines
