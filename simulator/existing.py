"""What an existing production cluster already runs beside the new nodes: the lab's default
(brownfield) cluster, and the parts of it that the named lab variants leave out or change.

The default lab is a production cluster the site's new GPU nodes join (issue #30): a control
plane and RHEL CPU workers, an existing GPU node of another kind (gpu-h100-01: H100, ConnectX)
with the site's own RDMA shared device plugin, a GPU Operator release at the site's pinned
version with the site's user values, running workloads protected by PodDisruptionBudgets, a
taint of the site's own; the new GPU nodes are not in the cluster yet (Kubespray's scale.yml
joins them). Fault ``greenfield`` is the cluster built for the wizard instead (the GPU nodes
already joined, nothing else); ``operator-preinstalled`` makes the existing release an older
one with other values, whose upgrade restarts operands on the existing GPU node.

``existing-rdma-plugin``: the site deployed Mellanox/k8s-rdma-shared-dev-plugin as its README
says (``kubectl apply -k deployment/k8s/base``): ConfigMap kube-system/rdma-devices and
DaemonSet rdma-shared-dp-ds, no nodeSelector and no tolerations (deployment/k8s/base/
daemonset.yaml), so a plugin pod on every untainted node. Its configList serves rdma/hca
(prefix ``rdma`` is the plugin's default, pkg/resources/resources_manager.go) from the
ConnectX NICs (vendor 15b3, driver mlx5_core) of gpu-h100-01; on a node without such a NIC
the plugin serves an empty pool ("no Rdma Devices were found", pkg/resources/server.go
newResourceServer), which the kubelet shows as 0.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from simulator.gpu_operator_states import gpu_node_labels
from simulator.kubeapi import owner_reference

if TYPE_CHECKING:
    from simulator.lab import Lab

OTHER_GPU_NODE = ("gpu-h100-01", "10.10.1.40")


@dataclass(frozen=True)
class Variant:
    """Which parts of an existing cluster a lab starts with (from its faults)."""

    joined: bool  # the site's GPU nodes are in the cluster already
    rdma_plugin: bool  # the upstream RDMA shared device plugin serves rdma/hca on gpu-h100-01
    # The existing GPU Operator release: "pinned", "other-values" (pinned version, values
    # without the wizard's dcgmExporter settings), "older" or None.
    operator: str | None
    workloads: bool  # PDB-protected workloads on the existing nodes, the site's own taint

    @property
    def other_gpu_node(self) -> bool:
        return self.rdma_plugin or self.operator is not None or self.workloads


def variant_of(faults: Iterable[str]) -> Variant:
    """The default lab is brownfield; ``greenfield`` starts from the cluster built for the
    wizard, to which ``not-joined``, ``existing-rdma-plugin`` and ``operator-preinstalled``
    add their part as they always did."""
    faults = set(faults)
    older = "operator-preinstalled" in faults
    pinned = "other-values" if "operator-other-values" in faults else "pinned"
    if "operator-other-namespace" in faults:
        pinned = "other-namespace"
    if "greenfield" in faults:
        return Variant(
            joined="not-joined" not in faults,
            rdma_plugin="existing-rdma-plugin" in faults,
            operator="older" if older else None,
            workloads=False,
        )
    return Variant(
        joined=False, rdma_plugin=True, operator="older" if older else pinned, workloads=True
    )


# The site's own workloads on the existing nodes, each behind a PodDisruptionBudget that
# allows no disruption (policy/v1; `kubectl drain` and the Eviction API refuse to evict
# them, Kubernetes docs "Specifying a Disruption Budget for your Application"): a web
# service on the CPU workers and a training job's workers on the H100 node.
WORKLOADS = {
    "web": ("default", ("cpu-worker-1", "cpu-worker-2"), {}),
    "llm-train": ("default", ("gpu-h100-01",), {"nvidia.com/gpu": "8"}),
}
# A taint the site put on one of its own CPU workers (its storage clients only); the wizard
# must keep it as it is, as it keeps every taint it does not manage.
SITE_TAINT = ("cpu-worker-2", {"key": "dedicated", "value": "storage", "effect": "NoSchedule"})


def workload_objects() -> list[tuple[str, dict]]:
    """(collection path, object) of the workloads for a control plane with controllers: each
    a Deployment whose pods its nodes' affinity and anti-affinity place as the embedded lab
    seeds them, and its PodDisruptionBudget."""
    objects = []
    for app, (namespace, nodes, limits) in WORKLOADS.items():
        container: dict[str, Any] = {"name": "main", "image": "lab"}
        if limits:
            container["resources"] = {"limits": dict(limits)}
        spec: dict[str, Any] = {
            "containers": [container],
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{
                        "key": "kubernetes.io/hostname", "operator": "In", "values": list(nodes)}]}]}},
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                    "labelSelector": {"matchLabels": {"app": app}},
                    "topologyKey": "kubernetes.io/hostname"}]},
            },
        }  # fmt: skip
        if SITE_TAINT[0] in nodes:
            taint = SITE_TAINT[1]
            spec["tolerations"] = [{"key": taint["key"], "operator": "Equal",
                                    "value": taint["value"], "effect": taint["effect"]}]  # fmt: skip
        objects.append((f"/apis/apps/v1/namespaces/{namespace}/deployments", {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": app, "namespace": namespace},
            "spec": {"replicas": len(nodes), "selector": {"matchLabels": {"app": app}},
                     "template": {"metadata": {"labels": {"app": app}}, "spec": spec}},
        }))  # fmt: skip
        objects.append((f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets", {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": app, "namespace": namespace},
            "spec": {"minAvailable": len(nodes), "selector": {"matchLabels": {"app": app}}},
        }))  # fmt: skip
    return objects


# The namespace of the fault operator-other-namespace's release: the one NVIDIA's
# OpenShift install guide creates for the operator (a site's own choice under helm).
OTHER_NAMESPACE = "nvidia-gpu-operator"


def pinned_release(site_path: Any, which: str = "pinned") -> dict[str, Any]:
    """The default lab's existing release: the site's pinned chart version with the values
    the site's earlier node additions left (the wizard's values for this site merged into
    the site's own user values), so that adding a node needs no change of the release.
    ``other-values``: the same without the wizard's dcgmExporter settings, so that the
    wizard's merge changes only dcgmExporter.* keys (the exporter's DaemonSet rolls).
    ``other-namespace``: the pinned release in OTHER_NAMESPACE (each `helm list -A -o json`
    entry names its release's namespace, helm cmd/helm/list.go; a site picks its own)."""
    from steps.gpu_operator.release import merge_values
    from steps.gpu_operator.values import CHART, NAMESPACE, RELEASE, build_values
    from wizard.site import load_site

    site = load_site(site_path)
    wanted = build_values(site, prometheus_crds=False)
    if which == "other-values":
        wanted.pop("dcgmExporter", None)
    values = merge_values(SITE_USER_VALUES, wanted)
    namespace = OTHER_NAMESPACE if which == "other-namespace" else NAMESPACE
    return {"name": RELEASE, "namespace": namespace, "chart": CHART,
            "version": site.versions.gpu_operator, "values": values}  # fmt: skip


# The site's own values of the default lab's release, beside what its earlier GPU node
# additions set (time-slicing on the device plugin, the site's priority class).
SITE_USER_VALUES = {
    "devicePlugin": {"config": {"name": "time-slicing", "default": "any"}},
    "daemonsets": {"priorityClassName": "site-gpu-critical"},
}


def seed_site_taint(lab: Lab) -> None:
    name, taint = SITE_TAINT
    with lab.cluster.lock:
        node = lab.cluster.node(name)
        node.setdefault("spec", {}).setdefault("taints", []).append(dict(taint))


def seed_workloads(lab: Lab) -> None:
    """Deployment-owned pods (through their ReplicaSet) and a PDB per workload."""
    for app, (namespace, nodes, limits) in WORKLOADS.items():
        for index, node in enumerate(nodes):
            pod = lab._pod(namespace, f"{app}-7d9f8c6b5-{index:05x}", node, owner="ReplicaSet")
            pod["metadata"]["labels"] = {"app": app}
            pod["metadata"]["ownerReferences"][0]["name"] = f"{app}-7d9f8c6b5"
            if limits:
                pod["spec"]["containers"][0]["resources"] = {"limits": dict(limits)}
            if node == SITE_TAINT[0]:
                taint = SITE_TAINT[1]
                pod["spec"]["tolerations"] = [{"key": taint["key"], "operator": "Equal",
                                               "value": taint["value"], "effect": taint["effect"]}]  # fmt: skip
            lab.cluster.put("v1", "pods", pod)
        lab.cluster.put("policy/v1", "poddisruptionbudgets", {
            "metadata": {"name": app, "namespace": namespace},
            "spec": {"minAvailable": len(nodes), "selector": {"matchLabels": {"app": app}}},
        })  # fmt: skip


UPSTREAM_CONFIGMAP = "rdma-devices"
UPSTREAM_DAEMONSET = "rdma-shared-dp-ds"
UPSTREAM_RESOURCE = "rdma/hca"
UPSTREAM_CONFIG = {
    "periodicUpdateInterval": 300,
    "configList": [
        {
            "resourceName": "hca",
            "rdmaHcaMax": 1000,
            "selectors": {"vendors": ["15b3"], "drivers": ["mlx5_core"]},
        }
    ],
}


def other_gpu_node_object(lab: Lab) -> dict:
    """gpu-h100-01 as the cluster has it: eight GPUs the operator already serves, so it
    carries the labels the operator's controller put there (labelGPUNodes) before the
    wizard ever ran; a reconcile after the new node joins finds nothing to add."""
    name, ip = OTHER_GPU_NODE
    node = lab._node_object(name, ip, control_plane=False, gpu_host=None)
    node["metadata"]["labels"].update(gpu_node_labels())
    node["status"]["capacity"]["nvidia.com/gpu"] = "8"
    node["status"]["allocatable"]["nvidia.com/gpu"] = "8"
    return node


def other_gpu_node(lab: Lab) -> dict:
    """gpu-h100-01, an existing H100 node (eight GPUs, ConnectX), created once."""
    node = lab.cluster.node(OTHER_GPU_NODE[0])
    if node is None:
        node = lab.cluster.put("v1", "nodes", other_gpu_node_object(lab))
    return node


def upstream_plugin_objects() -> tuple[dict, dict]:
    """The upstream plugin's ConfigMap and DaemonSet as deployment/k8s/base has them."""
    namespace = "kube-system"
    configmap = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": UPSTREAM_CONFIGMAP, "namespace": namespace},
        "data": {"config.json": json.dumps(UPSTREAM_CONFIG, indent=4) + "\n"},
    }  # fmt: skip
    mounts = [("device-plugin", "/var/lib/kubelet/device-plugins"),
              ("plugins-registry", "/var/lib/kubelet/plugins_registry"), ("devs", "/dev/")]  # fmt: skip
    template = {
        "metadata": {"labels": {"name": UPSTREAM_DAEMONSET}},
        "spec": {
            "hostNetwork": True,
            "priorityClassName": "system-node-critical",
            "containers": [{
                "name": "k8s-rdma-shared-dp-ds",
                "image": "ghcr.io/mellanox/k8s-rdma-shared-dev-plugin:v1.5.3",
                "imagePullPolicy": "IfNotPresent",
                "securityContext": {"privileged": True},
                "volumeMounts": [{"name": n, "mountPath": p} for n, p in mounts]
                + [{"name": "config", "mountPath": "/k8s-rdma-shared-dev-plugin"}],
            }],
            "volumes": [{"name": n, "hostPath": {"path": p}} for n, p in mounts]
            + [{"name": "config", "configMap": {"name": UPSTREAM_CONFIGMAP,
                "items": [{"key": "config.json", "path": "config.json"}]}}],
        },
    }  # fmt: skip
    daemonset = {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": UPSTREAM_DAEMONSET, "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"name": UPSTREAM_DAEMONSET}}, "template": template},
    }  # fmt: skip
    return configmap, daemonset


