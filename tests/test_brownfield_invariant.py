"""Brownfield by default (#30 points 1-3): on the default lab (an existing production cluster:
an H100 node with its own RDMA plugin, a GPU Operator release at the site's pinned version
with user values, workloads behind PDBs, a site taint; the new GPU node not joined yet), the
whole headless run joins the node and changes nothing outside it; on the variant whose
release is older, the upgrade stops at its named decision unless approved by name, and the
report lists exactly which pods on which existing nodes restarted.

What is measured is the API's own objects before and after: every existing node's labels,
taints, schedulability and allocatable, and every pod on an existing node by uid,
restartCount and resourceVersion.
"""

from __future__ import annotations

import asyncio
import io
import time
from typing import Any

import pytest

from frontend.headless import HeadlessFrontEnd
from frontend.runner import run_engine
from simulator.existing import OTHER_GPU_NODE, SITE_TAINT, UPSTREAM_RESOURCE, WORKLOADS
from simulator.lab import Lab
from steps import build_plan
from tests.conftest import K8S_PHASES
from tests.real_tier import require_real
from wizard.approvals import ClusterChange
from wizard.engine import DecisionRequired
from wizard.events import DecisionKind
from wizard.report import checkpoint_report, markdown
from wizard.site import load_site
from wizard.transports.kube import KubeClient

NEW = "gpu-b300-01"


def nodes_snapshot(lab: Lab) -> dict[str, Any]:
    with lab.cluster.lock:
        return {
            n["metadata"]["name"]: {
                "labels": dict(n["metadata"].get("labels") or {}),
                "taints": list(n.get("spec", {}).get("taints") or []),
                "unschedulable": bool(n.get("spec", {}).get("unschedulable")),
                "allocatable": dict(n.get("status", {}).get("allocatable") or {}),
            }
            for n in lab.cluster.list("v1", "nodes", None)
        }


def pods_snapshot(lab: Lab, nodes: set[str]) -> dict[str, tuple[str, int, str]]:
    """uid -> (namespace/name on node, restarts, resourceVersion) of pods on ``nodes``."""
    with lab.cluster.lock:
        found = {}
        for pod in lab.cluster.list("v1", "pods", None):
            node = pod.get("spec", {}).get("nodeName")
            if node not in nodes:
                continue
            meta = pod["metadata"]
            restarts = sum(
                s.get("restartCount", 0) for s in pod.get("status", {}).get("containerStatuses", [])
            )
            found[meta["uid"]] = (
                f"{meta['namespace']}/{meta['name']} on {node}",
                restarts,
                meta["resourceVersion"],
            )
        return found


async def test_default_lab_is_a_production_cluster_the_new_node_joins(tmp_path):
    async with Lab(tmp_path / "lab") as lab:
        nodes = nodes_snapshot(lab)
        assert NEW not in nodes  # joined by the wizard's Kubespray run, not before
        assert nodes[OTHER_GPU_NODE[0]]["allocatable"][UPSTREAM_RESOURCE] == "1000"
        assert SITE_TAINT[1] in nodes[SITE_TAINT[0]]["taints"]
        release = lab.releases["gpu-operator/gpu-operator"]
        assert release["version"] == load_site(lab.site_path).versions.gpu_operator
        assert release["values"]["devicePlugin"]["config"]["name"] == "time-slicing"
        pdbs = lab.cluster.list("policy/v1", "poddisruptionbudgets", None)
        assert {p["metadata"]["name"] for p in pdbs} == set(WORKLOADS)
        site = load_site(lab.site_path)
        assert site.cluster.kubespray is not None  # the wizard runs the join itself


