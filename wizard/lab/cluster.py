"""The lab's Kubernetes cluster as it starts: a control plane, two CPU workers and the
GPU nodes (joined, or joining when the stand-in Kubespray's scale.yml runs), the MPIJob
CRD and Cilium; and the Node and Pod objects the simulation puts into it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wizard.lab.existing import seed_existing_rdma_plugin, seed_pull_secret
from wizard.lab.host import LabHost

if TYPE_CHECKING:
    from wizard.lab.lab import Lab

KUBERNETES_VERSION = "1.33.5"


class ClusterMixin:
    """The cluster's seeded objects and the nodes that join it."""

    def _node_object(
        self: Lab, name: str, ip: str, *, control_plane: bool, gpu_host: LabHost | None
    ) -> dict:
        runtime = "containerd://2.1.4"
        kernel = "6.12.0-124.8.1.el10_2.x86_64"
        if gpu_host is not None:
            kernel = gpu_host.kernel
            if "containerd-1.7" in gpu_host.faults:
                runtime = "containerd://1.7.27"
        labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }
        if control_plane:
            labels["node-role.kubernetes.io/control-plane"] = ""
        resources = {
            "cpu": "128",
            "memory": "2113515520Ki",
            "pods": "110",
            "ephemeral-storage": "936Gi",
        }
        return {
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}
            if control_plane
            else {},
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "kubelet is posting ready status"}],
                "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
                "capacity": dict(resources),
                "allocatable": dict(resources),
                "nodeInfo": {
                    "architecture": "amd64", "bootID": "", "containerRuntimeVersion": runtime,
                    "kernelVersion": kernel, "kubeProxyVersion": "", "kubeletVersion": f"v{KUBERNETES_VERSION}",
                    "machineID": "", "operatingSystem": "linux",
                    "osImage": "Red Hat Enterprise Linux 10.2 (Coughlan)", "systemUUID": "",
                },
            },
        }  # fmt: skip

    def _seed_cluster(self: Lab) -> None:
        for ns in ("default", "kube-system", "kube-public"):
            self.cluster.put("v1", "namespaces", {"metadata": {"name": ns}})
        self.cluster.put(
            "v1", "nodes", self._node_object("cp-1", "10.10.1.1", control_plane=True, gpu_host=None)
        )
        for i in (1, 2):
            node = self._node_object(
                f"cpu-worker-{i}", f"10.10.1.{10 + i}", control_plane=False, gpu_host=None
            )
            self.cluster.put("v1", "nodes", node)
        for host in self.gpu_hosts():
            if "not-joined" in self.faults:
                break  # they join when the stand-in Kubespray's scale.yml runs
            self.cluster.put(
                "v1",
                "nodes",
                self._node_object(host.name, host.rdma_ip, control_plane=False, gpu_host=host),
            )
        seed_pull_secret(self)
        if "existing-rdma-plugin" in self.faults:
            seed_existing_rdma_plugin(self)
        if "no-mpi-operator" not in self.faults:
            # kubeflow/mpi-operator manifests/base/kubeflow.org_mpijobs.yaml (v2beta1).
            self.cluster.put("apiextensions.k8s.io/v1", "customresourcedefinitions", {
                "metadata": {"name": "mpijobs.kubeflow.org"},
                "spec": {"group": "kubeflow.org", "scope": "Namespaced",
                         "names": {"kind": "MPIJob", "plural": "mpijobs"},
                         "versions": [{"name": "v2beta1", "served": True, "storage": True}]}})  # fmt: skip
        self.cluster.put(
            "apps/v1",
            "daemonsets",
            {"metadata": {"name": "cilium", "namespace": "kube-system"},
             "spec": {"selector": {"matchLabels": {"k8s-app": "cilium"}}, "template": {
                 "metadata": {"labels": {"k8s-app": "cilium"}},
                 "spec": {"containers": [{"name": "cilium-agent", "image": "quay.io/cilium/cilium:v1.17.6"}]}}},
             "status": {"currentNumberScheduled": 3 + self.nodes, "desiredNumberScheduled": 3 + self.nodes,
                        "numberMisscheduled": 0, "numberReady": 3 + self.nodes}},
        )  # fmt: skip

    def _pod(self: Lab, namespace: str, name: str, node: str | None, *, owner: str = "DaemonSet",
             phase: str = "Running", ready: bool = True, restarts: int = 0, waiting: str | None = None) -> dict:  # fmt: skip
        state: dict[str, Any] = {"running": {"startedAt": "2026-11-30T00:00:00Z"}}
        if waiting:
            state = {
                "waiting": {
                    "reason": waiting,
                    "message": "back-off 5m0s restarting failed container",
                }
            }
        if phase == "Succeeded":
            state = {"terminated": {"exitCode": 0, "reason": "Completed"}}
        return {
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": name.rsplit("-", 1)[0]},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner, "name": name.rsplit("-", 1)[0],
                                              "uid": "lab"}]},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "lab"}]},
            "status": {"phase": phase, "containerStatuses": [{
                "name": "main", "ready": ready, "restartCount": restarts, "image": "lab", "imageID": "lab",
                "state": state}]},
        }  # fmt: skip

    def _kubespray_join(self: Lab, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The stand-in scale.yml's join: the GPU host of that name becomes a cluster node
        (Ready, as the lab's seeded nodes are); a node already in the cluster is unchanged."""
        name = str((body or {}).get("name", ""))
        host = self.hosts.get(name)
        if host is None or host.role != "gpu":
            return 200, {"changed": False, "skipped": f"{name} is not a lab GPU node"}
        if self.cluster.node(name) is not None:
            return 200, {"changed": False}
        node = self._node_object(name, host.rdma_ip, control_plane=False, gpu_host=host)
        self.cluster.put("v1", "nodes", node)
        return 200, {"changed": True}
