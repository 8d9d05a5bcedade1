"""What the QoS step reads on the node: each port's QoS, the RDMA device, the ToS, and who
manages the bond (with its NetworkManager port profiles)."""

from __future__ import annotations

from typing import Any

from steps.common import RDMA_LINKS, priv_flags_command
from steps.irdma import RDMA_DEVICE
from steps.qos.commands import (
    NETWORK_MANAGER,
    NETWORKD,
    NETWORKD_LINKS,
    NM_CONNECTIONS,
    NM_DEVICES,
    UNMANAGED,
    port_uuids,
    tos_path,
)
from steps.qos.model import PortQos, live_port
from wizard.facts.dcb import DcbApp, parse_dcb_app, parse_dcb_ets, parse_dcb_pfc
from wizard.facts.host import parse_priv_flags
from wizard.plan import StepContext
from wizard.probe import probe


def dcb_show(obj: str, port: str) -> list[str]:
    return ["dcb", "-j", obj, "show", "dev", port]


async def read_port(ctx: StepContext, port: str) -> tuple[PortQos, list[Any]]:
    flags = await probe(ctx, priv_flags_command(port), parse_priv_flags)
    pfc = await probe(ctx, dcb_show("pfc", port), parse_dcb_pfc)
    app_result = await ctx.run(dcb_show("app", port))
    app = None
    if app_result.ok and app_result.stdout.strip():
        app_probe = await probe(ctx, dcb_show("app", port), parse_dcb_app)
        app = app_probe.fact
    elif app_result.ok:
        app = DcbApp([], [], {})  # dcb prints nothing when there are no entries
    ets = await probe(ctx, dcb_show("ets", port), parse_dcb_ets)
    lldp = flags.fact.flags.get("fw-lldp-agent") if flags.ok else None
    # Of the priv flags, only the one QoS depends on (the others are ten lines of noise).
    evidence = [flags.evidence((lambda line: "fw-lldp-agent" in line) if flags.ok else None)]
    evidence += [p.evidence() for p in (pfc, ets)]
    return live_port(pfc.fact, app, ets.fact, lldp), evidence


async def rdma_device(ctx: StepContext, *, live: bool = False) -> str | None:
    """The RDMA device on the bond ports: as irdma.verify recorded it (a step calling this
    declares ``uses = (RDMA_DEVICE,)``), or when it did not, or ``live`` (e.g. after the bond
    re-formed and Intel's LAG registered it again), as `rdma link` shows it."""
    if not live:
        recorded = ctx.result_if_any(RDMA_DEVICE)
        if recorded:
            return recorded
    links = await probe(ctx, RDMA_LINKS)
    if not links.ok or ctx.node is None:
        return None
    bond_ports = set(ctx.node.bond.ports) | {ctx.node.bond.name}
    return next(
        (
            link.device
            for link in links.fact.links
            if link.netdev in bond_ports and (link.state == "ACTIVE" or not live)
        ),
        None,
    )


async def read_tos(ctx: StepContext, device: str) -> str | None:
    value = await ctx.read_file(tos_path(device))
    return None if value is None else value.strip()


async def bond_manager(ctx: StepContext) -> tuple[str, dict[str, str]]:
    """Who manages the bond, and (NetworkManager) the UUID of each port's active profile
    (a name may be shared by several profiles; a UUID is not: commands.NM_CONNECTIONS)."""
    assert ctx.node is not None
    bond = ctx.node.bond.name
    nm = await ctx.run(NM_DEVICES)
    if nm.ok:
        rows = [line.split(":") for line in nm.stdout.splitlines()]
        if any(r[:2] == [bond, "connected"] for r in rows):
            connections = await ctx.run(NM_CONNECTIONS)
            profiles = port_uuids(connections.stdout) if connections.ok else {}
            if all(port in profiles for port in ctx.node.bond.ports):
                return NETWORK_MANAGER, {p: profiles[p] for p in ctx.node.bond.ports}
    networkd = await ctx.run(NETWORKD_LINKS)
    if networkd.ok and any(
        line.split()[1:2] == [bond] and "configured" in line
        for line in networkd.stdout.splitlines()
    ):
        return NETWORKD, {}
    return UNMANAGED, {}
