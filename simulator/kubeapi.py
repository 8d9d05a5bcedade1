"""A small, stateful Kubernetes API server on loopback, for the real ``kubernetes`` client.

Why hand-written (not kmock): the lab is part of the product (``demo`` and ``lab``
serve it for other processes), it needs behaviour of its own (the GPU Operator appearing
after a Helm install, node allocatable changing, test pods whose logs come from the
simulated hosts), and the standard library's threaded HTTP server does it with no new
runtime dependency. It implements generic REST storage (list / get / create / replace /
merge-patch / delete, label and field selectors) for the resources the wizard uses, plus
pods/log, pods/eviction (PodDisruptionBudgets as the real control plane judges them:
disruption.py) and the pod proxy (pods/NAME:PORT/proxy/PATH).
"""

from __future__ import annotations

import copy
import json
import re
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from simulator import disruption

KINDS = {
    "nodes": ("Node", False),
    "namespaces": ("Namespace", False),
    "pods": ("Pod", True),
    "configmaps": ("ConfigMap", True),
    "secrets": ("Secret", True),
    "services": ("Service", True),
    "serviceaccounts": ("ServiceAccount", True),
    "daemonsets": ("DaemonSet", True),
    "deployments": ("Deployment", True),
    "jobs": ("Job", True),
    "poddisruptionbudgets": ("PodDisruptionBudget", True),
    # What a budget's controller may be (disruption.py reads their scale).
    "replicasets": ("ReplicaSet", True),
    "statefulsets": ("StatefulSet", True),
    "customresourcedefinitions": ("CustomResourceDefinition", False),
    "nvidiadrivers": ("NVIDIADriver", False),
    "clusterpolicies": ("ClusterPolicy", False),
    "nicclusterpolicies": ("NicClusterPolicy", False),
    "mpijobs": ("MPIJob", True),
    # coordination.k8s.io/v1 Lease: the wizard's per-node lock (wizard/engine/leases.py).
    "leases": ("Lease", True),
}
# metadata.generation: the kinds whose registry strategy sets it to 1 on create and adds one
# when their spec changes (kubernetes pkg/registry/{core/pod,apps/*,batch/job,
# policy/poddisruptionbudget}/strategy.go PrepareForCreate / PrepareForUpdate;
# apiextensions-apiserver's customresourcedefinition strategy); the other built-in kinds
# here (Node, ConfigMap, Lease, ...) carry none.
GENERATION_BY_SPEC = frozenset({
    "pods", "daemonsets", "deployments", "jobs", "poddisruptionbudgets", "replicasets",
    "statefulsets", "customresourcedefinitions",
})  # fmt: skip
# Custom resources: any change but to metadata adds one (apiextensions-apiserver
# pkg/registry/customresource/strategy.go), status excluded where the CRD declares the
# status subresource (an update then cannot set it): the GPU Operator's CRDs
# (crds/nvidia.com_*.yaml) and the Network Operator's do; the lab's MPIJob CRD declares none.
CUSTOM_STATUS_SUBRESOURCE = {
    "nvidiadrivers": True, "clusterpolicies": True, "nicclusterpolicies": True, "mpijobs": False,
}  # fmt: skip


# The subresources each kind serves (kubernetes pkg/registry/*/storage: pods/log,
# pods/eviction, */status, the workload controllers' */scale); a custom resource serves
# status (and scale) only where its CRD declares it (apiextensions-apiserver
# customresource storage): none of the CRDs here declares scale. Any other is 404.
SUBRESOURCES = {
    "pods": {"log", "eviction", "status", "binding"}, "nodes": {"status"},
    "namespaces": {"status", "finalize"}, "services": {"status"}, "daemonsets": {"status"},
    "deployments": {"status", "scale"}, "replicasets": {"status", "scale"},
    "statefulsets": {"status", "scale"}, "jobs": {"status"},
    "poddisruptionbudgets": {"status"}, "customresourcedefinitions": {"status"},
    **{plural: {"status"} if status else set() for plural, status in CUSTOM_STATUS_SUBRESOURCE.items()},
}  # fmt: skip


