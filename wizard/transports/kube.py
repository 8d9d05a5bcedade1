"""Kubernetes access through the official ``kubernetes`` client, off the event loop.

Every call runs in a worker thread (``asyncio.to_thread``) so a slow API server never
freezes the TUI. Errors become ``KubeError`` / ``UnreachableError`` naming the cluster.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Collection
from typing import Any

import urllib3
import yaml
from kubernetes import config
from kubernetes.client import ApiClient, Configuration
from kubernetes.config.config_exception import ConfigException

from wizard import journal
from wizard.drain import DRAIN_TIMEOUT_S, FINISHED_PHASES, MIRROR_ANNOTATION, bare_pods
from wizard.transports.base import TransportError, UnreachableError

TARGET = "cluster"


class KubeError(TransportError):
    """The API server answered with an error."""

    def __init__(
        self,
        message: str,
        status: int | None = None,
        *,
        causes: tuple[str, ...] = (),
        retry_after: str | None = None,
    ) -> None:
        self.status = status
        #: The Status body's details.causes[].reason (e.g. NamespaceTerminating on a 403).
        self.causes = causes
        #: The answer's Retry-After header, when it carried one.
        self.retry_after = retry_after
        super().__init__(TARGET, message)


class KubeClient:
    """The cluster through the ``kubernetes`` client's authenticated REST layer.

    Objects travel as plain JSON dicts (the API's own shape), not as generated models:
    that is what the checks and diffs compare, and it does not depend on how a client
    release models optional fields.
    """

    def __init__(self, kubeconfig: str, context: str | None = None) -> None:
        path = os.path.expanduser(kubeconfig)
        if not os.path.exists(path):
            raise KubeError(f"kubeconfig {path} does not exist (cluster.kubeconfig)")
        if not os.path.isfile(path):
            raise KubeError(f"kubeconfig {path} is not a regular file (cluster.kubeconfig)")
        configuration = Configuration()
        try:
            config.load_kube_config(
                config_file=path,
                context=context,
                client_configuration=configuration,
                persist_config=False,  # never write refreshed credentials into the file
            )
        except ConfigException as exc:
            raise KubeError(f"kubeconfig {path}: {_short(exc)}") from None
        except UnicodeDecodeError:
            raise KubeError(f"kubeconfig {path} is not text (a binary file?)") from None
        except yaml.YAMLError as exc:
            raise KubeError(f"kubeconfig {path} is not valid YAML: {_short(exc)}") from None
        except OSError as exc:
            raise KubeError(f"kubeconfig {path} cannot be read: {exc.strerror or exc}") from None
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            # The client indexes the YAML as it expects it to be: a list or a scalar where
            # a mapping belongs ends here, not in a ConfigException.
            raise KubeError(
                f"kubeconfig {path} is not a kubeconfig ({type(exc).__name__}: {_short(exc)})"
            ) from None
        # Fail fast on an unreachable API server instead of urllib3's silent retries. The
        # REST client builds its urllib3 pool from the configuration when the ApiClient is
        # made (kubernetes/client/rest.py: ``pool_args['retries'] = configuration.retries``),
        # so this must be set before, not on the client afterwards.
        configuration.retries = False
        self.api_client = ApiClient(configuration=configuration)
        self.server = configuration.host

    def _request_sync(
        self,
        method: str,
        path: str,
        body: Any,
        query: list[tuple[str, str]] | None,
        content_type: str,
    ) -> tuple[int, bytes, str | None]:
        request = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params={"Content-Type": content_type, "Accept": "application/json, */*"},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api_client.call_api(*request, _request_timeout=30)
        response.read()
        return response.status, response.data, (response.getheaders() or {}).get("Retry-After")

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, str] | None = None,
        content_type: str = "application/json",
        what: str = "",
        text: bool = False,
    ) -> Any:
        """One API call; JSON (or text) back; KubeError naming ``what`` on failure."""
        what = what or f"{method} {path}"
        pairs = [(k, v) for k, v in (query or {}).items() if v]
        # A write is journaled ahead (wizard/journal.py): method, path and what, never the
        # body (it may carry a pull secret).
        intent = (
            None
            if method == "GET"
            else journal.begin({"target": TARGET, "api": f"{method} {path}", "what": what})
        )
        try:
            for attempt in range(RETRY_AFTER_TRIES):
                status, data, retry_after = await asyncio.to_thread(
                    self._request_sync, method, path, body, pairs, content_type
                )
                # The API server asks to come back later (a CRD's storage initializing, a
                # priority-and-fairness queue full): 429 or 5xx with Retry-After, which
                # client-go obeys up to 10 times (rest/request.go checkWait). An eviction is
                # not retried here: its 429 is the PodDisruptionBudget's answer (no
                # Retry-After), or "still being processed" with Retry-After 10
                # (pkg/registry/core/pod/storage/eviction.go); drain() decides when to ask
                # again.
                evicting = path.endswith("/eviction")
                if retry_after is None or evicting or status not in (429, 500, 503, 504):
                    break
                if attempt + 1 < RETRY_AFTER_TRIES:
                    await asyncio.sleep(_seconds(retry_after))
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            journal.end(intent, {"error": str(exc)})
            raise UnreachableError(
                TARGET, f"cannot reach the API server {self.server}: {exc}"
            ) from None
        journal.end(intent, {"status": status})
        if not 200 <= status < 300:
            raise KubeError(
                f"{what}: {status} {_message(data)}",
                status,
                causes=_causes(data),
                retry_after=retry_after,
            )
        if text:
            return data.decode(errors="replace")
        return json.loads(data) if data else None

    async def _get_or_none(self, path: str, what: str) -> dict[str, Any] | None:
        try:
            return await self.request("GET", path, what=what)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    # -- reads -----------------------------------------------------------------------------------

    async def version(self) -> dict[str, str]:
        info = await self.request("GET", "/version", what="get version")
        return {
            "major": str(info.get("major", "")),
            "minor": str(info.get("minor", "")).rstrip("+"),
            "git_version": str(info.get("gitVersion", "")),
        }

    async def nodes(self) -> list[dict[str, Any]]:
        return (await self.request("GET", "/api/v1/nodes", what="list nodes"))["items"]

    async def node(self, name: str) -> dict[str, Any] | None:
        return await self._get_or_none(f"/api/v1/nodes/{name}", f"get node {name}")

    async def pods(
        self, namespace: str | None = None, *, field_selector: str = "", label_selector: str = ""
    ) -> list[dict[str, Any]]:
        path = "/api/v1/pods" if namespace is None else f"/api/v1/namespaces/{namespace}/pods"
        query = {"fieldSelector": field_selector, "labelSelector": label_selector}
        return (await self.request("GET", path, query=query, what="list pods"))["items"]

    async def crd_names(self) -> list[str]:
        result = await self.request(
            "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", what="list CRDs"
        )
        return [c["metadata"]["name"] for c in result["items"]]

    async def custom_objects(self, group: str, version: str, plural: str) -> list[dict[str, Any]]:
        """Every object of a cluster-wide custom resource; none when its CRD is not installed
        (the API server answers 404 for an unknown resource)."""
        try:
            result = await self.request(
                "GET", f"/apis/{group}/{version}/{plural}", what=f"list {plural}.{group}"
            )
        except KubeError as exc:
            if exc.status == 404:
                return []
            raise
        return result.get("items") or []

    async def configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._get_or_none(
            f"/api/v1/namespaces/{namespace}/configmaps/{name}", f"get configmap {namespace}/{name}"
        )

    async def daemonsets(self, namespace: str | None = None) -> list[dict[str, Any]]:
        path = (
            "/apis/apps/v1/daemonsets"
            if namespace is None
            else f"/apis/apps/v1/namespaces/{namespace}/daemonsets"
        )
        return (await self.request("GET", path, what="list daemonsets"))["items"]

    async def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._get_or_none(
            f"/api/v1/namespaces/{namespace}/pods/{name}", f"get pod {namespace}/{name}"
        )

    async def pod_log(self, namespace: str, name: str) -> str:
        return await self.request(
            "GET",
            f"/api/v1/namespaces/{namespace}/pods/{name}/log",
            what=f"logs of {namespace}/{name}",
            text=True,
        )

    async def pod_proxy(self, namespace: str, name: str, port: int, path: str, *, what: str) -> str:
        """GET a pod's own HTTP endpoint through the API server's pod proxy
        (``pods/{name}:{port}/proxy/{path}``): the API server connects to the pod, so nothing
        but the API server is reached from here."""
        return await self.request(
            "GET",
            f"/api/v1/namespaces/{namespace}/pods/{name}:{port}/proxy/{path.lstrip('/')}",
            what=what,
            text=True,
        )

    # -- writes -----------------------------------------------------------------------------------

    async def patch_node(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request(
            "PATCH",
            f"/api/v1/nodes/{name}",
            body,
            content_type="application/merge-patch+json",
            what=f"patch node {name}",
        )

    async def apply(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create the object at collection ``path``, or replace it if it exists."""
        name = body["metadata"]["name"]
        kind = body.get("kind", "object")
        try:
            return await self.request("POST", path, body, what=f"create {kind} {name}")
        except KubeError as exc:
            if exc.status != 409:
                raise
        # Optimistic concurrency: the replace names the resourceVersion just read; when
        # someone wrote in between (409 Conflict), read again and retry, a few times.
        for attempt in range(CONFLICT_TRIES):
            current = await self.request("GET", f"{path}/{name}", what=f"get {kind} {name}")
            version = current["metadata"].get("resourceVersion")
            fresh = {**body, "metadata": {**body["metadata"], "resourceVersion": version}}
            try:
                return await self.request(
                    "PUT", f"{path}/{name}", fresh, what=f"replace {kind} {name}"
                )
            except KubeError as exc:
                if exc.status != 409 or attempt + 1 == CONFLICT_TRIES:
                    raise
        raise AssertionError("unreachable")

    async def apply_configmap(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.apply(f"/api/v1/namespaces/{namespace}/configmaps", body)

    async def apply_daemonset(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.apply(f"/apis/apps/v1/namespaces/{namespace}/daemonsets", body)

    async def create_pod(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/pods",
            body,
            what=f"create pod {body['metadata']['name']}",
        )

    async def delete_pod(self, namespace: str, name: str) -> None:
        try:
            await self.request(
                "DELETE",
                f"/api/v1/namespaces/{namespace}/pods/{name}",
                what=f"delete pod {namespace}/{name}",
            )
        except KubeError as exc:
            if exc.status != 404:
                raise

    async def create_job(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request(
            "POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body,
            what=f"create job {body['metadata']['name']}",
        )  # fmt: skip

    async def delete_job(self, namespace: str, name: str) -> None:
        try:
            await self.request(
                "DELETE", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}",
                what=f"delete job {namespace}/{name}",
            )  # fmt: skip
        except KubeError as exc:
            if exc.status != 404:
                raise

    async def create_object(self, collection: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to a collection path (a custom resource such as an MPIJob)."""
        kind = body.get("kind", "object")
        return await self.request(
            "POST", collection, body, what=f"create {kind} {body['metadata']['name']}"
        )

    async def delete_object(self, collection: str, name: str) -> None:
        """DELETE ``collection/name`` (its pods go with it, by their owner references);
        absent is fine."""
        try:
            await self.request(
                "DELETE", f"{collection}/{name}",
                what=f"delete {collection.rsplit('/', 1)[-1]} {name}",
            )  # fmt: skip
        except KubeError as exc:
            if exc.status != 404:
                raise

    async def cordon(self, name: str, unschedulable: bool = True) -> None:
        await self.patch_node(name, {"spec": {"unschedulable": unschedulable or None}})

    async def drain(
        self,
        name: str,
        *,
        timeout: float = DRAIN_TIMEOUT_S,
        progress: Callable[[str, float], None] | None = None,
        delete_bare: Collection[str] = (),
    ) -> list[str]:
        """Evict every non-DaemonSet pod from the node, respecting PodDisruptionBudgets: an
        eviction a budget refuses (429) is asked again until ``timeout``, never forced (no
        delete); ``progress`` hears which pods wait, and for how long at most.

        A pod that declares no controller (wizard/drain.py ``bare_pods``) is evicted only
        when the operator approved it by name (``delete_bare``: ``namespace/name``):
        otherwise the drain raises ``BarePodsError`` before it evicts anything, as kubectl
        drain without --force refuses the node (k8s.io/kubectl pkg/drain/filters.go
        unreplicatedFilter). Nothing would recreate it: its work would be lost for good.

        As kubectl's drain (staging/src/k8s.io/kubectl/pkg/drain/drain.go evictPods and
        filters.go): mirror pods (the kubelet's static pods) are skipped, a pod already
        terminating is not evicted again but waited for, a pod gone before its eviction
        (404) counts as evicted, a 429 is asked again after 5 s (or the answer's
        Retry-After), and a 403 NamespaceTerminating is asked again until the namespace's
        deletion takes the pod."""
        await self.cordon(name)
        deadline = time.monotonic() + timeout
        evicted: list[str] = []
        refused: list[str] = []
        told: list[str] = []
        while True:
            pods = [
                p
                for p in await self.pods(field_selector=f"spec.nodeName={name}")
                if not _daemonset_pod(p)
                and not _mirror_pod(p)
                and p.get("status", {}).get("phase") not in FINISHED_PHASES
            ]
            if not pods:
                return evicted
            bare = [who for who in bare_pods(pods) if who not in delete_bare]
            if bare:
                raise BarePodsError(name, bare)
            refused = []
            waits: list[float] = []
            for pod in pods:
                meta = pod["metadata"]
                who = f"{meta['namespace']}/{meta['name']}"
                if meta.get("deletionTimestamp"):
                    continue  # evicted already (by us or someone): wait for it to go
                where = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
                body = {
                    "apiVersion": "policy/v1",
                    "kind": "Eviction",
                    "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                }
                try:
                    await self.request("POST", f"{where}/eviction", body, what=f"evict {who}")
                except KubeError as exc:
                    if exc.status == 404:  # gone between the list and the eviction
                        pass
                    elif exc.status == 429 or (
                        exc.status == 403 and "NamespaceTerminating" in exc.causes
                    ):
                        # 429: a PodDisruptionBudget says not yet (or the API server is
                        # still processing an earlier eviction); 403 NamespaceTerminating:
                        # the namespace's deletion will take the pod.
                        refused.append(who)
                        waits.append(
                            _seconds(exc.retry_after) if exc.retry_after else DRAIN_RETRY_S
                        )
                        continue
                    else:
                        raise
                if who not in evicted:
                    evicted.append(who)
            left = deadline - time.monotonic()
            if refused and refused != told and progress is not None:
                told = refused
                progress(
                    f"drain of {name}: eviction of {', '.join(refused)} refused by a "
                    "PodDisruptionBudget (429); waiting for the budget to allow it, never forcing",
                    max(0.0, left),
                )
            if left < 0:
                blocked = ", ".join(
                    f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods
                )
                why = (
                    f"; eviction refused by a PodDisruptionBudget (429, not forced): "
                    f"{', '.join(refused)}; make the budget allow one disruption (more "
                    "replicas elsewhere) or move the workload, then retry"
                    if refused
                    else ""
                )
                raise KubeError(
                    f"drain of {name} timed out after {timeout:g}s; still running: {blocked}{why}"
                )
            # kubectl waits 1 s between looks at a pod it evicted (waitForDelete) and 5 s
            # before asking again after a refusal.
            await asyncio.sleep(max(waits) if waits else DRAIN_POLL_S)


class BarePodsError(KubeError):
    """The drain met pods that declare no controller, not approved by name: nothing was
    evicted by this look (kubectl drain's "cannot delete Pods that declare no controller
    (use --force to override)", k8s.io/kubectl pkg/drain/filters.go)."""

    def __init__(self, node: str, pods: list[str]) -> None:
        self.node = node
        self.pods = tuple(pods)
        super().__init__(
            f"drain of {node} stopped before evicting: {', '.join(pods)} declare no controller "
            "(no ownerReference with controller: true), so nothing would recreate them and "
            "their work would be lost; move or delete them yourself, or approve each one's "
            "deletion by name, then run again"
        )


RETRY_AFTER_TRIES = 10
CONFLICT_TRIES = 5
RETRY_AFTER_MAX_S = 10.0
DRAIN_RETRY_S = 5.0
DRAIN_POLL_S = 1.0


def _seconds(retry_after: str) -> float:
    """Retry-After in seconds (the API server sends an integer), bounded."""
    try:
        return min(RETRY_AFTER_MAX_S, max(0.1, float(retry_after)))
    except ValueError:
        return 1.0


def _daemonset_pod(pod: dict[str, Any]) -> bool:
    owners = pod["metadata"].get("ownerReferences") or []
    return any(owner.get("kind") == "DaemonSet" for owner in owners)


def _causes(data: bytes) -> tuple[str, ...]:
    """A Status body's details.causes[].reason, or none."""
    try:
        causes = (json.loads(data).get("details") or {}).get("causes") or []
        return tuple(str(c.get("reason", "")) for c in causes if isinstance(c, dict))
    except (TypeError, ValueError, AttributeError):
        return ()


def _mirror_pod(pod: dict[str, Any]) -> bool:
    """The kubelet's mirror of a static pod: the API cannot evict it (kubectl skips it)."""
    return MIRROR_ANNOTATION in (pod["metadata"].get("annotations") or {})


def _message(data: bytes) -> str:
    try:
        return json.loads(data).get("message", data.decode(errors="replace"))
    except (TypeError, ValueError, AttributeError):
        return data.decode(errors="replace") if isinstance(data, bytes) else str(data)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."