def connectx_pools(config: dict[str, Any]) -> dict[str, str]:
    """What the plugin serves on gpu-h100-01 (ConnectX, vendor 15b3, mlx5_core): each
    configList entry that selects vendor 15b3, rdmaHcaMax shared devices of it."""
    pools = {}
    for entry in config.get("configList") or []:
        selectors = entry.get("selectors") or {}
        if "15b3" in (selectors.get("vendors") or []):
            prefix = entry.get("resourcePrefix") or "rdma"
            pools[f"{prefix}/{entry.get('resourceName')}"] = str(entry.get("rdmaHcaMax", 0))
    return pools


def seed_existing_rdma_plugin(lab: Lab) -> None:
    other = other_gpu_node(lab)
    namespace = "kube-system"
    configmap, daemonset = upstream_plugin_objects()
    lab.cluster.put("v1", "configmaps", configmap)
    template = daemonset["spec"]["template"]
    # Untainted nodes only: the upstream DaemonSet tolerates nothing (cp-1 is tainted).
    nodes = [
        n for n in lab.cluster.list("v1", "nodes", None) if not n.get("spec", {}).get("taints")
    ]
    daemonset["status"] = {"currentNumberScheduled": len(nodes), "desiredNumberScheduled": len(nodes),
                           "numberMisscheduled": 0, "numberReady": len(nodes)}  # fmt: skip
    ds = lab.cluster.put("apps/v1", "daemonsets", daemonset)
    for index, node in enumerate(nodes):
        name = node["metadata"]["name"]
        pod = lab._pod(namespace, f"{UPSTREAM_DAEMONSET}-{index:05x}", name)
        pod["metadata"]["labels"] = {"name": UPSTREAM_DAEMONSET}
        pod["metadata"]["ownerReferences"] = [owner_reference(ds)]
        pod["spec"] = {"nodeName": name, **template["spec"]}
        lab.cluster.put("v1", "pods", pod)
        count = "1000" if node is other or name == other["metadata"]["name"] else "0"
        with lab.cluster.lock:
            live = lab.cluster.node(name)
            live["status"]["capacity"][UPSTREAM_RESOURCE] = count
            live["status"]["allocatable"][UPSTREAM_RESOURCE] = count


