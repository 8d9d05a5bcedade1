"""What an existing production cluster already runs beside the new nodes, for the lab's
brownfield variants: a GPU node of another kind with its own RDMA device plugin.

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
from typing import TYPE_CHECKING, Any

from wizard.lab.kubeapi import owner_reference

if TYPE_CHECKING:
    from wizard.lab.lab import Lab

OTHER_GPU_NODE = ("gpu-h100-01", "10.10.1.40")
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


def other_gpu_node(lab: Lab) -> dict:
    """gpu-h100-01, an existing H100 node (eight GPUs, ConnectX), created once."""
    name, ip = OTHER_GPU_NODE
    node = lab.cluster.node(name)
    if node is None:
        node = lab._node_object(name, ip, control_plane=False, gpu_host=None)
        node["metadata"]["labels"]["nvidia.com/gpu.present"] = "true"
        node["status"]["capacity"]["nvidia.com/gpu"] = "8"
        node["status"]["allocatable"]["nvidia.com/gpu"] = "8"
        node = lab.cluster.put("v1", "nodes", node)
    return node


def seed_existing_rdma_plugin(lab: Lab) -> None:
    other = other_gpu_node(lab)
    namespace = "kube-system"
    lab.cluster.put("v1", "configmaps", {
        "metadata": {"name": UPSTREAM_CONFIGMAP, "namespace": namespace},
        "data": {"config.json": json.dumps(UPSTREAM_CONFIG, indent=4) + "\n"},
    })  # fmt: skip
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
    # Untainted nodes only: the upstream DaemonSet tolerates nothing (cp-1 is tainted).
    nodes = [
        n for n in lab.cluster.list("v1", "nodes", None) if not n.get("spec", {}).get("taints")
    ]
    ds = lab.cluster.put("apps/v1", "daemonsets", {
        "metadata": {"name": UPSTREAM_DAEMONSET, "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"name": UPSTREAM_DAEMONSET}}, "template": template},
        "status": {"currentNumberScheduled": len(nodes), "desiredNumberScheduled": len(nodes),
                   "numberMisscheduled": 0, "numberReady": len(nodes)},
    })  # fmt: skip
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


def pull_secret_objects(name: str = "nexus-pull") -> list[dict[str, Any]]:
    """The site's pull secret for its mirror, as a cluster that already pulls from it has it
    in the namespaces its workloads use (kube-system, default), and nowhere else: the
    kubelet reads a pod's imagePullSecrets in the pod's own namespace, so a new namespace
    (gpu-operator) needs its own copy. Made as `kubectl create secret docker-registry` makes
    it (type kubernetes.io/dockerconfigjson, an auths entry for the server). Both control
    planes seed these."""
    auth = base64.b64encode(b"lab-puller:lab-pull-password").decode()
    config = {"auths": {LAB_MIRROR_HOST: {"username": "lab-puller",
                                          "password": "lab-pull-password", "auth": auth}}}  # fmt: skip
    data = base64.b64encode(json.dumps(config).encode()).decode()
    return [
        {
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
            "metadata": {"name": name, "namespace": namespace},
            "data": {".dockerconfigjson": data},
        }
        for namespace in ("kube-system", "default")
    ]  # fmt: skip


def seed_pull_secret(lab: Lab, name: str = "nexus-pull") -> None:
    """The embedded control plane's copy of :func:`pull_secret_objects`."""
    for secret in pull_secret_objects(name):
        lab.cluster.put("v1", "secrets", secret)