async def api_snapshot(kube: KubeClient, nodes: set[str] | None = None):
    """Through the API (either control plane): each node's labels, taints, schedulability
    and allocatable; uid -> (name on node, restarts, resourceVersion) of pods on ``nodes``."""
    live = {
        n["metadata"]["name"]: {
            "labels": dict(n["metadata"].get("labels") or {}),
            "taints": list(n.get("spec", {}).get("taints") or []),
            "unschedulable": bool(n.get("spec", {}).get("unschedulable")),
            "allocatable": dict(n.get("status", {}).get("allocatable") or {}),
        }
        for n in await kube.nodes()
    }
    nodes = set(live) if nodes is None else nodes
    pods = {}
    for pod in await kube.pods():
        node, meta = pod.get("spec", {}).get("nodeName"), pod["metadata"]
        if node in nodes:
            statuses = pod.get("status", {}).get("containerStatuses") or []
            pods[meta["uid"]] = (
                f"{meta['namespace']}/{meta['name']} on {node}",
                sum(s.get("restartCount", 0) for s in statuses),
                meta["resourceVersion"],
            )
    return live, pods


# The kinds of object the invariant compares, and the part of each that is what it is: data
# (and type) of a ConfigMap or Secret, the spec of a DaemonSet or Deployment (a controller
# writes status and resourceVersion, never these).
OBJECT_KINDS = {
    "/api/v1/configmaps": ("ConfigMap", ("data", "binaryData")),
    "/api/v1/secrets": ("Secret", ("type", "data")),
    "/apis/apps/v1/daemonsets": ("DaemonSet", ("spec",)),
    "/apis/apps/v1/deployments": ("Deployment", ("spec",)),
}


async def objects_snapshot(kube: KubeClient) -> dict[str, dict[str, Any]]:
    """ "Kind namespace/name" -> what it is (data or spec), of every such object now."""
    found = {}
    for path, (kind, fields) in OBJECT_KINDS.items():
        for obj in (await kube.request("GET", path, what=f"list {kind}"))["items"]:
            meta = obj["metadata"]
            found[f"{kind} {meta.get('namespace')}/{meta['name']}"] = {
                f: obj.get(f) for f in fields
            }
    return found


