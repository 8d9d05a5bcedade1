"""Small helpers shared by the phase modules."""

from __future__ import annotations

import shlex

from wizard.site import Node, Site


def q(value: object) -> str:
    """Shell-quote one value for a command shown in the runbook or sent to a host."""
    return shlex.quote(str(value))


def ports(node: Node | None) -> list[str]:
    return list(node.bond.ports) if node else []


def bond_name(node: Node | None) -> str:
    return node.bond.name if node else "bond1"


def first_peer_ip(site: Site) -> str:
    """The RDMA address of the first AIStor peer (the default perftest server)."""
    return site.aistor.peers[0].rdma_ip if site.aistor.peers else "<aistor-peer-rdma-ip>"
