"""The wizard's RDMA device plugin beside a cluster's existing one (#30): the existing
plugin's ConfigMap, DaemonSet and pods stay exactly as they were, and so do the other
node's resources; a plugin that already serves the same resource name refuses the step."""

from __future__ import annotations

import copy
import io
import json

from steps.rdma_plugin import CONFIGMAP, DAEMONSET
from tests.conftest import K8S_PHASES, run_in_lab
from wizard.headless import HeadlessFrontEnd
from wizard.lab.existing import (
    OTHER_GPU_NODE,
    UPSTREAM_CONFIGMAP,
    UPSTREAM_DAEMONSET,
    UPSTREAM_RESOURCE,
)
from wizard.lab.lab import Lab
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