def scale_of(obj: dict[str, Any]) -> dict[str, Any]:
    """A workload's autoscaling/v1 Scale (pkg/registry/apps/deployment/storage ScaleREST
    scaleFromDeployment): its replicas, and its selector as a label selector string."""
    meta = obj["metadata"]
    match = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return {
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                           "creationTimestamp") if k in meta},
        "spec": {"replicas": int((obj.get("spec") or {}).get("replicas", 1))},
        "status": {"replicas": int((obj.get("status") or {}).get("replicas", 0)),
                   "selector": ",".join(f"{k}={v}" for k, v in sorted(match.items()))},
    }  # fmt: skip


# The verbs a subresource serves (kubernetes pkg/registry/*/storage: StatusREST and
# ScaleREST are get/update/patch, pods/eviction and pods/binding create only, pods/log get
# only); any other verb on it is 405 MethodNotAllowed, as the real server answers.
SUBRESOURCE_VERBS = {
    "status": {"GET", "PUT", "PATCH"}, "scale": {"GET", "PUT", "PATCH"},
    "eviction": {"POST"}, "binding": {"POST"}, "log": {"GET"}, "finalize": {"PUT"},
}  # fmt: skip


def subresource_write(sub: str, current: dict[str, Any], wanted: dict[str, Any]) -> dict[str, Any]:
    """The object stored by an update of its ``sub`` subresource, ``wanted`` being what the
    client's PUT (or its patch applied to the current view) says: /status takes the status
    and nothing else (registry StatusStrategy PrepareForUpdate: spec and metadata stay the
    stored ones); /scale sets spec.replicas alone (ScaleREST scaleUpdatedObjectInfo)."""
    stored = {**current, "metadata": dict(current["metadata"])}
    if sub == "status":
        stored["status"] = wanted.get("status") or {}
    elif sub == "scale":
        replicas = (wanted.get("spec") or {}).get("replicas")
        stored["spec"] = {**(current.get("spec") or {}), "replicas": int(replicas or 0)}
    return stored


