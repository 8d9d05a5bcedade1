"""Taking a node out of service and back, as an operator types it: one definition for the
commands the engine's maintenance sequence shows at the window gate (it makes the same
calls through the API: wizard/transports/kube.py cordon and drain, with this timeout),
the runbook's lines, the exported scripts' notes and the Ansible play's tasks (which pass
their own kubectl, with the site's kubeconfig and context, as ``kubectl``)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

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
    respect PodDisruptionBudgets until the timeout (never forced)."""
    return [*_kubectl(kubeconfig, kubectl), "drain", node, "--ignore-daemonsets",
            "--delete-emptydir-data", f"--timeout={DRAIN_TIMEOUT_S}s"]  # fmt: skip


def uncordon_command(
    node: str, kubeconfig: str | None = None, *, kubectl: Sequence[str] | None = None
) -> list[str]:
    return [*_kubectl(kubeconfig, kubectl), "uncordon", node]


def out_of_service(node: str, kubeconfig: str | None = None) -> list[str]:
    """The shell lines before a change that takes the node out of service."""
    return [
        shlex.join(cordon_command(node, kubeconfig)),
        shlex.join(drain_command(node, kubeconfig)),
    ]


def back_in_service(node: str, kubeconfig: str | None = None) -> str:
    """The shell line once the change verified."""
    return shlex.join(uncordon_command(node, kubeconfig))
