"""The API semantics the wizard relies on, asked of both control planes with the same calls
and compared: strategic merge patches of lists (spec.taints has no patch strategy: the
list is replaced whole, as by a JSON merge patch), optimistic concurrency (a stale
resourceVersion is a 409 Conflict), and an eviction a PodDisruptionBudget refuses (429). Each divergence found here was fixed in the embedded
server (simulator/kubeapi.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from simulator.lab import Lab
from tests.real_tier import mpijob
from wizard.transports.kube import KubeClient, KubeError

SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


@pytest.fixture(params=["embedded", "real"])
async def kube(request, tmp_path):
    if request.param == "real":
        lab = request.getfixturevalue("real_lab")
        client = KubeClient(str(lab.kubeconfig))
        client.real = True  # type: ignore[attr-defined]
        client.path = str(lab.kubeconfig)  # type: ignore[attr-defined]
        yield client
        return
    # The same cluster as real_lab's (greenfield): cpu-worker-2 without the default lab's
    # site taint and PDB-protected workload, which these tests would see.
    async with Lab(tmp_path / "lab", faults=("greenfield",)) as lab:
        client = KubeClient(str(lab.directory / "kubeconfig"))
        client.real = False  # type: ignore[attr-defined]
        client.path = str(lab.directory / "kubeconfig")  # type: ignore[attr-defined]
        yield client


async def _budget_counted(kube: KubeClient, pdb_path: str, pod_ns: str, pod_name: str) -> None:
    """Until the pod runs and (on the real control plane) the disruption controller has
    counted it in the budget's status: an eviction before that is not judged by it."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pdb = await kube.request("GET", pdb_path)
        pod = await kube.pod(pod_ns, pod_name)
        running = (pod or {}).get("status", {}).get("phase") == "Running"
        if running and (not kube.real or (pdb.get("status") or {}).get("currentHealthy") == 1):
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"{pod_ns}/{pod_name} not counted by {pdb_path} in 60 s")


async def _taints(kube: KubeClient, node: str) -> list[tuple[str, str]]:
    live = await kube.node(node)
    return sorted((t["key"], t["effect"]) for t in live["spec"].get("taints") or [])


async def test_a_strategic_merge_patch_replaces_taints(kube):
    """NodeSpec.Taints has no patch strategy (k8s.io/api core/v1 types.go): a strategic
    merge patch of spec.taints replaces the list, as a JSON merge patch does. (The embedded
    server merged them by key until this test ran on both.)"""
    node = "cpu-worker-2"
    path = f"/api/v1/nodes/{node}"
    first = {"key": "gnw.test/a", "value": "1", "effect": "NoSchedule"}
    second = {"key": "gnw.test/b", "value": "2", "effect": "NoExecute"}
    try:
        await kube.request("PATCH", path, {"spec": {"taints": [first]}}, content_type=SMP)
        await kube.request("PATCH", path, {"spec": {"taints": [second]}}, content_type=SMP)
        assert await _taints(kube, node) == [("gnw.test/b", "NoExecute")]
        await kube.request("PATCH", path, {"spec": {"taints": [first, second]}}, content_type=MERGE)
        assert await _taints(kube, node) == [
            ("gnw.test/a", "NoSchedule"),
            ("gnw.test/b", "NoExecute"),
        ]
    finally:
        await kube.request("PATCH", path, {"spec": {"taints": None}}, content_type=MERGE)
    assert await _taints(kube, node) == []


async def test_a_strategic_merge_patch_merges_containers_and_env_by_name(kube):
    """PodSpec.Containers (patchMergeKey name) and Container.Env (name) merge item by item;
    ``$patch: delete`` removes one; Tolerations (no strategy) replace."""
    ns, name = "default", "gnw-smp"
    path = f"/apis/apps/v1/namespaces/{ns}/daemonsets"
    body = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"nodeSelector": {"gnw.test/none": "x"},
                         "tolerations": [{"key": "a", "operator": "Exists"}],
                         "containers": [{"name": "a", "image": "lab:1", "env": [{"name": "X", "value": "1"}]}]}}}}  # fmt: skip
    if await _exists(kube, f"{path}/{name}"):
        await kube.request("DELETE", f"{path}/{name}")
    await kube.request("POST", path, body)
    try:
        patch = {"spec": {"template": {"spec": {
            "tolerations": [{"key": "b", "operator": "Exists"}],
            "containers": [{"name": "a", "env": [{"name": "Y", "value": "2"}]},
                           {"name": "b", "image": "lab:2"}]}}}}  # fmt: skip
        live = await kube.request("PATCH", f"{path}/{name}", patch, content_type=SMP)
        spec = live["spec"]["template"]["spec"]
        assert [(c["name"], c["image"]) for c in spec["containers"]] == [
            ("a", "lab:1"),
            ("b", "lab:2"),
        ]
        # The patch's items first, then the live ones it did not name (normalizeElementOrder).
        assert [(e["name"], e["value"]) for e in spec["containers"][0]["env"]] == [
            ("Y", "2"),
            ("X", "1"),
        ]
        assert [t["key"] for t in spec["tolerations"]] == ["b"]
        delete = {
            "spec": {"template": {"spec": {"containers": [{"$patch": "delete", "name": "a"}]}}}
        }
        live = await kube.request("PATCH", f"{path}/{name}", delete, content_type=SMP)
        assert [c["name"] for c in live["spec"]["template"]["spec"]["containers"]] == ["b"]
    finally:
        await kube.request("DELETE", f"{path}/{name}")


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
    await _budget_counted(kube, f"{pdb_path}/gnw-guard", ns, name)
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
    await _budget_counted(kube, f"{pdb_path}/gnw-drain-guard", ns, name)
    told: list[tuple[str, float]] = []
    try:
        with pytest.raises(KubeError) as caught:
            # A bare pod (no controller): its deletion approved by name, or the drain would
            # refuse it before any eviction (kubectl drain.go without --force); the budget
            # is what is judged here.
            await kube.drain("cpu-worker-2", timeout=5, progress=lambda m, s: told.append((m, s)),
                             delete_bare=(f"{ns}/{name}",))  # fmt: skip
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


