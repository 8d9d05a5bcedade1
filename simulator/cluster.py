"""The lab's Kubernetes cluster as it starts: a control plane, two CPU workers, what the
existing production cluster runs (simulator/existing.py: another GPU node, its RDMA plugin,
workloads behind PDBs; fault greenfield leaves them out) and the GPU nodes (joining when the
stand-in Kubespray's scale.yml runs; already joined with greenfield), the MPIJob CRD and
Cilium; and the Node and Pod objects the simulation puts into it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from simulator.existing import (
    other_gpu_node,
    seed_existing_rdma_plugin,
    seed_pull_secret,
    seed_site_taint,
    seed_workloads,
    variant_of,
)
from simulator.host import LabHost

if TYPE_CHECKING:
    from simulator.lab import Lab

KUBERNETES_VERSION = "1.33.5"


class ClusterObjects:
    """The cluster's seeded objects and the nodes that join it: the lab's
    ``cluster_objects``, a collaborator that puts them into the lab's cluster."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab

    def node_object(
        self, name: str, ip: str, *, control_plane: bool, gpu_host: LabHost | None
    ) -> dict:
        runtime = "containerd://2.1.4"
        kernel = "6.12.0-124.8.1.el10_2.x86_64"
        if gpu_host is not None:
            kernel = gpu_host.state.kernel
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

    def seed(self) -> None:
        for ns in ("default", "kube-system", "kube-public"):
            self.lab.cluster.put("v1", "namespaces", {"metadata": {"name": ns}})
        self.lab.cluster.put(
            "v1", "nodes", self.node_object("cp-1", "10.10.1.1", control_plane=True, gpu_host=None)
        )
        for i in (1, 2):
            node = self.node_object(
                f"cpu-worker-{i}", f"10.10.1.{10 + i}", control_plane=False, gpu_host=None
            )
            self.lab.cluster.put("v1", "nodes", node)
        variant = variant_of(self.lab.faults)
        for host in self.lab.gpu_hosts():
            if not variant.joined:
                break  # they join when the stand-in Kubespray's scale.yml runs
            self.lab.cluster.put(
                "v1",
                "nodes",
                self.node_object(host.name, host.state.rdma_ip, control_plane=False, gpu_host=host),
            )
        seed_pull_secret(self.lab)
        if variant.other_gpu_node:
            other_gpu_node(self.lab)
        if variant.workloads:
            seed_site_taint(self.lab)  # before the RDMA plugin: it tolerates no taint
            seed_workloads(self.lab)
        if variant.rdma_plugin:
            seed_existing_rdma_plugin(self.lab)
        if "no-mpi-operator" not in self.lab.faults:
            # kubeflow/mpi-operator manifests/base/kubeflow.org_mpijobs.yaml (v2beta1).
            self.lab.cluster.put("apiextensions.k8s.io/v1", "customresourcedefinitions", {
                "metadata": {"name": "mpijobs.kubeflow.org"},
                "spec": {"group": "kubeflow.org", "scope": "Namespaced",
                         "names": {"kind": "MPIJob", "plural": "mpijobs"},
                         "versions": [{"name": "v2beta1", "served": True, "storage": True}]}})  # fmt: skip
        self.lab.cluster.put(
            "apps/v1",
            "daemonsets",
            {"metadata": {"name": "cilium", "namespace": "kube-system"},
             "spec": {"selector": {"matchLabels": {"k8s-app": "cilium"}}, "template": {
                 "metadata": {"labels": {"k8s-app": "cilium"}},
                 "spec": {"containers": [{"name": "cilium-agent", "image": "quay.io/cilium/cilium:v1.17.6"}]}}},
             "status": {"currentNumberScheduled": 3 + self.lab.nodes, "desiredNumberScheduled": 3 + self.lab.nodes,
                        "numberMisscheduled": 0, "numberReady": 3 + self.lab.nodes}},
        )  # fmt: skip

    def pod(self, namespace: str, name: str, node: str | None, *, owner: str = "DaemonSet",
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
                         # controller: true, as every controller sets on what it creates
                         # (apimachinery metav1.NewControllerRef); kubectl drain and the
                         # wizard's treat a pod without it as one with no controller.
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner, "name": name.rsplit("-", 1)[0],
                                              "uid": "lab", "controller": True}]},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "lab"}]},
            "status": {"phase": phase, "containerStatuses": [{
                "name": "main", "ready": ready, "restartCount": restarts, "image": "lab", "imageID": "lab",
                "state": state}]},
        }  # fmt: skip

    def kubespray_join(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The stand-in scale.yml's join: the GPU host of that name becomes a cluster node
        (Ready, as the lab's seeded nodes are); a node already in the cluster is unchanged."""
        name = str((body or {}).get("name", ""))
        host = self.lab.hosts.get(name)
        if host is None or host.role != "gpu":
            return 200, {"changed": False, "skipped": f"{name} is not a lab GPU node"}
        if self.lab.cluster.node(name) is not None:
            return 200, {"changed": False}
        node = self.node_object(name, host.state.rdma_ip, control_plane=False, gpu_host=host)
        self.lab.cluster.put("v1", "nodes", node)
        self.lab.operator.reaches(name)
        return 200, {"changed": True}
