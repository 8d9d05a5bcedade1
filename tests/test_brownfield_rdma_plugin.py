"""The wizard's RDMA device plugin beside a cluster's existing one (#30): the existing
plugin's ConfigMap, DaemonSet and pods stay exactly as they were, and so do the other
node's resources; a plugin that already serves the same resource name refuses the step."""

from __future__ import annotations

import copy
import io
import json

from frontend.headless import HeadlessFrontEnd
from simulator.existing import (
    OTHER_GPU_NODE,
    UPSTREAM_CONFIGMAP,
    UPSTREAM_DAEMONSET,
    UPSTREAM_RESOURCE,
)
from simulator.lab import Lab
from steps.rdma_plugin import CONFIGMAP, DAEMONSET
from tests.conftest import K8S_PHASES, run_in_lab
from wizard.model import Severity

NS = "kube-system"


def existing_state(lab: Lab) -> dict:
    """What must not change: the objects with uid and resourceVersion, the pods by uid."""
    pods = [
        p
        for p in lab.cluster.list("v1", "pods", NS)
        if p["metadata"]["name"].startswith(UPSTREAM_DAEMONSET)
    ]
    other = lab.cluster.node(OTHER_GPU_NODE[0])
    return copy.deepcopy({
        "configmap": lab.cluster.get("v1", "configmaps", NS, UPSTREAM_CONFIGMAP),
        "daemonset": lab.cluster.get("apps/v1", "daemonsets", NS, UPSTREAM_DAEMONSET),
        "pods": sorted((p["metadata"]["name"], p["metadata"]["uid"], p["spec"]["nodeName"]) for p in pods),
        "other-node": (other["metadata"], other["spec"], other["status"]["allocatable"]),
    })  # fmt: skip


async def run(tmp_path, prepare=None):
    frontend = HeadlessFrontEnd(yes=True, out=io.StringIO())
    before: dict = {}

    def capture(lab: Lab) -> None:
        if prepare is not None:
            prepare(lab)
        before.update(existing_state(lab))

    outcome, lab = await run_in_lab(
        tmp_path, frontend, "existing-rdma-plugin", phases=K8S_PHASES, prepare=capture
    )
    return outcome, lab, before


async def test_the_existing_plugin_and_its_node_are_left_untouched(tmp_path):
    outcome, lab, before = await run(tmp_path)
    assert before["pods"] and before["other-node"][2][UPSTREAM_RESOURCE] == "1000"
    after = existing_state(lab)
    assert after["configmap"] == before["configmap"]  # same uid, resourceVersion and data
    assert after["daemonset"] == before["daemonset"]
    assert after["pods"] == before["pods"]  # none deleted or replaced
    assert after["other-node"] == before["other-node"]
    assert outcome.exit_code == 0, [
        (f.check, f.message) for _, _, f in outcome.findings if f.severity is Severity.FAIL
    ]
    # The wizard's own plugin beside it, on the new node only.
    ours = lab.cluster.get("apps/v1", "daemonsets", NS, DAEMONSET)
    assert ours["spec"]["template"]["spec"]["nodeSelector"] == {"accelerator": "nvidia-b300"}
    config = json.loads(lab.cluster.get("v1", "configmaps", NS, CONFIGMAP)["data"]["config.json"])
    assert [e["resourceName"] for e in config["configList"]] == ["e810"]
    assert lab.cluster.node("gpu-b300-01")["status"]["allocatable"]["rdma/e810"] == "64"
    existing = [f for _, _, f in outcome.findings if f.check == "T03.existing-plugin"]
    assert existing and existing[0].severity is Severity.PASS
    assert f"{NS}/{UPSTREAM_DAEMONSET}" in existing[0].message and "hca" in existing[0].message


async def test_an_existing_plugin_serving_the_same_resource_name_refuses_the_step(tmp_path):
    def serve_e810(lab: Lab) -> None:
        cm = lab.cluster.get("v1", "configmaps", NS, UPSTREAM_CONFIGMAP)
        config = json.loads(cm["data"]["config.json"])
        # Another prefix does not help: the socket is <resourceName>.sock.
        config["configList"].append({"resourceName": "e810", "resourcePrefix": "site",
                                     "rdmaHcaMax": 10, "selectors": {"vendors": ["8086"]}})  # fmt: skip
        cm["data"]["config.json"] = json.dumps(config)
        lab.cluster.put("v1", "configmaps", cm)

    outcome, lab, before = await run(tmp_path, prepare=serve_e810)
    refusal = [f for _, _, f in outcome.findings if f.check == "T03.existing-plugin"]
    assert refusal and refusal[0].severity is Severity.FAIL
    assert "'e810'" in refusal[0].message and "resource_name" in refusal[0].remediation
    assert lab.cluster.get("apps/v1", "daemonsets", NS, DAEMONSET) is None  # nothing applied
    assert existing_state(lab) == before


def earlier_addition(lab: Lab) -> None:
    """An earlier run of the wizard added gpu-b300-00: its own plugin ConfigMap (that node's
    netdev only) and DaemonSet exist, with a plugin pod on gpu-b300-00, now an existing node."""
    from simulator.kubeapi import owner_reference
    from steps.rdma_plugin import config_digest, configmap, daemonset
    from wizard.site import load_site

    site = load_site(lab.site_path)
    node = lab._node_object("gpu-b300-00", "10.10.1.29", control_plane=False, gpu_host=None)
    node["metadata"]["labels"].update(site.labels)
    lab.cluster.put("v1", "nodes", node)
    cm = configmap(site, ["ens9f0np0"])
    lab.cluster.put("v1", "configmaps", cm)
    ds = lab.cluster.put("apps/v1", "daemonsets", daemonset(site, config_digest(cm)))
    pod = lab._pod(NS, f"{DAEMONSET}-old00", "gpu-b300-00")
    pod["metadata"]["labels"] = {"name": DAEMONSET}
    pod["metadata"]["ownerReferences"] = [owner_reference(ds)]
    lab.cluster.put("v1", "pods", pod)


async def test_the_wizards_own_plugin_from_an_earlier_addition_is_changed_only_by_name(tmp_path):
    """The wizard's ConfigMap and DaemonSet existed (an earlier node addition): adding this
    node's netdev changes them and rolls the plugin pod on gpu-b300-00, so --yes stops at
    rdma-plugin-update naming that pod, and nothing of them changes."""
    import pytest

    from wizard.engine import DecisionRequired

    seen: dict = {}

    def prepare(lab: Lab) -> None:
        earlier_addition(lab)
        seen["lab"] = lab
        seen["cm"] = copy.deepcopy(lab.cluster.get("v1", "configmaps", NS, CONFIGMAP))

    frontend = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
    with pytest.raises(DecisionRequired) as stopped:
        await run_in_lab(tmp_path, frontend, phases=K8S_PHASES, prepare=prepare)
    assert stopped.value.decision.confirm_text == "rdma-plugin-update"
    text = str(stopped.value)
    assert "--allow-cluster-change rdma-plugin-update" in text
    assert f"{NS}/{DAEMONSET}-old00 on gpu-b300-00" in text
    assert f"ConfigMap {NS}/{CONFIGMAP}" in text
    lab = seen["lab"]
    assert lab.cluster.get("v1", "configmaps", NS, CONFIGMAP)["data"] == seen["cm"]["data"]