def settled_daemonset_status(daemonset: dict[str, Any], nodes: list[dict[str, Any]]) -> None:
    """The embedded server runs no DaemonSet controller; the lab plays it at once, so a
    DaemonSet's status is its controller's once settled (pkg/controller/daemon
    daemon_controller.go updateDaemonSetStatus: observedGeneration the generation it acted
    on, every scheduled pod updated and available). The scheduled count is the lab's when it
    set one (its seeded DaemonSets know their nodes), else the nodes whose labels match the
    nodeSelector (taints are not judged here)."""
    status = daemonset.setdefault("status", {})
    if "desiredNumberScheduled" not in status:
        selector = (((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
            "nodeSelector"
        ) or {}
        picked = sum(
            all((n["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
            for n in nodes
        )
        status.update(currentNumberScheduled=picked, desiredNumberScheduled=picked,
                      numberMisscheduled=0, numberReady=picked)  # fmt: skip
    desired = status["desiredNumberScheduled"]
    status.update(updatedNumberScheduled=desired, numberAvailable=desired)
    if "generation" in daemonset.get("metadata", {}):
        status["observedGeneration"] = daemonset["metadata"]["generation"]


def next_generation(plural: str, old: dict[str, Any] | None, new: dict[str, Any]) -> int | None:
    """The metadata.generation the API server stores for ``new`` replacing ``old`` (None:
    the kind has none); a client's own value is never taken (registry/rest BeforeUpdate)."""
    if plural in GENERATION_BY_SPEC:
        changed = old is not None and old.get("spec") != new.get("spec")
    elif plural in CUSTOM_STATUS_SUBRESOURCE:
        ignored = {"metadata", "apiVersion", "kind"}
        if CUSTOM_STATUS_SUBRESOURCE[plural]:
            ignored.add("status")
        changed = old is not None and any(
            old.get(k) != new.get(k) for k in (old.keys() | new.keys()) - ignored
        )
    else:
        return None
    if old is None:
        return 1
    return int(old["metadata"].get("generation") or 1) + (1 if changed else 0)


_PATH = re.compile(
    r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/(?P<version>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[a-z]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[a-z]+))?$"
)

SHUTDOWN_POLL_S = 0.02
PodLogs = Callable[[dict[str, Any]], str]
# A pod, the port and the path asked for -> the status and text its server answers with.
PodProxy = Callable[[dict[str, Any], str, str], tuple[int, str]]
# pods/{name}[:{port}]/proxy/{path}: the API server's pod proxy (k8s.io/apiserver's
# SplitSchemeNamePort "name:port", pkg/registry/core/pod/rest/subresources.go ProxyREST).
_POD_PROXY = re.compile(
    r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/:]+)(?::(?P<port>[^/]+))?/proxy(?P<path>/.*)?$"
)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (lists replace; None deletes)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# The list fields of the objects the wizard patches, by field name, and the key their items
# merge on in a strategic merge patch: the `patchMergeKey` tags of k8s.io/api core/v1
# types.go (Container and EnvVar by name, ...). A list field not named here is replaced
# whole, as one without a patch strategy is: NodeSpec.Taints and Tolerations have none, so
# a strategic merge patch of spec.taints replaces the node's taints (the differential tier
# found the embedded server merging them by key, which the real one does not).
# Approximation: the real server looks tags up per Go type, this table per field name.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "conditions": "type",
    "addresses": "type",
    "ownerReferences": "uid",
}


def strategic_merge_patch(target: Any, patch: Any, field: str = "") -> Any:
    """A strategic merge patch (k8s.io/apimachinery pkg/util/strategicpatch): maps merge as
    in a JSON merge patch; a list with a merge key (MERGE_KEYS) merges item by item on that
    key, an item ``{"$patch": "delete", KEY: ...}`` removing its match; ``{"$patch":
    "replace"}`` in a map replaces it; any other list replaces."""
    if isinstance(patch, dict):
        if patch.get("$patch") == "replace":
            return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
        if patch.get("$patch") == "delete":
            return None
        result = dict(target) if isinstance(target, dict) else {}
        for key, value in patch.items():
            if value is None:
                result.pop(key, None)
            else:
                result[key] = strategic_merge_patch(result.get(key), value, key)
        return result
    key = MERGE_KEYS.get(field)
    if isinstance(patch, list) and key and all(isinstance(i, dict) for i in patch):
        # Order as strategicpatch's normalizeElementOrder leaves it in the simple cases: the
        # patch's items in the patch's order, then the live items the patch did not name.
        live = [i for i in target if isinstance(i, dict)] if isinstance(target, list) else []
        named = {i.get(key) for i in patch}
        merged = []
        for item in patch:
            if item.get("$patch") == "delete":
                continue
            old = next((i for i in live if i.get(key) == item.get(key)), None)
            merged.append(copy.deepcopy(item) if old is None else strategic_merge_patch(old, item))
        return merged + [copy.deepcopy(i) for i in live if i.get(key) not in named]
    return copy.deepcopy(patch)


class ClusterState:
    """Objects by (api path prefix, plural, namespace, name); thread-safe."""

    def __init__(self, kubernetes_version: str = "1.33.5") -> None:
        self.lock = threading.RLock()
        self.objects: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self.version = kubernetes_version
        self.pod_logs: PodLogs = lambda pod: ""
        # Nothing listens in a pod unless the lab models its server (the real API server then
        # answers 503 "error trying to reach service: ... connection refused").
        self.pod_proxy: PodProxy = lambda pod, port, path: (503, "connection refused")
        self.on_create: list[Callable[[str, dict[str, Any]], None]] = []
        self.requests: list[tuple[str, str]] = []
        self._rv = 1

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def put(self, api: str, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object (used by the lab itself to seed the cluster)."""
        with self.lock:
            meta = obj.setdefault("metadata", {})
            kind, namespaced = KINDS[plural]
            obj.setdefault("kind", kind)
            obj.setdefault("apiVersion", api)
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", _now())
            meta["resourceVersion"] = self._next_rv()
            ns = meta.get("namespace", "default") if namespaced else ""
            if namespaced:
                meta["namespace"] = ns
            key = (api, plural, ns, meta["name"])
            generation = next_generation(plural, self.objects.get(key), obj)
            if generation is None:
                meta.pop("generation", None)
            else:
                meta["generation"] = generation
            if plural == "daemonsets":
                nodes = [o for (_, p, _, _), o in self.objects.items() if p == "nodes"]
                settled_daemonset_status(obj, nodes)
            self.objects[key] = obj
            return obj

    def get(self, api: str, plural: str, ns: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            return self.objects.get((api, plural, ns, name))

    def list(self, api: str, plural: str, ns: str | None) -> list[dict[str, Any]]:
        with self.lock:
            return [
                obj
                for (a, p, n, _), obj in sorted(self.objects.items())
                if a == api and p == plural and (ns is None or n == ns)
            ]

    def delete(
        self, api: str, plural: str, ns: str, name: str, propagation: str | None = None
    ) -> dict[str, Any] | None:
        """Remove an object and, unless the deletion orphans them, its dependents (the
        objects whose metadata.ownerReferences name its uid), as the garbage collector does.

        The default is the API server's per resource: batch/v1 Jobs orphan their pods
        ("OrphanDependents for batch/v1 for backwards compatibility",
        kubernetes pkg/registry/batch/job/strategy.go DefaultGarbageCollectionPolicy);
        everything else, custom resources such as an MPIJob included, cascades in the
        background (Kubernetes docs, "Garbage Collection: cascading deletion").
        """
        if propagation is None:
            propagation = "Orphan" if (api, plural) == ("batch/v1", "jobs") else "Background"
        with self.lock:
            obj = self.objects.pop((api, plural, ns, name), None)
            uid = (obj or {}).get("metadata", {}).get("uid")
            if obj is None or propagation == "Orphan" or not uid:
                return obj
            dependents = [
                key
                for key, other in self.objects.items()
                if any(
                    ref.get("uid") == uid for ref in other["metadata"].get("ownerReferences", [])
                )
            ]
            for key in dependents:
                self.delete(*key, propagation="Background")
            return obj

    def node(self, name: str) -> dict[str, Any] | None:
        return self.get("v1", "nodes", "", name)


def owner_reference(owner: dict[str, Any]) -> dict[str, Any]:
    """The ownerReferences entry a controller puts on what it creates for ``owner``."""
    meta = owner["metadata"]
    meta.setdefault("uid", str(uuid.uuid4()))
    return {"apiVersion": owner.get("apiVersion", ""), "kind": owner.get("kind", ""),
            "name": meta["name"], "uid": meta["uid"], "controller": True}  # fmt: skip


def _matches(obj: dict[str, Any], labels: str | None, fields: str | None) -> bool:
    meta = obj.get("metadata", {})
    for term in filter(None, (labels or "").split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if meta.get("labels", {}).get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if meta.get("labels", {}).get(key) != value:
                return False
        elif term not in meta.get("labels", {}):
            return False
    for term in filter(None, (fields or "").split(",")):
        negated = "!=" in term
        key, _, value = term.replace("!=", "=").replace("==", "=").partition("=")
        node: Any = obj
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if (_field_text(key, node) == value) is negated:
            return False
    return True


def _field_text(key: str, value: Any) -> str:
    """A selectable field as the API server renders it: a Node's spec.unschedulable is
    strconv.FormatBool of the bool, "false" when unset (pkg/registry/core/node/strategy.go
    NodeToSelectableFields); others as their text."""
    if key == "spec.unschedulable":
        return "true" if value is True else "false"
    return str(value)


def _retry_after(body: Any) -> int:
    """apiserver responsewriters.ErrorNegotiated: a Status whose details carry
    retryAfterSeconds > 0 is answered with that many seconds in Retry-After (the eviction's
    429 "still being processed" carries 10), which clients wait on; 0 for none."""
    details = body.get("details") if isinstance(body, dict) else None
    seconds = details.get("retryAfterSeconds") if isinstance(details, dict) else None
    if isinstance(seconds, int) and not isinstance(seconds, bool) and seconds > 0:
        return seconds
    return 0


class _Handler(BaseHTTPRequestHandler):
    state: ClusterState
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    # -- plumbing ----------------------------------------------------------------------------

    def _send(self, code: int, body: Any, content_type: str = "application/json") -> None:
        effects = getattr(self.server, "effects", None)
        if effects is not None and self.command != "GET" and not self.path.startswith("/lab/"):
            effects.record("cluster", f"{self.command} {urlparse(self.path).path}")
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        retry = _retry_after(body)
        if retry:
            self.send_header("Retry-After", str(retry))
        self.end_headers()
        self.wfile.write(data)

    def _status(self, code: int, reason: str, message: str) -> None:
        self._send(
            code,
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
             "message": message, "reason": reason, "code": code},
        )  # fmt: skip

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw) if raw else {}

    def _route(self) -> tuple[Any, dict[str, list[str]]] | str | None:
        url = urlparse(self.path)
        self.state.requests.append((self.command, url.path))
        match = _PATH.match(url.path)
        if not match or match["plural"] not in KINDS:
            return None
        if match["sub"] and match["sub"] not in SUBRESOURCES.get(match["plural"], set()):
            return None
        if match["sub"] and self.command not in SUBRESOURCE_VERBS.get(match["sub"], set()):
            return "MethodNotAllowed"
        return match, parse_qs(url.query)

    def _routed(self, missing: str) -> tuple[Any, dict[str, list[str]]] | None:
        """The route, or None after answering 404 (no such resource) or 405 (a verb the
        addressed subresource does not serve)."""
        routed = self._route()
        if routed is None or routed == "MethodNotAllowed":
            # The request's body is read before the refusal: left unread on a kept-alive
            # connection, it would be taken for the start of the next request.
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if routed == "MethodNotAllowed":
            self._status(
                405,
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource",
            )
            return None
        if routed is None:
            self._status(404, "NotFound", missing)
            return None
        return routed

    # -- verbs -----------------------------------------------------------------------------------

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path.rstrip("/") == "/version":
            major, minor, _ = self.state.version.split(".")
            self._send(200, {"major": major, "minor": minor, "gitVersion": f"v{self.state.version}",
                             "platform": "linux/amd64"})  # fmt: skip
            return
        if url.path.startswith("/lab/v1/"):
            self._lab("GET", url.path)
            return
        proxied = _POD_PROXY.match(url.path)
        if proxied:
            self.state.requests.append(("GET", url.path))
            self._proxy(
                proxied["ns"], proxied["name"], proxied["port"] or "", proxied["path"] or "/"
            )
            return
        routed = self._routed(f"the server could not find the requested resource {url.path}")
        if routed is None:
            return
        match, query = routed
        api = match["core"] or f"{match['group']}/{match['version']}"
        plural, name, ns = match["plural"], match["name"], match["ns"]
        namespaced = KINDS[plural][1]
        if plural == "poddisruptionbudgets":  # the disruption controller, never behind
            disruption.sync_budgets(self.state, ns)
        if name is None:
            items = [
                o for o in self.state.list(api, plural, ns if namespaced else None)
                if _matches(o, query.get("labelSelector", [None])[0], query.get("fieldSelector", [None])[0])
            ]  # fmt: skip
            kind = KINDS[plural][0]
            self._send(200, {"kind": f"{kind}List", "apiVersion": api,
                             "metadata": {"resourceVersion": str(self.state._rv)}, "items": items})  # fmt: skip
            return
        obj = self.state.get(api, plural, ns or "" if namespaced else "", name)
        if obj is None:
            self._status(404, "NotFound", f'{plural} "{name}" not found')
            return
        if match["sub"] == "log":
            self._send(200, self.state.pod_logs(obj), "text/plain")
            return
        if match["sub"] == "scale":
            self._send(200, scale_of(obj))
            return
        self._send(200, obj)

    def _proxy(self, namespace: str, name: str, port: str, path: str) -> None:
        pod = self.state.get("v1", "pods", namespace, name)
        if pod is None:
            self._status(404, "NotFound", f'pods "{name}" not found')
            return
        status, text = self.state.pod_proxy(pod, port, path)
        if status == 503:
            # The real server's words when the pod's port is closed; the address is one of
            # Kubespray's default kube_pods_subnet (10.233.64.0/18).
            self._status(503, "ServiceUnavailable", f"error trying to reach service: dial tcp "
                         f"10.233.64.10:{port or 80}: connect: {text}")  # fmt: skip
            return
        self._send(status, text, "text/plain; version=0.0.4; charset=utf-8")

    def do_POST(self) -> None:
        if urlparse(self.path).path.startswith("/lab/v1/"):
            self._lab("POST", urlparse(self.path).path, self._body())
            return
        routed = self._routed("unknown resource")
        if routed is None:
            return
        match, _ = routed
        api = match["core"] or f"{match['group']}/{match['version']}"
        plural, ns = match["plural"], match["ns"]
        body = self._body()
        if match["sub"] == "eviction":
            self._evict(api, ns, match["name"])
            return
        name = body.get("metadata", {}).get("name")
        if not name and body.get("metadata", {}).get("generateName"):
            name = body["metadata"]["generateName"] + uuid.uuid4().hex[:5]
            body["metadata"]["name"] = name
        if KINDS[plural][1]:
            body.setdefault("metadata", {})["namespace"] = ns or "default"
        with self.state.lock:  # two creates of one name: one wins, the other is a 409
            if self.state.get(api, plural, ns or "" if KINDS[plural][1] else "", name):
                self._status(409, "AlreadyExists", f'{plural} "{name}" already exists')
                return
            obj = self.state.put(api, plural, body)
        for hook in self.state.on_create:
            hook(plural, obj)
        self._send(201, obj)

    def _existing(self) -> tuple[tuple[str, str, str, str], dict[str, Any], str | None] | None:
        """The addressed object's key, its value and the subresource addressed (None: the
        object itself), or None after answering 404 (or 405)."""
        routed = self._routed("unknown resource")
        if routed is None:
            return None
        match, _ = routed
        api = match["core"] or f"{match['group']}/{match['version']}"
        plural, name = match["plural"], match["name"]
        ns = (match["ns"] or "") if KINDS[plural][1] else ""
        current = self.state.get(api, plural, ns, name)
        if current is None:
            self._status(404, "NotFound", f'{plural} "{name}" not found')
            return None
        return (api, plural, ns, name), current, match["sub"]

    def _conflict(self, current: dict[str, Any], body: Any) -> bool:
        """Optimistic concurrency, as the real API server: a write naming a resourceVersion
        other than the stored one is refused with 409 Conflict (and answered here)."""
        wanted = (
            (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
        )
        if not wanted or wanted == current["metadata"].get("resourceVersion"):
            return False
        kind = current.get("kind", "object").lower()
        self._status(409, "Conflict", f'Operation cannot be fulfilled on {kind}s "{current["metadata"]["name"]}": '
                     "the object has been modified; please apply your changes to the latest version and try again")  # fmt: skip
        return True

    def do_PUT(self) -> None:
        with self.state.lock:
            self._put()

    def _put(self) -> None:
        found = self._existing()
        if found is None:
            return
        (api, plural, ns, _), current, sub = found
        body = self._body()
        if self._conflict(current, body):
            return
        if sub in ("status", "scale"):
            stored = self.state.put(api, plural, subresource_write(sub, current, body))
            self._send(200, scale_of(stored) if sub == "scale" else stored)
            return
        body.setdefault("metadata", {})["uid"] = current["metadata"]["uid"]
        body["metadata"]["creationTimestamp"] = current["metadata"]["creationTimestamp"]
        if KINDS[plural][1]:
            body["metadata"]["namespace"] = ns
        self._send(200, self.state.put(api, plural, body))

    def do_PATCH(self) -> None:
        with self.state.lock:
            found = self._existing()
            if found is None:
                return
            (api, plural, _, _), current, sub = found
            body = self._body()
            if self._conflict(current, body):
                return
            kind = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            # A patch of /scale applies to the Scale, not to the object (ScaleREST).
            view = scale_of(current) if sub == "scale" else current
            if kind == "application/strategic-merge-patch+json":
                patched = strategic_merge_patch(view, body)
            elif kind in ("application/merge-patch+json", ""):
                patched = merge_patch(view, body)
            else:  # json-patch and apply-patch: not served by the lab (the wizard sends neither)
                self._status(415, "UnsupportedMediaType", f"the lab does not serve {kind} patches")
                return
            if sub in ("status", "scale"):
                stored = self.state.put(api, plural, subresource_write(sub, current, patched))
                self._send(200, scale_of(stored) if sub == "scale" else stored)
                return
            self._send(200, self.state.put(api, plural, patched))

    def do_DELETE(self) -> None:
        found = self._existing()
        if found is None:
            return
        # DeleteOptions.propagationPolicy, as a query parameter or in the body.
        query = parse_qs(urlparse(self.path).query)
        body = self._body() if int(self.headers.get("Content-Length") or 0) else {}
        policy = query.get("propagationPolicy", [None])[0] or (
            body.get("propagationPolicy") if isinstance(body, dict) else None
        )
        # DeleteOptions.preconditions (API conventions, "Concurrency Control and
        # Consistency"; apimachinery's Preconditions): a uid or resourceVersion other than
        # the stored one is 409 Conflict, nothing deleted.
        wanted = (body.get("preconditions") or {}) if isinstance(body, dict) else {}
        meta = found[1]["metadata"]
        for field in ("uid", "resourceVersion"):
            if wanted.get(field) and wanted[field] != meta.get(field):
                self._status(409, "Conflict", f"Precondition failed: {field} in precondition: "
                             f"{wanted[field]}, {field} in object meta: {meta.get(field)}")  # fmt: skip
                return
        self.state.delete(*found[0], propagation=policy)
        self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "metadata": {}})

    def _evict(self, api: str, ns: str, name: str) -> None:
        """The eviction subresource, as the real API server judges it (disruption.py)."""
        code, body = disruption.evict(self.state, ns, name)
        self._send(code, body)

    # -- lab-only endpoints (the helm stand-in talks to these) ------------------------------------

    def _lab(self, method: str, path: str, body: Any = None) -> None:
        handler = self.server.lab_handlers.get((method, path))  # type: ignore[attr-defined]
        if handler is None:
            self._status(404, "NotFound", path)
            return
        code, result = handler(body)
        self._send(code, result)


class KubeApiServer:
    """Serves a ``ClusterState`` on 127.0.0.1 in a background thread."""

    def __init__(self, state: ClusterState, address: str = "127.0.0.1", port: int = 0) -> None:
        self.state = state
        handler = type("Handler", (_Handler,), {"state": state})
        try:  # a kept lab (simulator/persist.py) asks for its earlier port
            self.httpd = ThreadingHTTPServer((address, port), handler)
        except OSError:
            if not port:
                raise
            self.httpd = ThreadingHTTPServer((address, 0), handler)
        self.httpd.daemon_threads = True
        # A client that went away mid-request (a killed wizard) is no error worth a traceback.
        self.httpd.handle_error = lambda request, address: None  # type: ignore[method-assign]
        self.httpd.lab_handlers = {}  # type: ignore[attr-defined]
        # shutdown() returns at serve_forever's next poll: the default 0.5 s was half a
        # second of every lab's stop (a test suite stops hundreds of labs).
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_S}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def add_lab_handler(
        self, method: str, path: str, handler: Callable[[Any], tuple[int, Any]]
    ) -> None:
        self.httpd.lab_handlers[(method, path)] = handler  # type: ignore[attr-defined]

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