def changed_objects(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The objects of ``before`` that are gone or differ in ``after``."""
    return sorted(k for k, v in before.items() if after.get(k) != v)


async def _settled(kube: KubeClient, seconds: float = 120) -> None:
    """Until every pod on the cluster runs (the real control plane's controllers and
    kubelets start the existing workloads after the lab is up)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pods = await kube.pods()
        if pods and all(p.get("status", {}).get("phase") in ("Running", "Succeeded") for p in pods):
            return
        await asyncio.sleep(1)


@pytest.mark.parametrize("control_plane", ["embedded", "real"])
async def test_whole_headless_run_leaves_every_existing_node_and_pod_untouched(
    tmp_path, control_plane
):
    """(a) `run --headless --yes --maintenance-window-open`, no cluster-wide approval."""
    if control_plane == "real":
        require_real()
    lab = Lab(tmp_path / "lab", control_plane=control_plane)
    await lab.start()
    try:
        site = load_site(lab.site_path)
        kube = KubeClient(str(lab.directory / "kubeconfig"))
        await _settled(kube)
        nodes_before, _ = await api_snapshot(kube)
        existing = set(nodes_before)
        assert NEW not in existing  # not joined yet
        _, pods_before = await api_snapshot(kube, existing)
        assert len(pods_before) >= 10  # operands, plugins and workloads on existing nodes
        objects_before = await objects_snapshot(kube)
        # The existing cluster's own: its RDMA plugin, its pull secrets, its workloads.
        assert {"ConfigMap kube-system/rdma-devices", "DaemonSet kube-system/rdma-shared-dp-ds",
                "Secret default/nexus-pull", "Secret kube-system/nexus-pull"} <= set(objects_before)  # fmt: skip
        # (Deployments on the real plane; the embedded lab seeds the workloads' pods only.)
        assert control_plane == "embedded" or "Deployment default/web" in objects_before
        frontend = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
        outcome = await run_engine(site, build_plan(), tmp_path / "state", frontend)
        assert outcome.exit_code == 0, (outcome.summary.stopped, frontend.out.getvalue()[-3000:])
        objects_after = await objects_snapshot(kube)
        nodes_after, pods_after = await api_snapshot(kube, existing)
        assert NEW in nodes_after  # joined
        assert {n: nodes_after[n] for n in existing} == nodes_before
        assert pods_after == pods_before  # none deleted, replaced or restarted
        # Every ConfigMap, Secret, DaemonSet and Deployment that existed is as it was.
        assert changed_objects(objects_before, objects_after) == []
        added = sorted(set(objects_after) - set(objects_before))
        report = checkpoint_report(tmp_path / "state", site, build_plan())
    finally:
        await lab.stop()
    assert report["cluster_changes"] == []
    text = markdown(report)
    assert "## Changes outside the new nodes" in text
    assert "None: nothing outside the new nodes was changed" in text
    # What the run made for the new node is listed by name, each one it made.
    listed = {a["object"] for a in report["added_for_new_nodes"]}
    wizard_made = {"ConfigMap kube-system/gnw-rdma-devices",
                   "DaemonSet kube-system/gnw-rdma-shared-dp-ds", "Secret gpu-operator/nexus-pull"}  # fmt: skip
    assert wizard_made <= set(added)
    assert listed == wizard_made
    assert "## Added for the new nodes" in text
    assert all(name in text for name in wizard_made)
    # The release's review said so, and nothing was asked beyond --yes.
    notes = [e.message for e in frontend.events if hasattr(e, "message")]
    assert any("gpu-operator.install: already in place" in m for m in notes)


# (b) on each control plane: the embedded lab's older release (a chart version change rolls
# every operand), and on the real plane, whose only chart is the pinned v26.7.0 (installed by
# the real helm), a release at that version whose values lack the wizard's dcgmExporter
# settings (the operator re-renders the exporter's DaemonSet, the real DaemonSet controller
# rolls it). Each with the operand whose pod on the existing GPU node is named.
OTHER_RELEASES = [
    pytest.param("embedded", "operator-preinstalled", "nvidia-driver-daemonset", id="embedded"),
    pytest.param("real", "operator-other-values", "nvidia-dcgm-exporter", id="real"),
]


async def _k8s_phases_run(site, state, allow: frozenset[str]):
    """The Kubernetes phases, headless with --yes and the window open, approving ``allow``
    by name: the run's outcome, or the decision it stopped at (the CLI prints it, exit 1)."""
    plan = build_plan()
    only = [s.id for p in plan.phases if p.id in K8S_PHASES for s in p.steps]
    frontend = HeadlessFrontEnd(
        yes=True, window_open=True, allow_cluster_change=allow, out=io.StringIO()
    )
    try:
        return await run_engine(site, plan, state, frontend, only=only)
    except DecisionRequired as exc:
        return exc


async def _older_release_run(tmp_path, allow: frozenset[str], control_plane: str, fault: str):
    if control_plane == "real":
        require_real()
    lab = Lab(tmp_path / "lab", faults=(fault,), control_plane=control_plane)
    await lab.start()
    try:
        site = load_site(lab.site_path)
        kube = KubeClient(str(lab.directory / "kubeconfig"))
        await _settled(kube)
        # The operands are the operator's, rendered after `helm --wait` returned: wait for
        # the existing GPU node's (each operand state's pod there) before measuring.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            names = [f"{p['metadata']['namespace']}/{p['metadata']['name']} on "
                     f"{p['spec'].get('nodeName')}" for p in await kube.pods()]  # fmt: skip
            if _on_other_gpu_node(names, "nvidia-dcgm-exporter"):
                break
            await asyncio.sleep(1)
        await _settled(kube)
        nodes_before, _ = await api_snapshot(kube)
        existing = set(nodes_before)
        _, before = await api_snapshot(kube, existing)
        outcome = await _k8s_phases_run(site, tmp_path / "state", allow)
        nodes_after, after = await api_snapshot(kube, existing)
        report = checkpoint_report(tmp_path / "state", site, build_plan())
    finally:
        await lab.stop()
    return outcome, before, after, existing, nodes_before, nodes_after, report


