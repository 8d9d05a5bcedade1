"""The lab's kubelets on the real control plane: what a cluster gets from its machines, and
nothing else, played through the API the way kwok does (kubernetes-sigs/kwok
pkg/kwok/controllers: node_controller.go, node_lease_controller.go, pod_controller.go).

- Each lab kubelet acts as its node, with its own client certificate (CN
  ``system:node:NAME``, O ``system:nodes``, certs.py), which the Node authorizer and the
  NodeRestriction admission plugin confine to its own Node, Lease and pods: it lists its
  pods by ``spec.nodeName`` (the Node authorizer refuses any other list), may set only
  the kubelet's own labels (k8s.io/kubelet pkg/apis IsKubeletLabel); the node-role labels
  are the installer's (kubeadm's mark-control-plane, Kubespray's node labels), set with
  the admin's credentials after the registration.
- Each lab node registers its Node object with its status (capacity, allocatable, node
  info, Ready) as the kubelet's registerWithAPIServer does (pkg/kubelet/kubelet_node_status.go),
  and renews its Lease in kube-node-lease every 10 s (the kubelet's nodeLeaseDurationSeconds
  40, renewed at a quarter of it: pkg/kubelet/nodelease), so the node lifecycle controller
  keeps it Ready.
- A pod the scheduler (or its author) bound to a lab node is run by the simulated host as the
  embedded lab runs it (simulator/workloads.py): a pod with restartPolicy Never ends
  Succeeded or Failed, any other pod is Running; the status goes to pods/status as the
  kubelet's status manager writes it (pkg/kubelet/status/status_manager.go).
- A pod being deleted (deletionTimestamp set) on a lab node is removed with grace 0 once its
  containers "stopped", as the kubelet does when it finishes a graceful deletion.
- The RDMA shared device plugin's pod running on a node makes the kubelet advertise the
  plugin's resource in the node's capacity and allocatable (the device manager's
  pkg/kubelet/cm/devicemanager: a registered plugin's devices become node resources).
- Container logs: the API server fetches pods/log from the kubelet's port on the node's
  address (pkg/kubelet/client/kubelet_client.go, the port in
  status.daemonEndpoints.kubeletEndpoint); the lab serves that endpoint over HTTPS on
  127.0.0.1 (every lab node's InternalIP is 127.0.0.1 on the real control plane, so no
  request leaves loopback) and answers with the simulated host's output, for the pods the
  kubelets run (as the kubelet serves logs from its own pods, not from the API). A pod
  is the kubelet's from its admission, before any status of it is written (the kubelet's
  pod manager, which pkg/kubelet/server/server.go getContainerLogs reads, holds it from
  HandlePodAdditions on), and until it is gone from the API: so a pod the API shows
  Running or Succeeded always has its log on its node.
- Not served: a pod's port through the API server's pods/proxy (the DCGM exporter's
  /metrics). The API server refuses to proxy to a loopback or link-local pod IP
  (pkg/registry/core/pod/strategy.go ResourceLocation, k8s.io/apimachinery pkg/util/proxy
  IsProxyableIP), and every lab pod's IP is 127.0.0.1, so dcgm.read is a skip naming that
  rule on this plane (the embedded lab serves the metrics). A faithful way would give each
  pod an address outside 127/8 on lo (``ip addr add`` as root) and serve the exporter there;
  not done: it changes the network configuration of the machine, which concurrent test
  runs share and a killed run would leave behind, and it needs root where the rest of the
  real plane does not.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import ssl
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote, unquote, urlparse

from simulator.controlplane.client import Api, ApiError
from simulator.kubeapi import SHUTDOWN_POLL_S

log = logging.getLogger(__name__)

LEASE_RENEW_S = 10.0
LEASE_DURATION_S = 40
POLL_S = 0.3

RunPod = Callable[[dict[str, Any]], dict[str, Any]]  # a pod -> its status (may run it)
PodLogs = Callable[[dict[str, Any]], str]
PluginResources = Callable[[str, dict[str, Any]], dict[str, str]]  # node, plugin pod -> res
Identity = Callable[[str], Api]  # node name -> the API as that node's kubelet

# k8s.io/kubelet pkg/apis/well_known_labels.go: the labels a kubelet may set on its Node
# (NodeRestriction refuses any other kubernetes.io / k8s.io label from a node).
KUBELET_LABELS = frozenset({
    "kubernetes.io/hostname", "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type", "node.kubernetes.io/instance-type",
    "kubernetes.io/os", "kubernetes.io/arch", "beta.kubernetes.io/os", "beta.kubernetes.io/arch",
})  # fmt: skip
KUBELET_LABEL_NAMESPACES = ("kubelet.kubernetes.io", "node.kubernetes.io")


def kubelet_may_set(label: str) -> bool:
    """NodeRestriction's getForbiddenLabels, inverted: not node-restriction.kubernetes.io,
    and a kubernetes.io / k8s.io label only when it is a kubelet label."""
    namespace = label.split("/", 1)[0] if "/" in label else ""

    def within(domain: str) -> bool:
        return namespace == domain or namespace.endswith("." + domain)

    if within("node-restriction.kubernetes.io"):
        return False
    if not (within("kubernetes.io") or within("k8s.io")):
        return True
    return label in KUBELET_LABELS or any(within(d) for d in KUBELET_LABEL_NAMESPACES)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Kubelets:
    """Every lab node's kubelet, in two threads (heartbeats; pods) and an HTTPS endpoint."""

    def __init__(
        self,
        installer: Api,
        identity: Identity,
        serving: tuple[str, str],
        client_ca: str,
        run_pod: RunPod,
        pod_logs: PodLogs,
        plugin_resources: PluginResources | None = None,
    ) -> None:
        # The admin's API, for what the cluster's installer does to a node it joined.
        self.installer = installer
        self.identity = identity
        self.apis: dict[str, Api] = {}
        # Each node's admitted pods (its pod manager), by (namespace, name); the pods'
        # thread writes it, the log endpoint's threads read it.
        self._admitted: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        self._admitted_lock = threading.Lock()
        self.run_pod = run_pod
        self.pod_logs = pod_logs
        self.plugin_resources = plugin_resources
        self.nodes: set[str] = set()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._advertised: dict[str, dict[str, str]] = {}
        self.errors: list[str] = []
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*serving)
        # Only the API server (its kubelet client certificate, signed by the lab's CA).
        context.load_verify_locations(client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
        self.endpoint = _KubeletEndpoint(("127.0.0.1", 0), _Handler)
        self.endpoint.kubelets = self  # type: ignore[attr-defined]
        self.endpoint.socket = context.wrap_socket(self.endpoint.socket, server_side=True)
        self.port = self.endpoint.server_address[1]

    # -- nodes --------------------------------------------------------------------------------

    def api_of(self, node: str) -> Api:
        """The API as this node's kubelet (its own client certificate)."""
        if node not in self.apis:
            self.apis[node] = self.identity(node)
        return self.apis[node]

    def register(self, node: dict[str, Any]) -> None:
        """Create the Node as the kubelet registers it (with the labels a kubelet may set),
        then its status and its Lease; then the installer's labels, as kubeadm or
        Kubespray adds them once the node joined."""
        node = copy.deepcopy(node)
        name = node["metadata"]["name"]
        api = self.api_of(name)
        labels = node["metadata"].get("labels") or {}
        node["metadata"]["labels"] = {k: v for k, v in labels.items() if kubelet_may_set(k)}
        installers = {k: v for k, v in labels.items() if not kubelet_may_set(k)}
        status = node.pop("status", {})
        status["addresses"] = [{"type": "InternalIP", "address": "127.0.0.1"},
                               {"type": "Hostname", "address": name}]  # fmt: skip
        status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": self.port}}
        now = _now()
        status["conditions"] = [
            {"type": t, "status": "False", "reason": r, "message": m,
             "lastHeartbeatTime": now, "lastTransitionTime": now}
            for t, r, m in (("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                            ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                            ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"))
        ] + [{"type": "Ready", "status": "True", "reason": "KubeletReady",
              "message": "kubelet is posting ready status", "lastHeartbeatTime": now,
              "lastTransitionTime": now}]  # fmt: skip
        node.setdefault("apiVersion", "v1")
        node.setdefault("kind", "Node")
        api.ensure("/api/v1/nodes", node)
        api.merge_patch(f"/api/v1/nodes/{quote(name)}/status", {"status": status})
        if installers:
            self.installer.merge_patch(
                f"/api/v1/nodes/{quote(name)}", {"metadata": {"labels": installers}}
            )
        self.nodes.add(name)
        self._renew(name)

    def _renew(self, name: str) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{quote(name)}"
        spec = {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION_S,
                "renewTime": _micro_now()}  # fmt: skip
        api = self.api_of(name)
        try:
            api.merge_patch(path, {"spec": spec})
        except ApiError as exc:
            if exc.status != 404:
                raise
            node = api.get(f"/api/v1/nodes/{quote(name)}")
            api.ensure("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": "kube-node-lease", "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": name,
                     "uid": node["metadata"]["uid"]}]},
                "spec": spec,
            })  # fmt: skip

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        targets = {
            "serve_forever": functools.partial(
                self.endpoint.serve_forever, poll_interval=SHUTDOWN_POLL_S
            ),
            "_heartbeats": self._heartbeats,
            "_pods": self._pods,
        }
        for name, target in targets.items():
            thread = threading.Thread(target=target, daemon=True, name=f"lab-kubelet-{name}")
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        self.endpoint.shutdown()
        self.endpoint.server_close()
        for thread in self._threads:
            thread.join(5)

    def _heartbeats(self) -> None:
        while not self._stop.wait(LEASE_RENEW_S):
            for name in sorted(self.nodes):
                try:
                    self._renew(name)
                except (OSError, ApiError) as exc:
                    self._note(f"lease of {name}: {exc}")

    def _pods(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                self.sync_pods()
            except (OSError, ApiError, ValueError) as exc:
                self._note(f"pods: {exc}")

    def _note(self, message: str) -> None:
        """A kubelet's trouble, logged once (the same trouble recurs on every pass)."""
        if message not in self.errors:
            log.warning("lab kubelet: %s", message)
        self.errors = [*[e for e in self.errors[-20:] if e != message], message]

    # -- pods ----------------------------------------------------------------------------------

    def sync_pods(self) -> None:
        """One pass of every lab kubelet over its pods: run the new ones, finish deletions.

        Each node's pods are admitted (their logs served) as its listing finds them, before
        any of their status is written, and a pod no longer listed is forgotten; a node
        whose listing or sync fails keeps what it had admitted and the other nodes go on
        (the failure is noted, as the kubelet logs a failed sync and retries it)."""
        for node in sorted(self.nodes):
            if self._stop.is_set():  # the lab is stopping: no pod starts now
                return
            try:
                self._sync_node(node)
            except (OSError, ApiError, ValueError) as exc:
                self._note(f"pods of {node}: {exc}")

    def _sync_node(self, node: str) -> None:
        mine = f"/api/v1/pods?fieldSelector={quote('spec.nodeName=' + node)}"
        pods = self.api_of(node).get(mine).get("items", [])
        admitted = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
        with self._admitted_lock:
            self._admitted[node] = admitted
        for pod in pods:
            if self._stop.is_set():
                return
            self._sync_pod(node, pod)

    def _sync_pod(self, node: str, pod: dict[str, Any]) -> None:
        api = self.api_of(node)
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{quote(meta['namespace'])}/pods/{quote(meta['name'])}"
        if meta.get("deletionTimestamp"):
            with contextlib.suppress(ApiError):
                api.request("DELETE", path, {
                    "apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                    "preconditions": {"uid": meta["uid"]}})  # fmt: skip
            return
        if pod.get("status", {}).get("phase", "Pending") != "Pending":
            return
        status = self.pod_status(pod)
        try:
            api.merge_patch(path + "/status", {"status": status})
        except ApiError as exc:
            if exc.status not in (404, 409):  # gone, or changed meanwhile: next pass
                self._note(f"status of pod {meta['namespace']}/{meta['name']}: {exc}")
            return
        if status["phase"] == "Running" and self.plugin_resources is not None:
            self._advertise(node, pod)

    def pod_status(self, pod: dict[str, Any]) -> dict[str, Any]:
        """What the kubelet reports for a pod the simulated host ran."""
        simulated = self.run_pod(copy.deepcopy(pod))
        now = _now()
        phase = simulated.get("phase", "Running")
        running = phase == "Running"
        statuses = []
        for container in simulated.get("containerStatuses", []):
            state = container.get("state", {})
            if "terminated" in state:
                state = {"terminated": {"startedAt": now, "finishedAt": now,
                                        **state["terminated"]}}  # fmt: skip
                if phase == "Failed":
                    state["terminated"].update(exitCode=1, reason="Error")
            elif "running" in state:
                state = {"running": {"startedAt": now}}
            statuses.append({**container, "state": state,
                             "imageID": container.get("imageID") or "lab://" + container.get("image", ""),
                             "containerID": f"containerd://lab-{pod['metadata']['uid'][:8]}",
                             "started": running})  # fmt: skip
        ready = "True" if running else "False"
        conditions = [
            {"type": t, "status": s, "lastTransitionTime": now}
            for t, s in (("PodReadyToStartContainers", "True"), ("Initialized", "True"),
                         ("Ready", ready), ("ContainersReady", ready), ("PodScheduled", "True"))
        ]  # fmt: skip
        if not running:
            for condition in conditions:
                if condition["type"] in ("Ready", "ContainersReady"):
                    condition["reason"] = "PodCompleted"
        # status.qosClass is the API server's (set at creation, immutable): not reported.
        return {"phase": phase, "conditions": conditions, "hostIP": "127.0.0.1",
                "hostIPs": [{"ip": "127.0.0.1"}], "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}],
                "startTime": now, "containerStatuses": statuses}  # fmt: skip

    def _advertise(self, node: str, pod: dict[str, Any]) -> None:
        """A device plugin's pod registered with this node's kubelet: its resources in
        the node's capacity and allocatable."""
        assert self.plugin_resources is not None
        resources = self.plugin_resources(node, pod)
        if not resources or self._advertised.get(node, {}) == {
            **self._advertised.get(node, {}),
            **resources,
        }:
            return
        self._advertised.setdefault(node, {}).update(resources)
        self.api_of(node).merge_patch(f"/api/v1/nodes/{quote(node)}/status",
                                      {"status": {"capacity": resources, "allocatable": resources}})  # fmt: skip

    # -- the kubelet's HTTPS endpoint ------------------------------------------------------------

    def container_log(self, namespace: str, name: str) -> str | None:
        """The log of a pod one of the lab's kubelets runs (None: not on these nodes)."""
        with self._admitted_lock:
            pod = next(
                (pods[(namespace, name)] for pods in self._admitted.values()
                 if (namespace, name) in pods),
                None,
            )  # fmt: skip
        if pod is None:
            return None
        return self.pod_logs(pod)


class _KubeletEndpoint(ThreadingHTTPServer):
    daemon_threads = True


class _Handler(BaseHTTPRequestHandler):
    """GET /containerLogs/{namespace}/{pod}/{container} (pkg/kubelet/server/server.go)."""

    def log_message(self, *args: object) -> None:  # the lab's output stays the wizard's
        pass

    def do_GET(self) -> None:
        kubelets: Kubelets = self.server.kubelets  # type: ignore[attr-defined]
        parts = [unquote(p) for p in urlparse(self.path).path.strip("/").split("/")]
        if parts == ["healthz"]:
            return self._send(200, "ok")
        if len(parts) != 4 or parts[0] != "containerLogs":
            return self._send(404, "404 page not found")
        try:
            text = kubelets.container_log(parts[1], parts[2])
        except (OSError, ApiError) as exc:
            return self._send(500, f"lab kubelet: {exc}")
        if text is None:
            return self._send(404, f'pod "{parts[2]}" not found on this kubelet')
        self._send(200, text)

    def _send(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
