"""Taking a node out of service and back, as an operator types it: one definition for the
commands the engine's maintenance sequence shows at the window gate (it makes the same
calls through the API: wizard/transports/kube.py cordon and drain, with this timeout),
the runbook's lines, the exported scripts' notes and the Ansible play's tasks (which pass
their own kubectl, with the site's kubeconfig and context, as ``kubectl``)."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# How long a drain may wait for PodDisruptionBudgets before it gives up (the engine's and
# the shown `kubectl drain --timeout`).
DRAIN_TIMEOUT_S = 600


def _kubectl(kubeconfig: str | None, kubectl: Sequence[str] | None) -> list[str]:
    if kubectl is not None:
        return list(kubectl)
    return ["kubectl", *(["--kubeconfig", kubeconfig] if kubeconfig else [])]


def cordon_command(
    node: str, kubeconfig: str | None = None, *, kubectl: Sequence[str] | None = None
) -> list[str]:
    return [*_kubectl(kubeconfig, kubectl), "cordon", node]


def drain_command(
    node: str, kubeconfig: str | None = None, *, kubectl: Sequence[str] | None = None
) -> list[str]:
    """kubectl's drain as the engine's: DaemonSet pods stay, emptyDir data goes, evictions
    respect PodDisruptionBudgets until the timeout (never forced). No ``--force``: kubectl
    then refuses the whole drain, before any eviction, while a pod that declares no
    controller runs on the node (``bare_pods``), as the engine stops before its drain."""
    return [*_kubectl(kubeconfig, kubectl), "drain", node, "--ignore-daemonsets",
            "--delete-emptydir-data", f"--timeout={DRAIN_TIMEOUT_S}s"]  # fmt: skip


def uncordon_command(
    node: str, kubeconfig: str | None = None, *, kubectl: Sequence[str] | None = None
) -> list[str]:
    return [*_kubectl(kubeconfig, kubectl), "uncordon", node]


# The procedure's mark on a cordon it set itself (``kubectl annotate``, before the drain):
# a node carrying it is uncordoned once the change verified (a failed run's cordon too, by
# a rerun), and a node cordoned without it is never uncordoned: someone else's cordon (a
# hardware fault, another operator's maintenance, a tool) was there before and stays. The
# Ansible play (steps/ansible.py, templates/ansible/site.yml.j2) and the runbook's lines
# below keep it; the engine keeps the same knowledge in its checkpoint
# (wizard/engine/maintenance.py ``CORDONED_BEFORE``).
CORDON_MARK = "gpu-node-wizard/cordoned-for"


def mark_command(
    node: str, kubeconfig: str | None = None, *, kubectl: Sequence[str] | None = None
) -> str:
    """The shell line that marks the cordon as the procedure's, only for a node that is
    schedulable now. The read is the API server's node field selector ``spec.unschedulable``
    (pkg/registry/core/node/strategy.go NodeToSelectableFields): a node cordoned already
    (or a read that fails) lists nothing, so nothing is marked, and the cordon is never
    lifted by this procedure: the safe side."""
    argv = _kubectl(kubeconfig, kubectl)
    schedulable = shlex.join([*argv, "get", "nodes", "-o", "name",
                              f"--field-selector=metadata.name={node},spec.unschedulable=false"])  # fmt: skip
    mark = shlex.join(
        [*argv, "annotate", "node", node, f"{CORDON_MARK}=maintenance", "--overwrite"]
    )
    return f'if test -n "$({schedulable})"; then {mark}; fi'


def guarded_uncordon(
    node: str, kubeconfig: str | None = None, *, kubectl: Sequence[str] | None = None
) -> str:
    """The shell line that puts the node back in service only when the cordon is the
    procedure's (``CORDON_MARK``), then drops the mark; a cordon set before stays, and the
    line says so (exit 0: nothing failed)."""
    argv = _kubectl(kubeconfig, kubectl)
    read = shlex.join([*argv, "get", "node", node, "-o",
                       f"jsonpath={{.metadata.annotations.{CORDON_MARK}}}"])  # fmt: skip
    uncordon = shlex.join(uncordon_command(node, kubeconfig, kubectl=kubectl))
    unmark = shlex.join([*argv, "annotate", "node", node, f"{CORDON_MARK}-"])
    kept = shlex.quote(f"{node} left cordoned: it was cordoned before this maintenance")
    return f'if test -n "$({read})"; then {uncordon} && {unmark}; else echo {kept}; fi'


def out_of_service(node: str, kubeconfig: str | None = None) -> list[str]:
    """The shell lines before a change that takes the node out of service (the runbook's
    and the exported scripts'): mark the cordon as the procedure's unless the node was
    cordoned already, cordon, drain."""
    return [
        mark_command(node, kubeconfig),
        shlex.join(cordon_command(node, kubeconfig)),
        shlex.join(drain_command(node, kubeconfig)),
    ]


def back_in_service(node: str, kubeconfig: str | None = None) -> str:
    """The shell line once the change verified: the uncordon of a cordon the procedure
    set, never of one that was there before (``guarded_uncordon``)."""
    return guarded_uncordon(node, kubeconfig)


# kubectl drain's own rules for the pods it will not evict unasked (k8s.io/kubectl
# pkg/drain/filters.go, kubernetes/kubectl at dee3483: unreplicatedFilter, mirrorPodFilter,
# daemonSetFilter, the filters applied in makeFilters' order). A pod with no controller
# ownerReference (metav1.GetControllerOf: an entry with ``controller: true``) that has not
# finished is "Pods that declare no controller (use --force to override)": GetPodsForDeletion
# returns the error and RunNodeDrain evicts nothing. Nothing recreates such a pod once it is
# deleted, so its work (and its emptyDir data) is lost for good: the wizard deletes one only
# when the operator approved it by name.
FINISHED_PHASES = ("Succeeded", "Failed")
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def has_controller(pod: Mapping[str, Any]) -> bool:
    """metav1.GetControllerOf: an ownerReference with ``controller: true``."""
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    return any(owner.get("controller") is True for owner in owners)


def bare_pods(pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """``namespace/name`` of each pod a drain would delete for good: running (not
    Succeeded or Failed), not the kubelet's mirror of a static pod (never evicted), no
    controller, and not already terminating (someone is deleting it: the drain only waits)."""
    found = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        if (pod.get("status") or {}).get("phase") in FINISHED_PHASES:
            continue
        if MIRROR_ANNOTATION in (meta.get("annotations") or {}) or meta.get("deletionTimestamp"):
            continue
        if not has_controller(pod):
            found.append(f"{meta.get('namespace', '')}/{meta.get('name', '')}")
    return found