class _Interleaved(KubeClient):
    """The wizard's client with another writer's update forced between its read and its
    replace (the race a busy cluster has), through a second client to the same server."""

    def __init__(self, kubeconfig: str, other: KubeClient, writes: int) -> None:
        super().__init__(kubeconfig)
        self.other, self.writes = other, writes

    async def request(self, method, path, body=None, **kwargs):
        answer = await super().request(method, path, body, **kwargs)
        if method == "GET" and path.endswith("/gnw-race") and self.writes:
            self.writes -= 1
            await self.other.request("PATCH", path, {"data": {"other": str(self.writes)}},
                                     content_type=MERGE)  # fmt: skip
        return answer


async def test_apply_rereads_and_retries_on_a_conflict(kube):
    path = "/api/v1/namespaces/default/configmaps"
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "gnw-race"},
        "data": {"a": "1"},
    }
    if await _exists(kube, f"{path}/gnw-race"):
        await kube.request("DELETE", f"{path}/gnw-race")
    await kube.request("POST", path, body)
    try:
        racing = _Interleaved(kube.path, kube, writes=2)
        result = await racing.apply(path, {**body, "data": {"a": "2"}})
        assert result["data"] == {"a": "2"}  # two conflicts, then the third replace landed
        assert racing.writes == 0
        always = _Interleaved(kube.path, kube, writes=100)
        with pytest.raises(KubeError) as caught:
            await always.apply(path, {**body, "data": {"a": "3"}})
        assert caught.value.status == 409
    finally:
        await kube.request("DELETE", f"{path}/gnw-race")


def _generation(obj: dict) -> int | None:
    return obj["metadata"].get("generation")


async def test_generation_counts_spec_changes_only(kube):
    """metadata.generation (API conventions, "metadata"; k8s.io/apiserver registry/rest
    BeforeUpdate keeps the stored one, whatever a client sends): 1 on create for the kinds
    whose strategy sets it (a DaemonSet: pkg/registry/apps/daemonset/strategy.go), one more
    on each change of the spec, none on a label's; a custom resource counts a change of
    anything but its metadata (apiextensions-apiserver registry/customresource strategy.go);
    a ConfigMap has none."""
    ns = "default"
    path = f"/apis/apps/v1/namespaces/{ns}/daemonsets"
    name = "gnw-generation"
    body = {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "generation": 7},
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"nodeSelector": {"gnw.test/none": "x"},
                         "containers": [{"name": "a", "image": "lab:1"}]}}}}  # fmt: skip
    if await _exists(kube, f"{path}/{name}"):
        await kube.request("DELETE", f"{path}/{name}")
    try:
        assert _generation(await kube.request("POST", path, body)) == 1
        labelled = {"metadata": {"labels": {"gnw.test/label": "x"}}}
        live = await kube.request("PATCH", f"{path}/{name}", labelled, content_type=MERGE)
        assert _generation(live) == 1
        image = {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "lab:2"}]}}}}
        live = await kube.request("PATCH", f"{path}/{name}", image, content_type=SMP)
        assert _generation(live) == 2
        live["metadata"]["generation"] = 99  # a client's value is not taken
        live = await kube.request("PUT", f"{path}/{name}", live)
        assert _generation(live) == 2
    finally:
        await kube.request("DELETE", f"{path}/{name}")
    jobs = f"/apis/kubeflow.org/v2beta1/namespaces/{ns}/mpijobs"
    job = mpijob(name)
    if await _exists(kube, f"{jobs}/{name}"):
        await kube.request("DELETE", f"{jobs}/{name}")
    try:
        assert _generation(await kube.request("POST", jobs, job)) == 1
        live = await kube.request("PATCH", f"{jobs}/{name}", labelled, content_type=MERGE)
        assert _generation(live) == 1
        live = await kube.request("PATCH", f"{jobs}/{name}", {"spec": {"slotsPerWorker": 2}},
                                  content_type=MERGE)  # fmt: skip
        assert _generation(live) == 2
    finally:
        await kube.request("DELETE", f"{jobs}/{name}")
    maps = f"/api/v1/namespaces/{ns}/configmaps"
    if await _exists(kube, f"{maps}/{name}"):
        await kube.request("DELETE", f"{maps}/{name}")
    created = await kube.request("POST", maps, {"apiVersion": "v1", "kind": "ConfigMap",
                                                "metadata": {"name": name}, "data": {"a": "1"}})  # fmt: skip
    await kube.request("DELETE", f"{maps}/{name}")
    assert _generation(created) is None