LAB_MIRROR_HOST = "nexus.lab.internal:8443"


OTHER_REGISTRY_HOST = "registry.corp.internal"


def dockerconfigjson(host: str, user: str, password: str) -> str:
    """A .dockerconfigjson value as `kubectl create secret docker-registry` writes it."""
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    config = {"auths": {host: {"username": user, "password": password, "auth": auth}}}
    return base64.b64encode(json.dumps(config).encode()).decode()


def pull_secret_objects(
    name: str = "nexus-pull", faults: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """The site's pull secret for its mirror, as a cluster that already pulls from it has it
    in the namespaces its workloads use (kube-system, default), and nowhere else: the
    kubelet reads a pod's imagePullSecrets in the pod's own namespace, so a new namespace
    (gpu-operator) needs its own copy. Made as `kubectl create secret docker-registry` makes
    it (type kubernetes.io/dockerconfigjson, an auths entry for the server). Both control
    planes seed these. Fault ``pull-secret-other-data``: default's has another registry's
    entry only (the site's workloads there pull from that registry under the same name)."""
    secrets = []
    for namespace in ("kube-system", "default"):
        if namespace == "default" and "pull-secret-other-data" in set(faults):
            data = dockerconfigjson(OTHER_REGISTRY_HOST, "corp-puller", "corp-pull-password")
        else:
            data = dockerconfigjson(LAB_MIRROR_HOST, "lab-puller", "lab-pull-password")
        secrets.append({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
            "metadata": {"name": name, "namespace": namespace},
            "data": {".dockerconfigjson": data},
        })  # fmt: skip
    return secrets


def seed_pull_secret(lab: Lab, name: str = "nexus-pull") -> None:
    """The embedded control plane's copy of :func:`pull_secret_objects`."""
    for secret in pull_secret_objects(name, lab.faults):
        lab.cluster.put("v1", "secrets", secret)