def _on_other_gpu_node(names, operand: str) -> list[str]:
    return [n for n in names
            if n.startswith(f"gpu-operator/{operand}-") and n.endswith(f" on {OTHER_GPU_NODE[0]}")]  # fmt: skip


@pytest.mark.parametrize(("control_plane", "fault", "operand"), OTHER_RELEASES)
async def test_older_release_stops_at_the_named_upgrade_without_its_flag(
    tmp_path, control_plane, fault, operand
):
    """(b) --yes alone: exit 1 at gpu-operator.install, naming the flag and the pods."""
    outcome, before, after, existing, nodes_before, nodes_after, report = await _older_release_run(
        tmp_path, frozenset(), control_plane, fault
    )
    assert isinstance(outcome, DecisionRequired) and outcome.exit_code == 1
    stopped = str(outcome)
    assert outcome.decision.kind is DecisionKind.CLUSTER_CHANGE
    assert "gpu-operator.install" in stopped
    assert "--allow-cluster-change gpu-operator-upgrade" in stopped
    [pod] = _on_other_gpu_node((name for name, _, _ in before.values()), operand)
    assert pod in stopped
    assert after == before  # nothing restarted on an existing node
    assert {n: nodes_after[n] for n in existing} == nodes_before
    assert (report or {}).get("cluster_changes", []) == []


@pytest.mark.parametrize(("control_plane", "fault", "operand"), OTHER_RELEASES)
async def test_older_release_upgrades_with_its_flag_and_reports_the_restarts(
    tmp_path, control_plane, fault, operand
):
    """(b) with --allow-cluster-change gpu-operator-upgrade: the upgrade runs, and the report
    names exactly the pods on existing nodes that it replaced (measured here by uid)."""
    allow = frozenset({ClusterChange.GPU_OPERATOR_UPGRADE.value})
    outcome, before, after, existing, nodes_before, nodes_after, report = await _older_release_run(
        tmp_path, allow, control_plane, fault
    )
    assert not isinstance(outcome, DecisionRequired), str(outcome)
    assert outcome.exit_code == 0, [
        (f.check, f.message) for _, _, f in outcome.findings if f.severity.value == "fail"
    ]
    replaced = sorted(
        name for uid, (name, restarts, _) in before.items()
        if uid not in after or after[uid][1] > restarts
    )  # fmt: skip
    assert _on_other_gpu_node(replaced, operand)
    # The site's own workloads and plugin are not the operator's: untouched.
    assert not [n for n in replaced if "/web-" in n or "llm-train" in n or "rdma-shared" in n]
    [change] = report["cluster_changes"]
    assert change["change"] == "gpu-operator-upgrade"
    assert change["applied"] is True
    assert change["restarted"] == replaced  # measured, exactly
    assert change["predicted"] == replaced  # and the review said so beforehand
    assert "--allow-cluster-change gpu-operator-upgrade" in change["by"]
    assert change["at"]
    text = markdown(report)
    assert all(name in text for name in replaced)
    assert "| gpu-operator-upgrade | gpu-operator.install |" in text
    # Nodes: only the operator's own labels may differ; taints, schedulability and the
    # allocatable resources of every existing node are as they were.
    for name in existing:
        for key in ("taints", "unschedulable", "allocatable"):
            assert nodes_after[name][key] == nodes_before[name][key], (name, key)


