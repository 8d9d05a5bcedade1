"""The API semantics the wizard relies on, asked of both control planes with the same calls
and compared: strategic merge patches of lists (spec.taints merge by key), optimistic
concurrency (a stale resourceVersion is a 409 Conflict), and an eviction a
PodDisruptionBudget refuses (429). Each divergence found here was fixed in the embedded
server (wizard/lab/kubeapi.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from wizard.lab.lab import Lab
from wizard.transports.kube import KubeClient, KubeError

SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


@pytest.fixture(params=["embedded", "real"])
async def kube(request, tmp_path):
    if request.param == "real":
        lab = request.getfixturevalue("real_lab")
        yield KubeClient(str(lab.kubeconfig))
        return
    async with Lab(tmp_path / "lab") as lab:
        yield KubeClient(str(lab.directory / "kubeconfig"))


async def _taints(kube: KubeClient, node: str) -> list[tuple[str, str]]:
    live = await kube.node(node)
    return sorted((t["key"], t["effect"]) for t in live["spec"].get("taints") or [])


async def test_a_strategic_merge_patch_merges_taints_by_key(kube):
    node = "cpu-worker-2"
    path = f"/api/v1/nodes/{node}"
    await kube.request("PATCH", path, {"spec": {"taints": None}}, content_type=MERGE)
    first = {"key": "gnw.test/a", "value": "1", "effect": "NoSchedule"}
    second = {"key": "gnw.test/b", "value": "2", "effect": "NoExecute"}
    await kube.request("PATCH", path, {"spec": {"taints": [first]}}, content_type=SMP)
    await kube.request("PATCH", path, {"spec": {"taints": [second]}}, content_type=SMP)
    assert await _taints(kube, node) == [("gnw.test/a", "NoSchedule"), ("gnw.test/b", "NoExecute")]
    changed = {**first, "effect": "PreferNoSchedule"}
    await kube.request("PATCH", path, {"spec": {"taints": [changed]}}, content_type=SMP)
    assert await _taints(kube, node) == [
        ("gnw.test/a", "PreferNoSchedule"),
        ("gnw.test/b", "NoExecute"),
    ]
    delete = {"$patch": "delete", "key": "gnw.test/a"}
    await kube.request("PATCH", path, {"spec": {"taints": [delete]}}, content_type=SMP)
    assert await _taints(kube, node) == [("gnw.test/b", "NoExecute")]
    # A JSON merge patch replaces the list whole.
    await kube.request("PATCH", path, {"spec": {"taints": [first]}}, content_type=MERGE)
    assert await _taints(kube, node) == [("gnw.test/a", "NoSchedule")]
    await kube.request("PATCH", path, {"spec": {"taints": None}}, content_type=MERGE)
    assert await _taints(kube, node) == []


async def test_a_stale_resource_version_is_a_conflict(kube):
    path = "/api/v1/namespaces/default/configmaps"
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "gnw-rv"},
        "data": {"a": "1"},
    }
    await kube.request(
        "DELETE", f"{path}/gnw-rv", content_type="application/json"
    ) if await _exists(kube, f"{path}/gnw-rv") else None
    created = await kube.request("POST", path, body)
    stale = created["metadata"]["resourceVersion"]
    await kube.request("PUT", f"{path}/gnw-rv", {**created, "data": {"a": "2"}})
    with pytest.raises(KubeError) as caught:
        await kube.request("PUT", f"{path}/gnw-rv", {**created, "data": {"a": "3"}})
    assert caught.value.status == 409 and "modified" in str(caught.value)
    with pytest.raises(KubeError) as caught:
        await kube.request("PATCH", f"{path}/gnw-rv",
                           {"metadata": {"resourceVersion": stale}, "data": {"a": "4"}}, content_type=MERGE)  # fmt: skip
    assert caught.value.status == 409
    # Re-read and retry: what the wizard's apply does.
    assert (await kube.apply(path, {**body, "data": {"a": "5"}}))["data"] == {"a": "5"}
    await kube.request("DELETE", f"{path}/gnw-rv")


async def _exists(kube: KubeClient, path: str) -> bool:
    try:
        await kube.request("GET", path)
    except KubeError as exc:
        if exc.status == 404:
            return False
        raise
    return True


async def test_an_eviction_a_disruption_budget_refuses_is_429(kube):
    ns, name = "default", "gnw-guarded"
    pdb_path = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
    if not await _exists(kube, f"{pdb_path}/gnw-guard"):
        await kube.request("POST", pdb_path, {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "gnw-guard"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "gnw-guarded"}}}})  # fmt: skip
    await kube.delete_pod(ns, name)
    while await kube.pod(ns, name):
        await asyncio.sleep(0.3)
    await kube.create_pod(ns, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "gnw-guarded"}},
        "spec": {"nodeName": "cpu-worker-1", "containers": [{"name": "main", "image": "lab"}]}})  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pdb = await kube.request("GET", f"{pdb_path}/gnw-guard")
        pod = await kube.pod(ns, name)
        running = (pod or {}).get("status", {}).get("phase") == "Running"
        # The real disruption controller computes the budget's status a moment later.
        if running and ("status" not in pdb or pdb["status"].get("currentHealthy") == 1):
            break
        await asyncio.sleep(0.5)
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": ns},
    }
    with pytest.raises(KubeError) as caught:
        await kube.request("POST", f"/api/v1/namespaces/{ns}/pods/{name}/eviction", eviction)
    assert caught.value.status == 429
    assert "disruption budget" in str(caught.value)
    await kube.request("DELETE", f"{pdb_path}/gnw-guard")
    await kube.delete_pod(ns, name)


async def test_a_drain_a_budget_blocks_waits_reports_and_never_forces(kube):
    """The wizard's drain: the 429 is asked again with progress told, and at the timeout
    the error names the refused pod and the budget; the pod is never deleted."""
    ns, name = "default", "gnw-drain-guarded"
    pdb_path = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
    if not await _exists(kube, f"{pdb_path}/gnw-drain-guard"):
        await kube.request("POST", pdb_path, {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "gnw-drain-guard"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": name}}}})  # fmt: skip
    if not await kube.pod(ns, name):
        await kube.create_pod(ns, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"nodeName": "cpu-worker-2", "containers": [{"name": "main", "image": "lab"}]}})  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pdb = await kube.request("GET", f"{pdb_path}/gnw-drain-guard")
        pod = await kube.pod(ns, name)
        if (pod or {}).get("status", {}).get("phase") == "Running" and (
            "status" not in pdb or pdb["status"].get("observedGeneration")
        ):
            break
        await asyncio.sleep(0.5)
    told: list[tuple[str, float]] = []
    try:
        with pytest.raises(KubeError) as caught:
            await kube.drain("cpu-worker-2", timeout=5, progress=lambda m, s: told.append((m, s)))
        message = str(caught.value)
        assert (
            f"{ns}/{name}" in message
            and "PodDisruptionBudget" in message
            and "not forced" in message
        )
        assert told and "refused by a PodDisruptionBudget" in told[0][0] and 0 < told[0][1] <= 5
        assert await kube.pod(ns, name) is not None
    finally:
        await kube.cordon("cpu-worker-2", False)
        await kube.request("DELETE", f"{pdb_path}/gnw-drain-guard")
        await kube.delete_pod(ns, name)
