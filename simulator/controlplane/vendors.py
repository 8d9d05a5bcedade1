"""The site's third-party controllers on the real control plane, which the lab has no
binary of and plays through the API: the GPU Operator's controller and the MPI Operator's.
The real helm installs the real chart (its Deployment, NFD, RBAC, CRDs, the ClusterPolicy);
what the operator's controller then does is played here, as the embedded lab plays it
(simulator/gpu_operator.py, workloads.py), but through the real API and its controllers.

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
  lab's (computed from where the workers would land). It acts as its Deployment's pod does:
  with the token of its service account, which the project's manifests bind to their
  ClusterRole (``mpi_operator_rbac``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import ssl
import threading
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from simulator.controlplane.client import Api, ApiError
from simulator.gpu_operator_states import OPERANDS, gpu_node_labels

if TYPE_CHECKING:
    from simulator.lab import Lab

CLUSTERPOLICIES = "/apis/nvidia.com/v1/clusterpolicies"
MPIJOBS = "/apis/kubeflow.org/v2beta1/mpijobs"
SYNC_S = 0.5
# controllers/object_controls.go: the hash of the operator's own render of an object.
LAST_APPLIED_HASH = "nvidia.com/last-applied-hash"
# kubeflow/mpi-operator manifests/overlays/standalone (namespace mpi-operator) over
# manifests/base: service-account.yaml, cluster-role.yaml, cluster-role-binding.yaml.
MPI_OPERATOR = "mpi-operator"


def mpi_operator_rbac() -> list[tuple[str, dict[str, Any]]]:
    """(collection, object) of the MPI Operator's identity as its manifests install it: the
    namespace, the service account, the ClusterRole's rules (manifests/base/cluster-role.yaml)
    and the binding of one to the other."""
    core, apps = [""], ["kubeflow.org"]

    def rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict[str, Any]:
        return {"apiGroups": groups, "resources": resources, "verbs": verbs}

    rbac = "/apis/rbac.authorization.k8s.io/v1"
    subject = {"kind": "ServiceAccount", "name": MPI_OPERATOR, "namespace": MPI_OPERATOR}
    return [
        ("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                "metadata": {"name": MPI_OPERATOR}}),
        (f"/api/v1/namespaces/{MPI_OPERATOR}/serviceaccounts",
         {"apiVersion": "v1", "kind": "ServiceAccount",
          "metadata": {"name": MPI_OPERATOR, "namespace": MPI_OPERATOR}}),
        (f"{rbac}/clusterroles", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": MPI_OPERATOR, "labels": {"app": MPI_OPERATOR}},
            "rules": [
                rule(core, ["configmaps", "secrets", "services"], ["create", "list", "watch", "update"]),
                rule(core, ["pods"], ["create", "get", "list", "watch", "delete", "update", "patch"]),
                rule(core, ["pods/exec"], ["create"]),
                rule(core, ["endpoints"], ["create", "get", "update"]),
                rule(core, ["events"], ["create", "patch"]),
                rule(["batch"], ["jobs"], ["create", "list", "update", "watch"]),
                rule(["apiextensions.k8s.io"], ["customresourcedefinitions"], ["create", "get"]),
                rule(apps, ["mpijobs", "mpijobs/finalizers", "mpijobs/status"], ["*"]),
                rule(["coordination.k8s.io"], ["leases"], ["*"]),
                rule(["scheduling.incubator.k8s.io", "scheduling.sigs.dev", "scheduling.volcano.sh"],
                     ["queues", "podgroups"], ["*"]),
            ],
        }),
        (f"{rbac}/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": MPI_OPERATOR, "labels": {"app": MPI_OPERATOR}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": MPI_OPERATOR},
            "subjects": [subject],
        }),
    ]  # fmt: skip


# Each operand state's section of the ClusterPolicy spec (api/nvidia/v1 clusterpolicy_types.go
# ClusterPolicySpec: driver, toolkit, devicePlugin, dcgm, dcgmExporter, gfd, validator).
POLICY_SECTIONS = {
    "driver": "driver",
    "container-toolkit": "toolkit",
    "device-plugin": "devicePlugin",
    "dcgm": "dcgm",
    "dcgm-exporter": "dcgmExporter",
    "gpu-feature-discovery": "gfd",
    "operator-validator": "validator",
}


def operand_template(spec: dict[str, Any], state: str, name: str) -> dict[str, Any]:
    """An operand's pod template as the operator renders it from the ClusterPolicy
    (controllers/object_controls.go Transform<State>: the section's image from repository,
    image and version, its imagePullSecrets, env, args and resources; the common
    ``daemonsets`` tolerations and priorityClassName). The section's serviceMonitor is
    rendered into a ServiceMonitor, not the pod (assets/state-dcgm-exporter/
    0500_service_monitor.yaml), so it is left out here as the operator leaves it out."""
    section = spec.get(POLICY_SECTIONS[state]) or {}
    common = spec.get("daemonsets") or {}
    image = "/".join(str(p) for p in (section.get("repository"), section.get("image")) if p)
    version = section.get("version")
    container: dict[str, Any] = {
        "name": state,
        "image": (f"{image}:{version}" if image and version else image) or f"nvcr.io/nvidia/{name}",
    }
    for key in ("env", "args", "resources"):
        if section.get(key):
            container[key] = section[key]
    pod: dict[str, Any] = {
        "nodeSelector": {f"nvidia.com/gpu.deploy.{state}": "true"},
        "tolerations": common.get("tolerations") or [],
        "containers": [container],
    }
    secrets = section.get("imagePullSecrets") or []
    if secrets:
        pod["imagePullSecrets"] = [{"name": s} if isinstance(s, str) else s for s in secrets]
    return {"metadata": {"labels": {"app": name}}, "spec": pod}


class Vendors:
    """The vendors' controllers. The GPU Operator's acts as its pod does: with its service
    account's token (``operator_api``), so that the chart's own RBAC (templates/
    clusterrole.yaml, role.yaml) judges what it does; finding the operator's namespace and
    service account is the lab's (a pod knows them from the downward API). The MPI
    Operator's acts with its own service account's token (``install_mpi_operator``)."""

    def __init__(self, lab: Lab, api: Api, anonymous: ssl.SSLContext | None = None) -> None:
        self.lab = lab
        self.api = api
        self.anonymous = anonymous  # TLS to the API server without a client certificate
        self._operator: tuple[tuple[str, str], Api] | None = None
        self._mpi: Api | None = None
        # The outcome the simulation decided for a pod it created (an MPIJob's launcher).
        self.planned: dict[tuple[str, str], dict[str, Any]] = {}
        self._policies: set[tuple[str, Any]] = set()
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
        # Noticing a new ClusterPolicy is the lab's (the operator watches them); what the
        # controller then writes goes through ``operator_api``.
        policies = (self.api.get_or_none(CLUSTERPOLICIES) or {}).get("items", [])
        if policies:
            self._label_gpu_nodes()
        for policy in policies:
            # Reconciled again whenever its spec changes (a helm upgrade re-renders it).
            seen = (policy["metadata"]["uid"], policy["metadata"].get("generation"))
            if seen in self._policies:
                continue
            namespace = self._operator_namespace()
            if namespace is None:
                return  # the operator's Deployment is not there yet
            self._reconcile(policy, namespace)
            self._policies.add(seen)

    def _operator_namespace(self) -> str | None:
        found = self.api.get(
            "/apis/apps/v1/deployments?labelSelector=app.kubernetes.io/component%3Dgpu-operator"
        )
        items = found.get("items", [])
        if not items:
            return None
        namespace = items[0]["metadata"]["namespace"]
        template = (items[0].get("spec") or {}).get("template") or {}
        account = (template.get("spec") or {}).get("serviceAccountName") or "default"
        if self.anonymous is not None and (
            self._operator is None or self._operator[0] != (namespace, account)
        ):
            identity = self.api.as_service_account(namespace, account, self.anonymous)
            self._operator = ((namespace, account), identity)
        return namespace

    @property
    def operator_api(self) -> Api:
        """The API as the GPU Operator's pod (the admin's when no TLS context was given)."""
        return self._operator[1] if self._operator is not None else self.api

    def _label_gpu_nodes(self) -> None:
        """labelGPUNodes, as the operator runs it on every reconcile: each node with an
        NVIDIA GPU (a lab GPU host, or a node that already shows one: the existing H100)
        gets the present and deploy labels once, a node that joins later included."""
        labels = gpu_node_labels()
        hosts = {h.name for h in self.lab.gpu_hosts()}
        for node in self.operator_api.get("/api/v1/nodes").get("items", []):
            meta = node["metadata"]
            have = meta.get("labels") or {}
            gpu = meta["name"] in hosts or have.get("nvidia.com/gpu.present") == "true"
            if gpu and any(have.get(k) != v for k, v in labels.items()):
                with contextlib.suppress(ApiError):
                    self.operator_api.merge_patch(
                        f"/api/v1/nodes/{quote(meta['name'])}", {"metadata": {"labels": labels}}
                    )

    def _reconcile(self, policy: dict[str, Any], namespace: str) -> None:
        """Each operand state's DaemonSet rendered from the ClusterPolicy: created, or
        replaced when its render changed. The operator tells by the hash of its own render
        in the ``nvidia.com/last-applied-hash`` annotation, not by comparing with the live
        object, which the API server has defaulted (controllers/object_controls.go
        isDaemonSetSpecChanged, utils.GetObjectHash); the real DaemonSet controller then
        rolls the pods on every node the DaemonSet selects."""
        api = self.operator_api
        owner = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
                 "name": policy["metadata"]["name"], "uid": policy["metadata"]["uid"],
                 "controller": True, "blockOwnerDeletion": True}  # fmt: skip
        collection = f"/apis/apps/v1/namespaces/{quote(namespace)}/daemonsets"
        for state, name in OPERANDS.items():
            app = {"app": name}
            body = {
                "apiVersion": "apps/v1", "kind": "DaemonSet",
                "metadata": {"name": name, "namespace": namespace, "labels": app,
                             "ownerReferences": [owner]},
                "spec": {"selector": {"matchLabels": app},
                         "template": operand_template(policy.get("spec") or {}, state, name)},
            }  # fmt: skip
            digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
            body["metadata"]["annotations"] = {LAST_APPLIED_HASH: digest}
            if api.ensure(collection, body) is not None:
                continue
            live = api.get(f"{collection}/{quote(name)}")
            annotations = live["metadata"].get("annotations") or {}
            if annotations.get(LAST_APPLIED_HASH) == digest:
                continue
            body["metadata"]["annotations"] = {**annotations, LAST_APPLIED_HASH: digest}
            body["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
            body["spec"] = {**live["spec"], "template": body["spec"]["template"]}
            api.request("PUT", f"{collection}/{quote(name)}", body)

    def operand_started(self, node: str, pod: dict[str, Any]) -> dict[str, str]:
        """What an operand's pod does to its host when it runs there; the resources the
        kubelet then advertises (the device plugin's GPUs)."""
        host = self.lab.hosts.get(node)
        owners = pod.get("metadata", {}).get("ownerReferences") or []
        daemonset = next((o["name"] for o in owners if o.get("kind") == "DaemonSet"), "")
        if host is None or daemonset not in OPERANDS.values():
            return {}
        if daemonset == OPERANDS["driver"]:
            host.state.gpu_driver = True
        elif daemonset == OPERANDS["container-toolkit"]:
            self.lab.operator.toolkit_configures(host)
        elif daemonset == OPERANDS["device-plugin"]:
            host.state.gpu_driver = True  # the plugin waits for the driver's validation
            return {"nvidia.com/gpu": str(host.state.gpus_present)}
        return {}

    # -- the MPI Operator's controller -----------------------------------------------------------

    def install_mpi_operator(self) -> None:
        """Its identity and RBAC, as the site installed the operator (with the admin's
        credentials); from then on its controller acts with its service account's token."""
        for collection, obj in mpi_operator_rbac():
            self.api.ensure(collection, obj)
        self._mpi = (
            self.api
            if self.anonymous is None
            else self.api.as_service_account(MPI_OPERATOR, MPI_OPERATOR, self.anonymous)
        )

    def _mpi_operator(self) -> None:
        if self._mpi is None:
            return  # not installed (fault no-mpi-operator)
        try:
            jobs = self._mpi.get(MPIJOBS).get("items", [])
        except ApiError as exc:
            if exc.status == 404:  # no MPIJob CRD (fault no-mpi-operator)
                return
            raise
        for job in jobs:
            uid = job["metadata"]["uid"]
            if uid in self._launched or job["metadata"].get("deletionTimestamp"):
                continue
            pod = self.lab.workloads.mpijob_launcher(job)
            status = pod.pop("status")
            namespace = pod["metadata"]["namespace"]
            self.planned[(namespace, pod["metadata"]["name"])] = status
            pod.update(apiVersion="v1", kind="Pod")
            containers = pod["spec"].get("containers") or [{"name": "launcher", "image": "lab"}]
            pod["spec"]["containers"] = containers
            self._mpi.ensure(f"/api/v1/namespaces/{quote(namespace)}/pods", pod)
            self._launched.add(uid)
