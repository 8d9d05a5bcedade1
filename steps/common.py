"""Small helpers shared by the phase modules."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from wizard.artifacts import Artifact
from wizard.plan import Change
from wizard.site import Node, Site

if TYPE_CHECKING:
    from wizard.plan import StepContext
    from wizard.probe import Report


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


def pod_placement(site: Site) -> dict[str, Any]:
    """What every pod the wizard runs on a GPU node needs: the taint toleration, pull secret."""
    extras: dict[str, Any] = {}
    if site.taint.enabled:
        t = site.taint
        extras["tolerations"] = [
            {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}
        ]
    if site.registry.pull_secret:
        extras["imagePullSecrets"] = [{"name": site.registry.pull_secret}]
    return extras


def node_pod(
    site: Site,
    node: Node,
    name: str,
    namespace: str,
    container: dict[str, Any],
    volumes: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A run-once pod pinned to ``node`` (labelled as the wizard's, so it can be found)."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "nodeSelector": {"kubernetes.io/hostname": node.name},
        "containers": [container],
        **({"volumes": volumes} if volumes else {}),
        **pod_placement(site),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "gpu-node-wizard"},
        },
        "spec": spec,
    }


SHM_VOLUME = {"name": "shm", "emptyDir": {"medium": "Memory"}}
SHM_MOUNT = {"name": "shm", "mountPath": "/dev/shm"}


async def host_file_changes(ctx: StepContext, artifacts: list[Artifact]) -> list[Change]:
    """Each host file against what is on the node now (None: absent)."""
    return [Change(a, await ctx.read_file(a.host_path)) for a in artifacts if a.host_path]


async def write_host_files(ctx: StepContext, changes: list[Change]) -> list[str]:
    """Write the changed host files (atomically, with their modes); return their paths."""
    written = []
    for change in changes:
        artifact = change.artifact
        if artifact.host_path and change.changed:
            await ctx.write_file(artifact.host_path, artifact.content, artifact.mode)
            written.append(artifact.host_path)
    return written


async def check_host_files(
    ctx: StepContext, report: Report, name: str, artifacts: list[Artifact]
) -> None:
    """A finding per host file: in place, or different from what the wizard wants."""
    for artifact in artifacts:
        if not artifact.host_path:
            continue
        if await ctx.read_file(artifact.host_path) == artifact.content:
            report.ok(name, f"{artifact.host_path} is in place")
        else:
            report.fail(
                name,
                f"{artifact.host_path} differs from what the wizard wants",
                "apply this step again",
            )