async def test_scale_is_served_where_the_kind_declares_it(kube):
    """The /scale subresource: a Deployment's is an autoscaling/v1 Scale (its replicas and
    its selector as a string: pkg/registry/apps/deployment/storage ScaleREST); a custom
    resource has one only when its CRD declares ``subresources.scale`` (apiextensions
    CustomResourceSubresourceScale), and none we serve does (the MPIJob CRD, the GPU
    Operator's crds/: status only), so there as on a ConfigMap it is 404."""
    ns, name = "default", "gnw-scale"
    deployments = f"/apis/apps/v1/namespaces/{ns}/deployments"
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"nodeSelector": {"gnw.test/none": "x"},
                         "containers": [{"name": "a", "image": "lab:1"}]}}}}  # fmt: skip
    maps = f"/api/v1/namespaces/{ns}/configmaps"
    jobs = f"/apis/kubeflow.org/v2beta1/namespaces/{ns}/mpijobs"
    for path in (deployments, maps, jobs):
        if await _exists(kube, f"{path}/{name}"):
            await kube.request("DELETE", f"{path}/{name}")
    await kube.request("POST", deployments, body)
    await kube.request("POST", maps, {"apiVersion": "v1", "kind": "ConfigMap",
                                      "metadata": {"name": name}, "data": {}})  # fmt: skip
    await kube.request("POST", jobs, mpijob(name))
    try:
        scale = await kube.request("GET", f"{deployments}/{name}/scale")
        assert (scale["apiVersion"], scale["kind"]) == ("autoscaling/v1", "Scale")
        assert scale["metadata"]["name"] == name and scale["spec"] == {"replicas": 2}
        assert scale["status"]["selector"] == f"app={name}"
        for path in (
            f"{maps}/{name}/scale",
            f"/apis/kubeflow.org/v2beta1/namespaces/{ns}/mpijobs/none/scale",
        ):
            with pytest.raises(KubeError) as refused:
                await kube.request("GET", path)
            assert refused.value.status == 404, path
    finally:
        for path in (deployments, maps, jobs):
            await kube.request("DELETE", f"{path}/{name}")


async def test_a_subresource_write_changes_only_what_the_subresource_owns(kube):
    """cp-r4 B1: an update of /status takes the status alone (registry StatusStrategy
    PrepareForUpdate keeps spec and metadata), so the generation stays; an update of
    /scale sets spec.replicas alone and answers a Scale (ScaleREST), one more generation;
    a verb a subresource does not serve (DELETE of /status, POST of /scale) is 405."""
    ns, name = "default", "gnw-subwrite"
    deployments = f"/apis/apps/v1/namespaces/{ns}/deployments"
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"nodeSelector": {"gnw.test/none": "x"},
                         "containers": [{"name": "a", "image": "lab:1"}]}}}}  # fmt: skip
    if await _exists(kube, f"{deployments}/{name}"):
        await kube.request("DELETE", f"{deployments}/{name}")
    created = await kube.request("POST", deployments, body)
    try:
        patched = await kube.request(
            "PATCH", f"{deployments}/{name}/status",
            {"spec": {"replicas": 9}, "status": {"observedGeneration": 1, "replicas": 0}},
            content_type=MERGE,
        )  # fmt: skip
        assert patched["spec"]["replicas"] == 1  # the spec is not the status's to change
        assert _generation(patched) == _generation(created)
        scale = await kube.request("GET", f"{deployments}/{name}/scale")
        scale["spec"]["replicas"] = 3
        # Unconditional (no resourceVersion): the real Deployment controller writes the
        # status between the read and the write, which a conditional write would lose to.
        scale["metadata"].pop("resourceVersion", None)
        answered = await kube.request("PUT", f"{deployments}/{name}/scale", scale)
        assert (answered["kind"], answered["spec"]) == ("Scale", {"replicas": 3})
        live = await kube.request("GET", f"{deployments}/{name}")
        assert live["spec"]["replicas"] == 3
        assert live["spec"]["template"]["spec"]["containers"][0]["image"] == "lab:1"
        assert _generation(live) == _generation(created) + 1
        for verb, path in (("DELETE", "status"), ("POST", "scale")):
            with pytest.raises(KubeError) as refused:
                await kube.request(verb, f"{deployments}/{name}/{path}", {})
            assert refused.value.status == 405, (verb, path)
        assert await _exists(kube, f"{deployments}/{name}")
    finally:
        await kube.request("DELETE", f"{deployments}/{name}")