async def test_a_first_install_is_a_change_outside_the_new_nodes_too(tmp_path):
    """Greenfield: the first release puts the NFD worker on every node and labels them all;
    --yes does not install it, its name does."""
    from tests.conftest import run_in_lab

    frontend = HeadlessFrontEnd(yes=True, out=io.StringIO())
    with pytest.raises(DecisionRequired) as stopped:
        await run_in_lab(tmp_path, frontend, "greenfield", phases=("gpu-operator",))
    assert stopped.value.decision.confirm_text == "gpu-operator-install"
    assert "--allow-cluster-change gpu-operator-install" in str(stopped.value)
    assert "the NFD worker on every node" in str(stopped.value)


async def _pull_secret_run(tmp_path, control_plane: str, allow: frozenset[str]):
    """The lab whose default/nexus-pull holds another registry's entry only: the K8s phases
    headless with --yes (and ``allow``); the outcome, the secret before and after, the
    objects before and after and the report."""
    if control_plane == "real":
        require_real()
    lab = Lab(tmp_path / "lab", faults=("pull-secret-other-data",), control_plane=control_plane)
    await lab.start()
    try:
        site = load_site(lab.site_path)
        kube = KubeClient(str(lab.directory / "kubeconfig"))
        await _settled(kube)
        path = "/api/v1/namespaces/default/secrets/nexus-pull"
        secret_before = await kube.request("GET", path, what="get secret")
        objects_before = await objects_snapshot(kube)
        outcome = await _k8s_phases_run(site, tmp_path / "state", allow)
        secret_after = await kube.request("GET", path, what="get secret")
        objects_after = await objects_snapshot(kube)
        report = checkpoint_report(tmp_path / "state", site, build_plan())
    finally:
        await lab.stop()
    return outcome, (secret_before, secret_after), (objects_before, objects_after), report


def _registries(secret) -> set[str]:
    import base64
    import json

    return set(json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))["auths"])


@pytest.mark.parametrize("control_plane", ["embedded", "real"])
async def test_an_existing_pull_secret_with_other_data_is_changed_only_by_name(
    tmp_path, control_plane
):
    """default/nexus-pull exists with another registry's entry: adding the mirror's entry is
    an update of an object that existed, so --yes stops at pull-secret-update naming the
    flag, and nothing that existed changed."""
    outcome, (before, after), (objects_before, objects_after), report = await _pull_secret_run(
        tmp_path, control_plane, frozenset()
    )
    assert isinstance(outcome, DecisionRequired) and outcome.exit_code == 1
    assert outcome.decision.confirm_text == "pull-secret-update"
    stopped = str(outcome)
    assert "--allow-cluster-change pull-secret-update" in stopped
    assert "default/nexus-pull" in stopped and "registry.corp.internal" in stopped
    assert after["data"] == before["data"]
    assert changed_objects(objects_before, objects_after) == []
    assert (report or {}).get("cluster_changes", []) == []


@pytest.mark.parametrize("control_plane", ["embedded", "real"])
async def test_with_its_flag_the_pull_secret_gets_the_mirror_beside_its_own_entry(
    tmp_path, control_plane
):
    """With --allow-cluster-change pull-secret-update: the mirror's entry is merged in (the
    other registry's kept), the report names the change, who and when; nothing else that
    existed changed."""
    outcome, (before, after), (objects_before, objects_after), report = await _pull_secret_run(
        tmp_path, control_plane, frozenset({"pull-secret-update"})
    )
    assert not isinstance(outcome, DecisionRequired), str(outcome)
    assert _registries(before) == {"registry.corp.internal"}
    assert _registries(after) == {"registry.corp.internal", "nexus.lab.internal:8443"}
    assert changed_objects(objects_before, objects_after) == ["Secret default/nexus-pull"]
    [change] = [c for c in report["cluster_changes"] if c["change"] == "pull-secret-update"]
    assert change["step"] == "registry.pull-secrets" and change["applied"] is True
    assert "--allow-cluster-change pull-secret-update" in change["by"] and change["at"]
    assert change["restarted"] == []
    text = markdown(report)
    assert "| pull-secret-update | registry.pull-secrets |" in text
