"""How many GPU nodes and AIStor peers the lab serves, and the addresses each gets: racks
of 200 GPU nodes with a management and a bond (RoCE) /24 each, the peers at the top of the
racks' /24s."""

from __future__ import annotations

# Loopback addresses 127.0.2.1 ... give each GPU node its own sshd (racks of 200).
# A thousand simulated GPU nodes: each is one listening socket and, while the wizard probes
# it, one connection, so the lab needs about two descriptors per node (see _descriptors,
# simulator/lab.py).
MAX_NODES = 1000
MAX_PEERS = 250  # 127.0.1.1-250


def _gpu_addresses(index: int) -> tuple[str, str]:
    """GPU node ``index``'s management and bond (RoCE) addresses: racks of 200 nodes, one
    /24 each (a routed leaf per rack), so that a thousand nodes get valid, distinct
    addresses; the first 200 keep 10.10.0.21+ and 192.168.50.21+."""
    rack, slot = divmod(index, 200)
    return f"10.10.{rack}.{21 + slot}", f"192.168.{50 + rack}.{21 + slot}"


def _peer_addresses(index: int) -> tuple[str, str]:
    """AIStor peer ``index``'s addresses: .225-.254 of the racks' /24s, which no GPU node
    uses (theirs end at .220)."""
    rack, slot = divmod(index, 30)
    return f"10.20.{rack}.{31 + slot}", f"192.168.{50 + rack}.{225 + slot}"
