"""The lab's kubelets on the real control plane: what a cluster gets from its machines, and
nothing else, played through the API the way kwok does (kubernetes-sigs/kwok
pkg/kwok/controllers: node_controller.go, node_lease_controller.go, pod_controller.go).

- Each lab node registers its Node object with its status (capacity, allocatable, node
  info, Ready) as the kubelet's registerWithAPIServer does (pkg/kubelet/kubelet_node_status.go),
  and renews its Lease in kube-node-lease every 10 s (the kubelet's nodeLeaseDurationSeconds
  40, renewed at a quarter of it: pkg/kubelet/nodelease), so the node lifecycle controller
  keeps it Ready.
- A pod the scheduler (or its author) bound to a lab node is run by the simulated host as the
  embedded lab runs it (wizard/lab/workloads.py): a pod with restartPolicy Never ends
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
  request leaves loopback) and answers with the simulated host's output.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import ssl
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote, unquote, urlparse

from wizard.lab.controlplane.client import Api, ApiError

log = logging.getLogger(__name__)

LEASE_RENEW_S = 10.0
LEASE_DURATION_S = 40
POLL_S = 0.3

RunPod = Callable[[dict[str, Any]], dict[str, Any]]  # a pod -> its status (may run it)
PodLogs = Callable[[dict[str, Any]], str]
PluginResources = Callable[[str, dict[str, Any]], dict[str, str]]  # node, plugin pod -> res


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Kubelets:
    """Every lab node's kubelet, in two threads (heartbeats; pods) and an HTTPS endpoint."""

    def __init__(
        self,
        api: Api,
        serving: tuple[str, str],
        client_ca: str,
        run_pod: RunPod,
        pod_logs: PodLogs,
        plugin_resources: PluginResources | None = None,
    ) -> None:
        self.api = api
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

    def register(self, node: dict[str, Any]) -> None:
        """Create the Node as the kubelet registers it, then its status and its Lease."""
        node = copy.deepcopy(node)
        name = node["metadata"]["name"]
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
        self.api.ensure("/api/v1/nodes", node)
        self.api.merge_patch(f"/api/v1/nodes/{quote(name)}/status", {"status": status})
        self.nodes.add(name)
        self._renew(name)

    def _renew(self, name: str) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{quote(name)}"
        spec = {"holderIdentity": name, "leaseDurationSeconds": LEASE_DURATION_S,
                "renewTime": _micro_now()}  # fmt: skip
        try:
            self.api.merge_patch(path, {"spec": spec})
        except ApiError as exc:
            if exc.status != 404:
                raise
            node = self.api.get(f"/api/v1/nodes/{quote(name)}")
            self.api.ensure("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "namespace": "kube-node-lease", "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": name,
                     "uid": node["metadata"]["uid"]}]},
                "spec": spec,
            })  # fmt: skip

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        for target in (self.endpoint.serve_forever, self._heartbeats, self._pods):
            thread = threading.Thread(
                target=target, daemon=True, name=f"lab-kubelet-{target.__name__}"
            )
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
        """One pass over the pods bound to lab nodes: run the new ones, finish deletions."""
        pods = self.api.get("/api/v1/pods").get("items", [])
        for pod in pods:
            node = pod.get("spec", {}).get("nodeName")
            if node not in self.nodes:
                continue
            meta = pod["metadata"]
            path = f"/api/v1/namespaces/{quote(meta['namespace'])}/pods/{quote(meta['name'])}"
            if meta.get("deletionTimestamp"):
                with contextlib.suppress(ApiError):
                    self.api.request("DELETE", path, {
                        "apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                        "preconditions": {"uid": meta["uid"]}})  # fmt: skip
                continue
            if pod.get("status", {}).get("phase", "Pending") != "Pending":
                continue
            status = self.pod_status(pod)
            try:
                self.api.merge_patch(path + "/status", {"status": status})
            except ApiError as exc:
                if exc.status not in (404, 409):  # gone, or changed meanwhile: next pass
                    self._note(f"status of pod {meta['namespace']}/{meta['name']}: {exc}")
                continue
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
        assert self.plugin_resources is not None
        resources = self.plugin_resources(node, pod)
        if not resources or self._advertised.get(node, {}) == {
            **self._advertised.get(node, {}),
            **resources,
        }:
            return
        self._advertised.setdefault(node, {}).update(resources)
        self.api.merge_patch(f"/api/v1/nodes/{quote(node)}/status",
                             {"status": {"capacity": resources, "allocatable": resources}})  # fmt: skip

    def advertise(
        self, node: str, resources: dict[str, str], labels: dict[str, str] | None = None
    ) -> None:
        """What a device plugin or a node labeller on this node makes the kubelet report."""
        if labels:
            self.api.merge_patch(f"/api/v1/nodes/{quote(node)}", {"metadata": {"labels": labels}})
        if resources:
            self._advertised.setdefault(node, {}).update(resources)
            self.api.merge_patch(f"/api/v1/nodes/{quote(node)}/status",
                                 {"status": {"capacity": resources, "allocatable": resources}})  # fmt: skip

    # -- the kubelet's HTTPS endpoint ------------------------------------------------------------

    def container_log(self, namespace: str, name: str) -> str | None:
        pod = self.api.get_or_none(f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}")
        if pod is None or pod.get("spec", {}).get("nodeName") not in self.nodes:
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
