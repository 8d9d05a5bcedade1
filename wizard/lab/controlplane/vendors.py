"""The site's third-party controllers on the real control plane, which the lab has no
binary of and plays through the API: the GPU Operator's controller and the MPI Operator's.
The real helm installs the real chart (its Deployment, NFD, RBAC, CRDs, the ClusterPolicy);
what the operator's controller then does is played here, as the embedded lab plays it
(wizard/lab/gpu_operator.py, workloads.py), but through the real API and its controllers.

- GPU Operator (NVIDIA/gpu-operator controllers/state_manager.go): once a ClusterPolicy
  exists it labels the GPU nodes ``nvidia.com/gpu.present`` and ``nvidia.com/gpu.deploy.*``
  (labelGPUNodes) and creates one DaemonSet per operand state, owned by the ClusterPolicy,
  each selecting the nodes by its deploy label, tolerating the ClusterPolicy's
  ``daemonsets.tolerations``. The real DaemonSet controller makes their pods; the lab's
  kubelets run them, and what the operands do on a host happens when their pod runs there
  (the driver loads, the toolkit writes containerd's config, the device plugin advertises
  nvidia.com/gpu): see ``operand_started``.
- MPI Operator (kubeflow/mpi-operator v2beta1 pkg/controller/mpi_job_controller.go): for an
  MPIJob it creates the launcher pod, owned by the job; its outcome and log are the embedded
  lab's (computed from where the workers would land).
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from wizard.lab.controlplane.client import Api, ApiError

if TYPE_CHECKING:
    from wizard.lab.lab import Lab

# controllers/object_controls.go: the operand states and their DaemonSets' names.
OPERANDS = {
    "driver": "nvidia-driver-daemonset",
    "container-toolkit": "nvidia-container-toolkit-daemonset",
    "device-plugin": "nvidia-device-plugin-daemonset",
    "dcgm": "nvidia-dcgm",
    "dcgm-exporter": "nvidia-dcgm-exporter",
    "gpu-feature-discovery": "gpu-feature-discovery",
    "operator-validator": "nvidia-operator-validator",
}
CLUSTERPOLICIES = "/apis/nvidia.com/v1/clusterpolicies"
MPIJOBS = "/apis/kubeflow.org/v2beta1/mpijobs"
SYNC_S = 0.5


class Vendors:
    def __init__(self, lab: Lab, api: Api) -> None:
        self.lab = lab
        self.api = api
        # The outcome the simulation decided for a pod it created (an MPIJob's launcher).
        self.planned: dict[tuple[str, str], dict[str, Any]] = {}
        self._policies: set[str] = set()
        self._launched: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, daemon=True, name="lab-vendors")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _loop(self) -> None:
        while not self._stop.wait(SYNC_S):
            try:
                self.sync()
            except (OSError, ApiError, KeyError, ValueError) as exc:
                self.errors = [*self.errors[-20:], str(exc)]

    def sync(self) -> None:
        self._gpu_operator()
        self._mpi_operator()

    # -- the GPU Operator's controller ---------------------------------------------------------

    def _gpu_operator(self) -> None:
        policies = (self.api.get_or_none(CLUSTERPOLICIES) or {}).get("items", [])
        for policy in policies:
            uid = policy["metadata"]["uid"]
            if uid in self._policies:
                continue
            namespace = self._operator_namespace()
            if namespace is None:
                return  # the operator's Deployment is not there yet
            self._reconcile(policy, namespace)
            self._policies.add(uid)

    def _operator_namespace(self) -> str | None:
        found = self.api.get(
            "/apis/apps/v1/deployments?labelSelector=app.kubernetes.io/component%3Dgpu-operator"
        )
        items = found.get("items", [])
        return items[0]["metadata"]["namespace"] if items else None

    def _reconcile(self, policy: dict[str, Any], namespace: str) -> None:
        labels = {"nvidia.com/gpu.present": "true"}
        labels.update({f"nvidia.com/gpu.deploy.{state}": "true" for state in OPERANDS})
        for host in self.lab.gpu_hosts():
            with contextlib.suppress(ApiError):  # a GPU host not (yet) a node
                self.api.merge_patch(
                    f"/api/v1/nodes/{quote(host.name)}", {"metadata": {"labels": labels}}
                )
        spec = policy.get("spec", {})
        tolerations = (spec.get("daemonsets") or {}).get("tolerations") or []
        owner = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
                 "name": policy["metadata"]["name"], "uid": policy["metadata"]["uid"],
                 "controller": True, "blockOwnerDeletion": True}  # fmt: skip
        for state, name in OPERANDS.items():
            app = {"app": name}
            self.api.ensure(f"/apis/apps/v1/namespaces/{quote(namespace)}/daemonsets", {
                "apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": {"name": name, "namespace": namespace, "labels": app,
                             "ownerReferences": [owner]},
                "spec": {"selector": {"matchLabels": app}, "template": {
                    "metadata": {"labels": app},
                    "spec": {"nodeSelector": {f"nvidia.com/gpu.deploy.{state}": "true"},
                             "tolerations": tolerations,
                             "containers": [{"name": state, "image": f"nvcr.io/nvidia/{name}"}]}}},
            })  # fmt: skip

    def operand_started(self, node: str, pod: dict[str, Any]) -> dict[str, str]:
        """What an operand's pod does to its host when it runs there; the resources the
        kubelet then advertises (the device plugin's GPUs)."""
        host = self.lab.hosts.get(node)
        owners = pod.get("metadata", {}).get("ownerReferences") or []
        daemonset = next((o["name"] for o in owners if o.get("kind") == "DaemonSet"), "")
        if host is None or daemonset not in OPERANDS.values():
            return {}
        if daemonset == OPERANDS["driver"]:
            host.gpu_driver = True
        elif daemonset == OPERANDS["container-toolkit"]:
            self.lab._toolkit_configures(host)
        elif daemonset == OPERANDS["device-plugin"]:
            host.gpu_driver = True  # the plugin waits for the driver's validation
            return {"nvidia.com/gpu": str(host.gpus_present)}
        return {}

    # -- the MPI Operator's controller -----------------------------------------------------------

    def _mpi_operator(self) -> None:
        try:
            jobs = self.api.get(MPIJOBS).get("items", [])
        except ApiError as exc:
            if exc.status == 404:  # no MPIJob CRD (fault no-mpi-operator)
                return
            raise
        for job in jobs:
            uid = job["metadata"]["uid"]
            if uid in self._launched or job["metadata"].get("deletionTimestamp"):
                continue
            pod = self.lab._mpijob_launcher(job)
            status = pod.pop("status")
            namespace = pod["metadata"]["namespace"]
            self.planned[(namespace, pod["metadata"]["name"])] = status
            pod.update(apiVersion="v1", kind="Pod")
            containers = pod["spec"].get("containers") or [{"name": "launcher", "image": "lab"}]
            pod["spec"]["containers"] = containers
            self.api.ensure(f"/api/v1/namespaces/{quote(namespace)}/pods", pod)
            self._launched.add(uid)
