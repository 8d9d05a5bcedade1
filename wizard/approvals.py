"""Changes outside the new nodes, and the operator's approval of each by name.

The wizard adds nodes to a production cluster: nothing outside the new nodes may change
unless the operator approved that very change, named. A step that would touch anything
outside the new nodes (an object that existing nodes run from, a pod on an existing node)
describes it as a :class:`ClusterEffect` on its :class:`~wizard.plan.Change`; the engine then
asks for a typed confirmation naming the effect's :class:`ClusterChange` (headless: the
named flag ``--allow-cluster-change NAME``, never implied by ``--yes``), records the
:class:`Approval` in the checkpoint with who and when, and after the change measures which
pods on existing nodes were in fact replaced or restarted; the report lists them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class ClusterChange(StrEnum):
    """The changes outside the new nodes the wizard can make, each approved by its name."""

    # A first GPU Operator release: cluster-scoped CRDs and a ClusterPolicy, the NFD worker
    # on every node (labelling every node), operands on every GPU node.
    GPU_OPERATOR_INSTALL = "gpu-operator-install"
    # A change of the running release (chart version or values): the operands' DaemonSet
    # templates change, and their pods are replaced on every node they select.
    GPU_OPERATOR_UPGRADE = "gpu-operator-upgrade"
    # The registry pull secret exists in a namespace with other data (another registry's
    # entry, other credentials): the mirror's entry is merged into it, and every pod of that
    # namespace pulls with the result from then on.
    PULL_SECRET_UPDATE = "pull-secret-update"
    # The wizard's RDMA plugin ConfigMap/DaemonSet already exist (an earlier node addition):
    # a change of them rolls the plugin on the nodes it already serves; or its nodeSelector
    # picks existing nodes too, which then get a plugin pod.
    RDMA_PLUGIN_UPDATE = "rdma-plugin-update"

    @property
    def flag(self) -> str:
        return f"--allow-cluster-change {self.value}"


@dataclass(frozen=True)
class ClusterEffect:
    """What one change touches outside the new nodes, computed from the live objects."""

    change: ClusterChange
    # What it touches, in the operator's words (objects, nodes).
    summary: str
    # The pods on existing nodes it would replace or restart: "namespace/pod on node".
    restarts: tuple[str, ...] = ()

    def text(self, shown: int = 24) -> str:
        pods = ", ".join(self.restarts[:shown])
        if len(self.restarts) > shown:
            pods += f" and {len(self.restarts) - shown} more"
        return (
            f"{self.summary}. Pods on existing nodes it restarts: "
            + (pods if self.restarts else "none running now")
            + "."
        )


@dataclass(frozen=True)
class Approval:
    """One approved change outside the new nodes, as the checkpoint keeps it."""

    change: ClusterChange
    step: str
    target: str
    by: str  # who approved it (user@host), and how
    at: str  # when (UTC, ISO 8601)
    effect: str  # the effect as it was shown
    predicted: tuple[str, ...] = ()  # the pods the review said it would restart
    # Measured once the step ran: the pods on existing nodes that were replaced (uid gone)
    # or restarted (a container's restartCount rose), "namespace/pod on node".
    restarted: tuple[str, ...] | None = None
    applied: bool = False
    # False when measured at the wizard's bound while the change was still rolling out
    # (a predicted pod not yet replaced, a DaemonSet not yet rolled out).
    settled: bool = True

    def as_json(self) -> dict[str, Any]:
        return {
            "change": self.change.value,
            "step": self.step,
            "target": self.target,
            "by": self.by,
            "at": self.at,
            "effect": self.effect,
            "predicted": list(self.predicted),
            "restarted": None if self.restarted is None else list(self.restarted),
            "applied": self.applied,
            "settled": self.settled,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Approval:
        restarted = data.get("restarted")
        return cls(
            change=ClusterChange(data["change"]),
            step=str(data["step"]),
            target=str(data["target"]),
            by=str(data.get("by", "")),
            at=str(data.get("at", "")),
            effect=str(data.get("effect", "")),
            predicted=tuple(str(p) for p in data.get("predicted") or ()),
            restarted=None if restarted is None else tuple(str(p) for p in restarted),
            applied=bool(data.get("applied")),
            settled=bool(data.get("settled", True)),
        )


@dataclass(frozen=True)
class Addition:
    """A new object made for the new nodes only (nothing that existed before changes, no
    existing node runs from it): no approval, but listed by name in the report."""

    obj: str  # "Secret gpu-operator/nexus-pull"
    step: str
    target: str
    why: str  # what it is for, and where (a namespace the wizard created, ...)
    at: str = ""

    def as_json(self) -> dict[str, Any]:
        return {"object": self.obj, "step": self.step, "target": self.target,
                "why": self.why, "at": self.at}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Addition:
        return cls(str(data["object"]), str(data["step"]), str(data.get("target", "")),
                   str(data.get("why", "")), str(data.get("at", "")))  # fmt: skip


def pods_on_existing_nodes(
    pods: list[dict[str, Any]], new_nodes: set[str]
) -> dict[str, tuple[str, int]]:
    """uid -> ("namespace/pod on node", total restartCount) for every pod bound to a node
    that is not one of the new ones: what a change outside the new nodes is measured on."""
    found = {}
    for pod in pods:
        meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        node = spec.get("nodeName")
        if not node or node in new_nodes or not meta.get("uid"):
            continue
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
        found[str(meta["uid"])] = (
            f"{meta.get('namespace')}/{meta.get('name')} on {node}",
            restarts,
        )
    return found


def restarted_between(
    before: dict[str, tuple[str, int]], after: dict[str, tuple[str, int]]
) -> tuple[str, ...]:
    """The pods of ``before`` that are gone (deleted or replaced: a new pod has a new uid)
    or whose containers restarted, sorted."""
    changed = [
        name
        for uid, (name, restarts) in before.items()
        if uid not in after or after[uid][1] > restarts
    ]
    return tuple(sorted(set(changed)))
