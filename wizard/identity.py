"""What a checkpoint's results describe: each node's machine and the cluster.

A result recorded as done is a fact about one machine. A node name that now points at a
different machine (reinstalled, replaced, a new lab) must not inherit it: the machine is
known by ``/etc/machine-id`` and its SSH host key; a reboot (a new boot id) keeps the
machine but loses what does not persist, so settled results are re-verified. The cluster
is known by its API server and the UID of its ``kube-system`` namespace, a node object by
its UID (a node deleted and joined again is a new object).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MACHINE_ID = "/etc/machine-id"
BOOT_ID = "/proc/sys/kernel/random/boot_id"


@dataclass(frozen=True)
class Mismatch:
    """Why the recorded identity and the live one are not the same machine."""

    field: str
    recorded: str
    live: str

    def __str__(self) -> str:
        return f"{self.field} {short(self.recorded)} -> {short(self.live)}"


def short(value: str) -> str:
    """An id cut to what tells two apart (a machine-id, a UID); addresses stay whole."""
    if len(value) <= 16 or "/" in value or ":" in value.removeprefix("SHA256:"):
        return value
    return value[:12] + "..."


def compare(recorded: dict[str, Any] | None, live: dict[str, Any], fields: tuple[str, ...]):
    """Whether the recorded and the live identity differ, by the first field (in the order
    of ``fields``) that both know; None when they are the same or nothing can be compared.
    The strongest identifier decides alone: a cluster with the same kube-system UID reached
    through another API address is the same cluster."""
    if not recorded:
        return None
    for name in fields:
        old, new = recorded.get(name), live.get(name)
        if old and new:
            return None if old == new else Mismatch(name, str(old), str(new))
    return None


# A different machine: everything recorded for the node is void.
MACHINE_FIELDS = ("machine_id", "host_key")
# The same machine after a reboot: what does not persist must be re-verified.
BOOT_FIELDS = ("boot_id",)
# A different cluster / node object.
CLUSTER_FIELDS = ("kube_system_uid", "server")
NODE_OBJECT_FIELDS = ("node_uid",)
