"""The drain as kubectl drains (staging/src/k8s.io/kubectl/pkg/drain/drain.go evictPods,
filters.go), against an API server that answers the eviction subresource the way
pkg/registry/core/pod/storage/eviction.go does in the situations a live cluster produces
but a test cannot time: the pod gone between the list and the eviction (404 NotFound), a
namespace being deleted (403 with cause NamespaceTerminating), a 429 with Retry-After."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from tests.test_kube_client import kubeconfig
from wizard.transports import kube as kube_module
from wizard.transports.kube import BarePodsError, KubeClient, KubeError

# What a ReplicaSet's pod carries (apimachinery metav1.NewControllerRef).
REPLICASET = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "1",
              "controller": True}  # fmt: skip


def pod(name, *, annotations=None, terminating=False, ns="default", owners=(REPLICASET,),
        phase="Running"):  # fmt: skip
    meta = {"name": name, "namespace": ns, "annotations": annotations or {},
            "ownerReferences": list(owners)}  # fmt: skip
    if terminating:
        meta["deletionTimestamp"] = "2026-12-01T23:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": "gpu-1"}, "status": {"phase": phase}}


class Cluster:
    """The node's pods and, per pod, the eviction answers still to give (then 201)."""

    def __init__(self, pods, answers):
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.answers = answers  # name -> list of (status, body, headers); 201 deletes
        self.evictions: list[str] = []
        self.lock = threading.Lock()


def serve(cluster: Cluster):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, code, body, headers=()):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in headers:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_PATCH(self):  # the cordon
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._send(200, {"metadata": {"name": "gpu-1"}})

        def do_GET(self):
            url = urlparse(self.path)
            assert parse_qs(url.query)["fieldSelector"] == ["spec.nodeName=gpu-1"]
            with cluster.lock:
                items = list(cluster.pods.values())
            self._send(200, {"kind": "PodList", "items": items})

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            name = self.path.split("/")[-2]
            with cluster.lock:
                cluster.evictions.append(name)
                queue = cluster.answers.get(name) or []
                if queue:
                    code, body, headers = queue.pop(0)
                    if code == 404:
                        cluster.pods.pop(name, None)
                    self._send(code, body, headers)
                    return
                # Accepted: the pod terminates (deletionTimestamp), then is gone.
                current = cluster.pods.get(name)
                if current is not None:
                    current["metadata"]["deletionTimestamp"] = "2026-12-01T23:00:00Z"
                    threading.Timer(0.3, lambda: cluster.pods.pop(name, None)).start()
            self._send(201, {"kind": "Status", "status": "Success"})

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def status(code, reason, message, causes=()):
    return {
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
        "reason": reason, "message": message,
        "details": {"causes": [{"reason": c, "message": message} for c in causes]},
    }  # fmt: skip


@pytest.fixture
def drive(tmp_path, monkeypatch):
    sleeps: list[float] = []
    real_sleep = kube_module.asyncio.sleep

    async def recorded(seconds, *args):
        sleeps.append(seconds)
        await real_sleep(min(seconds, 0.05))

    monkeypatch.setattr(kube_module.asyncio, "sleep", recorded)
    servers = []

    async def run(cluster, timeout=30.0, delete_bare=()):
        httpd = serve(cluster)
        servers.append(httpd)
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        client = KubeClient(kubeconfig(tmp_path / "kubeconfig", url))
        return await client.drain("gpu-1", timeout=timeout, delete_bare=delete_bare)

    yield run, sleeps
    for httpd in servers:
        httpd.shutdown()


NOT_FOUND = (404, status(404, "NotFound", 'pods "a" not found'), ())


async def test_a_pod_gone_before_its_eviction_is_evicted_not_an_error(drive):
    run, _ = drive
    cluster = Cluster([pod("a"), pod("b")], {"a": [NOT_FOUND]})
    assert await run(cluster) == ["default/a", "default/b"]


async def test_a_terminating_namespace_is_asked_again_after_five_seconds(drive):
    run, sleeps = drive
    forbidden = (
        403,
        status(403, "Forbidden", "namespace default is being terminated", ["NamespaceTerminating"]),
        (),
    )
    cluster = Cluster([pod("a")], {"a": [forbidden, forbidden]})
    assert await run(cluster) == ["default/a"]
    assert cluster.evictions == ["a", "a", "a"]
    assert sleeps[:2] == [5.0, 5.0]


async def test_another_forbidden_eviction_stops_the_drain(drive):
    run, _ = drive
    forbidden = (403, status(403, "Forbidden", "pods/eviction is forbidden"), ())
    with pytest.raises(KubeError) as caught:
        await run(Cluster([pod("a")], {"a": [forbidden]}))
    assert caught.value.status == 403


async def test_a_budget_refusal_waits_five_seconds_or_the_retry_after(drive):
    run, sleeps = drive
    budget = (429, status(429, "TooManyRequests", "would violate the disruption budget"), ())
    busy = (
        429,
        status(429, "TooManyRequests", "still being processed"),
        (("Retry-After", "10"),),
    )
    cluster = Cluster([pod("a")], {"a": [budget, busy]})
    assert await run(cluster) == ["default/a"]
    assert sleeps[:2] == [5.0, 10.0]


async def test_mirror_and_terminating_pods_are_not_evicted_and_none_twice(drive):
    run, _ = drive
    mirror = pod("kube-proxy-gpu-1", annotations={"kubernetes.io/config.mirror": "abc"})
    leaving = pod("leaving", terminating=True)
    cluster = Cluster([mirror, leaving, pod("a")], {})
    threading.Timer(0.4, lambda: cluster.pods.pop("leaving", None)).start()

    # The mirror pod stays (only its kubelet removes it): the drain ends without it.
    evicted = await run(cluster)
    assert evicted == ["default/a"]
    assert cluster.evictions == ["a"]  # once, though it stayed listed while terminating
    assert "kube-proxy-gpu-1" in cluster.pods


# kubectl drain without --force (k8s.io/kubectl pkg/drain/filters.go unreplicatedFilter,
# kubernetes/kubectl dee3483): a running pod whose ownerReferences hold no controller
# (metav1.GetControllerOf) is "Pods that declare no controller (use --force to override)",
# and GetPodsForDeletion's error stops the drain before any eviction.
NOT_A_CONTROLLER = {**REPLICASET, "controller": False}


async def test_a_pod_with_no_controller_stops_the_drain_before_any_eviction(drive):
    run, _ = drive
    bare = pod("scratch", ns="team", owners=())
    adopted = pod("adopted", ns="team", owners=(NOT_A_CONTROLLER,))  # an owner, no controller
    cluster = Cluster([pod("a"), bare, adopted], {})
    with pytest.raises(BarePodsError) as caught:
        await run(cluster)
    assert caught.value.pods == ("team/scratch", "team/adopted")
    assert "team/scratch, team/adopted declare no controller" in str(caught.value)
    assert cluster.evictions == []  # not even the pod with a controller
    assert {"a", "scratch", "adopted"} <= set(cluster.pods)


async def test_a_pod_with_no_controller_approved_by_name_is_evicted_a_finished_one_is_left(drive):
    run, _ = drive
    done = pod("job-done", owners=(), phase="Succeeded")  # any finished pod may go (kubectl)
    cluster = Cluster([pod("a"), pod("scratch", ns="team", owners=()), done], {})
    assert await run(cluster, delete_bare={"team/scratch"}) == ["default/a", "team/scratch"]
    assert "job-done" in cluster.pods  # not evicted: it runs nothing
