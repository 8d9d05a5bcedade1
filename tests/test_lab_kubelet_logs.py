"""The lab kubelets' log endpoint against the status they write (no build needed).

A real kubelet serves the log of every pod in its pod manager, which holds a pod from its
admission on (pkg/kubelet/server/server.go getContainerLogs; kubelet.go
HandlePodAdditions), before any status of it reaches the API. The wizard waits for a
pod's phase and then reads its log once (wizard/transports/kube.py), so the lab's kubelet
must answer for a pod as soon as the API can show it Running or Succeeded, even while the
same pass still runs another node's pods."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from typing import Any

import pytest

from simulator.controlplane.certs import Pki
from simulator.controlplane.client import ApiError
from simulator.controlplane.kubelets import Kubelets


def _pod(name: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "proof", "name": name, "uid": f"uid-{name}-0000"},
        "spec": {"nodeName": node, "restartPolicy": "Never", "containers": [{"name": "c"}]},
        "status": {"phase": "Pending"},
    }


class _NodeApi:
    """The API as one node's kubelet sees it: its pods' listing, and their status writes
    (each observed by the test at the moment the API would show it)."""

    def __init__(self, cluster: _Cluster, node: str) -> None:
        self.cluster, self.node = cluster, node

    def get(self, path: str) -> dict[str, Any]:
        if self.node in self.cluster.failing:
            raise ApiError(500, {"message": f"listing of {self.node} failed"})
        return {"items": [p for p in self.cluster.pods if p["spec"]["nodeName"] == self.node]}

    def merge_patch(self, path: str, body: dict[str, Any]) -> None:
        name = path.split("/pods/", 1)[1].split("/", 1)[0]
        self.cluster.on_status(name, body["status"]["phase"])

    def request(self, *args: object, **kwargs: object) -> None:
        pass


class _Cluster:
    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.failing: set[str] = set()
        self.seen: list[tuple[str, str, str | None]] = []  # pod, phase, its log then
        self.kubelets: Kubelets | None = None

    def on_status(self, name: str, phase: str) -> None:
        assert self.kubelets is not None
        self.seen.append((name, phase, self.kubelets.container_log("proof", name)))


@pytest.fixture
def lab(tmp_path):
    pki = Pki(tmp_path / "pki")
    cluster = _Cluster()
    kubelets = Kubelets(
        installer=_NodeApi(cluster, "installer"),  # type: ignore[arg-type]
        identity=lambda node: _NodeApi(cluster, node),  # type: ignore[arg-type,return-value]
        serving=(str(pki.kubelet_serving.cert), str(pki.kubelet_serving.key)),
        client_ca=str(pki.ca),
        run_pod=lambda pod: {"phase": "Succeeded", "containerStatuses": []},
        pod_logs=lambda pod: f"log of {pod['metadata']['name']}\n",
    )
    cluster.kubelets = kubelets
    kubelets.nodes = {"node-a", "node-b"}
    yield cluster, kubelets, pki
    kubelets.endpoint.server_close()


def test_a_pod_the_api_shows_finished_has_its_log_on_its_node(lab):
    cluster, kubelets, _ = lab
    cluster.pods = [_pod("proof-a", "node-a"), _pod("proof-b", "node-b")]
    kubelets.sync_pods()
    # Each status write: the pod's log was already served (the first node's pod while
    # the second node's still ran, in the same pass).
    assert cluster.seen == [
        ("proof-a", "Succeeded", "log of proof-a\n"),
        ("proof-b", "Succeeded", "log of proof-b\n"),
    ]


def test_a_failing_node_keeps_its_pods_and_the_others_go_on(lab):
    cluster, kubelets, _ = lab
    cluster.pods = [_pod("proof-a", "node-a"), _pod("proof-b", "node-b")]
    kubelets.sync_pods()
    cluster.failing = {"node-a"}
    cluster.pods.append(_pod("proof-b2", "node-b"))
    kubelets.sync_pods()
    # node-a's listing failed: what it had admitted stays; node-b's pass went on.
    assert kubelets.container_log("proof", "proof-a") == "log of proof-a\n"
    assert ("proof-b2", "Succeeded", "log of proof-b2\n") in cluster.seen
    assert any("pods of node-a" in e for e in kubelets.errors)


def test_a_pod_gone_from_the_api_is_forgotten(lab):
    cluster, kubelets, _ = lab
    cluster.pods = [_pod("proof-a", "node-a")]
    kubelets.sync_pods()
    cluster.pods = []
    kubelets.sync_pods()
    assert kubelets.container_log("proof", "proof-a") is None


def test_the_endpoint_serves_an_admitted_pods_log_over_tls(lab):
    """The API server's side: GET /containerLogs/NS/POD/CONTAINER with its kubelet client
    certificate (pkg/kubelet/client/kubelet_client.go)."""
    cluster, kubelets, pki = lab
    cluster.pods = [_pod("proof-a", "node-a")]
    kubelets.sync_pods()
    kubelets.start()
    try:
        context = ssl.create_default_context(cafile=str(pki.ca))
        pair = pki.kubelet_client
        context.load_cert_chain(str(pair.cert), str(pair.key))
        base = f"https://127.0.0.1:{kubelets.port}/containerLogs/proof"
        with urllib.request.urlopen(f"{base}/proof-a/c", context=context, timeout=10) as r:
            assert r.read().decode() == "log of proof-a\n"
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{base}/elsewhere/c", context=context, timeout=10)
        assert missing.value.code == 404
    finally:
        kubelets.stop()
