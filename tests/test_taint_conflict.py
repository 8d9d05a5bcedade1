"""The labels-and-taint step's node update against another writer: spec.taints has no
patch strategy (k8s.io/api core/v1 NodeSpec.Taints), so a merge patch replaces the whole
list; computed from a stale read, it would drop a taint written in between. The patch
names the resourceVersion it read; the API server (the lab's, like the real one:
tests/test_real_api_semantics.py) answers 409, and the step reads and computes again."""

from __future__ import annotations

from types import SimpleNamespace

from simulator.kubeapi import ClusterState, KubeApiServer
from steps.join import LabelsAndTaint
from tests.conftest import MINIMAL_SITE
from tests.test_kube_client import kubeconfig
from wizard.site import parse_site
from wizard.transports.kube import KubeClient

SITE = MINIMAL_SITE + "taint: {enabled: true}\n"
OTHER = {"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"}


class RacedKube:
    """The real client; between the step's first read of the node and its write, another
    writer (an admin's kubectl taint) adds a taint through the same API server."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self.reads = 0

    async def node(self, name):
        live = await self.kube.node(name)
        self.reads += 1
        if self.reads == 1:
            taints = (live.get("spec") or {}).get("taints") or []
            await self.kube.patch_node(name, {"spec": {"taints": [*taints, OTHER]}})
        return live

    async def patch_node(self, name, body):
        return await self.kube.patch_node(name, body)


async def test_a_taint_added_between_the_read_and_the_write_is_kept(tmp_path):
    state = ClusterState()
    state.put("v1", "nodes", {"apiVersion": "v1", "kind": "Node",
                              "metadata": {"name": "gpu-1", "labels": {}}, "spec": {}})  # fmt: skip
    server = KubeApiServer(state)
    server.start()
    try:
        kube = KubeClient(kubeconfig(tmp_path / "kubeconfig", server.url))
        raced = RacedKube(kube)
        site = parse_site(SITE)
        node = next(n for n in site.nodes if n.name == "gpu-1")
        ctx = SimpleNamespace(services=SimpleNamespace(kube=raced), node=node, site=site)
        await LabelsAndTaint().apply(ctx, [])
        taints = (await kube.node("gpu-1"))["spec"]["taints"]
        assert OTHER in taints
        assert {"key": site.taint.key, "value": site.taint.value,
                "effect": site.taint.effect} in taints  # fmt: skip
        assert raced.reads == 2  # the 409, then read again
    finally:
        server.stop()
