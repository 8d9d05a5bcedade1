"""The GPU Operator release on a cluster that may already run it: read the state first,
change nothing when it is healthy at the pinned version, otherwise show the merged values
and the blast radius and wait for a confirmation; and find any other NFD."""

from __future__ import annotations

import io

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from frontend.headless import HeadlessFrontEnd
from frontend.runner import run_engine
from simulator.lab import Lab
from steps import build_plan
from steps.gpu_operator.install import tolerates
from steps.gpu_operator.release import (
    ReleaseState,
    blast_radius,
    changed_keys,
    chart_version,
    covers,
    gpu_node_names,
    is_nfd_worker,
    merge_values,
)
from tests.conftest import K8S_PHASES, MINIMAL_SITE, findings_of, run_in_lab
from wizard.events import Answer, DecisionKind, Reply
from wizard.model import Severity
from wizard.site import load_site, parse_site

PREINSTALLED = "gpu-operator/gpu-operator-1764547200"
STEP = "gpu-operator.install"


class Reviewer(HeadlessFrontEnd):
    """Headless with --yes, except that the GPU Operator review is recorded and answered;
    the release's change outside the new nodes is approved by name (as
    --allow-cluster-change gpu-operator-upgrade does) so that the review decides."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(yes=True, out=io.StringIO(), allow_cluster_change={"gpu-operator-upgrade"})
        self.answer = answer
        self.reviews = []

    async def decide(self, decision):
        if decision.kind is DecisionKind.CONFIRM_APPLY and decision.step == STEP:
            self.reviews.append(decision)
            return Reply(self.answer)
        return await super().decide(decision)


# -- pure parts ---------------------------------------------------------------------------------


def test_merge_keeps_every_user_value_and_unions_lists():
    live = {
        "driver": {"version": "580.126.20", "upgradePolicy": {"autoUpgrade": False}},
        "devicePlugin": {"config": {"name": "time-slicing"}},
        "daemonsets": {"tolerations": [{"key": "site/gpu", "operator": "Exists"}]},
        "toolkit": {"env": [{"name": "CONTAINERD_CONFIG", "value": "/old"}, {"name": "X", "value": "1"}]},
    }  # fmt: skip
    wanted = {
        "driver": {"version": "595.91.07", "kernelModuleType": "open"},
        "daemonsets": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]},
        "toolkit": {"env": [{"name": "CONTAINERD_CONFIG", "value": "/etc/k/config.toml"}]},
    }
    merged = merge_values(live, wanted)
    assert merged["devicePlugin"] == {"config": {"name": "time-slicing"}}  # user value kept
    assert merged["driver"] == {
        "version": "595.91.07",
        "kernelModuleType": "open",
        "upgradePolicy": {"autoUpgrade": False},
    }
    assert merged["daemonsets"]["tolerations"] == [
        {"key": "site/gpu", "operator": "Exists"},
        {"key": "nvidia.com/gpu", "operator": "Exists"},
    ]
    assert merged["toolkit"]["env"] == [
        {"name": "X", "value": "1"},
        {"name": "CONTAINERD_CONFIG", "value": "/etc/k/config.toml"},
    ]
    assert live["driver"]["version"] == "580.126.20"  # the live values are not mutated
    assert covers(merged, wanted) and not covers(live, wanted)


def test_chart_version_of_a_helm_list_entry():
    assert chart_version({"chart": "gpu-operator-v26.7.0"}) == "v26.7.0"
    assert chart_version({"chart": "gpu-operator-v26.3.3-rc.1"}) == "v26.3.3-rc.1"
    assert chart_version({"chart": "network-operator-26.4.1"}) is None
    assert chart_version({"chart": "gpu-operator-extras-1.0.0"}) is None
    assert chart_version({}) is None


def test_tolerations_follow_the_kubernetes_rule():
    taint = {"key": "accelerator", "value": "nvidia-b300", "effect": "NoSchedule"}
    assert tolerates([{"key": "accelerator", "operator": "Exists"}], taint)
    assert tolerates([{"operator": "Exists"}], taint)  # empty key + Exists: every taint
    assert tolerates(
        [{"key": "accelerator", "value": "nvidia-b300", "effect": "NoSchedule"}], taint
    )
    assert not tolerates([{"key": "accelerator", "value": "other"}], taint)
    assert not tolerates(
        [{"key": "accelerator", "operator": "Exists", "effect": "NoExecute"}], taint
    )
    assert not tolerates([{"key": "nvidia.com/gpu", "operator": "Exists"}], taint)
    assert not tolerates(None, taint)
    assert not tolerates([{"key": "accelerator", "operator": "Gt", "value": "nvidia-b300"}], taint)


def test_blast_radius_names_every_gpu_node_when_the_driver_may_restart():
    site = parse_site(MINIMAL_SITE)
    nodes = [
        {"metadata": {"name": "gpu-1", "labels": {}}},
        {"metadata": {"name": "gpu-h100-01", "labels": {"nvidia.com/gpu.present": "true"}}},
        {"metadata": {"name": "gpu-a100-07", "labels": {}}, "status": {"allocatable": {"nvidia.com/gpu": "4"}}},
        {"metadata": {"name": "cpu-1", "labels": {}}, "status": {"allocatable": {"nvidia.com/gpu": "0"}}},
    ]  # fmt: skip
    state = ReleaseState(
        name="gpu-operator-1", namespace="gpu-operator", installed=True, chart_version="v26.3.3", status="deployed",
        user_values={"driver": {"version": "580.126.20"}}, gpu_nodes=gpu_node_names(nodes, site),
    )  # fmt: skip
    assert state.gpu_nodes == ["gpu-1", "gpu-a100-07", "gpu-h100-01"]
    text = blast_radius(state, site, {"driver": {"version": "595.91.07"}})
    assert "from chart v26.3.3 to v26.7.0" in text and "changes driver.version" in text
    assert "EVERY GPU node" in text and "gpu-a100-07, gpu-h100-01" in text
    # Same version, an operand value that is not the driver's: that operand's pods restart
    # on every GPU node (its DaemonSet template changes), the driver does not roll.
    state.chart_version = "v26.7.0"
    for key, operand in (("dcgmExporter", "nvidia-dcgm-exporter"),
                         ("devicePlugin", "nvidia-device-plugin-daemonset"),
                         ("gfd", "gpu-feature-discovery")):  # fmt: skip
        text = blast_radius(state, site, {"driver": {"version": "580.126.20"}, key: {"x": 1}})
        assert f"restarts {operand} pods on EVERY GPU node" in text, text
        assert "gpu-a100-07, gpu-h100-01" in text and "autoUpgrade" not in text
    # A key of no known operand counts as all of them.
    text = blast_radius(
        state, site, {"driver": {"version": "580.126.20"}, "sandboxWorkloads": {"x": 1}}
    )
    assert "restarts every operand pods on EVERY GPU node" in text
    # The live pods it restarts on existing nodes are named; the new node's are not.
    state.pods = [
        {"metadata": {"name": n, "ownerReferences": [{"kind": "DaemonSet"}]}, "spec": {"nodeName": node}}
        for n, node in (("nvidia-dcgm-exporter-x1", "gpu-h100-01"), ("nvidia-dcgm-x2", "gpu-h100-01"),
                        ("nvidia-dcgm-exporter-x3", "gpu-1"))
    ]  # fmt: skip
    text = blast_radius(
        state, site, {"driver": {"version": "580.126.20"}, "dcgmExporter": {"x": 1}}
    )
    assert "(live): nvidia-dcgm-exporter-x1 on gpu-h100-01." in text
    # Nothing changed: no restart claimed.
    calm = blast_radius(state, site, {"driver": {"version": "580.126.20"}})
    assert "EVERY" not in calm and "no operand change" in calm


def test_nfd_workers_are_found_under_any_name():
    def ds(name, **container):
        return {"metadata": {"name": name, "namespace": "x"},
                "spec": {"template": {"spec": {"containers": [container]}}}}  # fmt: skip

    assert is_nfd_worker(ds("nfd-worker", image="x"))
    assert is_nfd_worker(ds("labeller", image="registry.k8s.io/nfd/node-feature-discovery:v0.17.3"))
    assert is_nfd_worker(ds("labeller", image="mirror/nfd:1", command=["nfd-worker"]))
    assert not is_nfd_worker(ds("cilium", image="quay.io/cilium/cilium:v1.17.6"))


# -- against the lab ----------------------------------------------------------------------------


async def test_an_installed_older_operator_is_not_upgraded_unless_confirmed(tmp_path):
    frontend = Reviewer(Answer.SKIP)
    outcome, lab = await run_in_lab(tmp_path, frontend, "operator-preinstalled", phases=K8S_PHASES)
    assert [d.step for d in frontend.reviews] == [STEP]
    release = lab.releases[PREINSTALLED]
    assert (release["version"], release["revision"]) == ("v26.3.3", 1)  # untouched
    assert list(lab.releases) == [PREINSTALLED]  # and no second operator installed beside it
    review = frontend.reviews[0]
    assert (
        "upgrades gpu-operator/gpu-operator-1764547200 from chart v26.3.3 to v26.7.0"
        in review.summary
    )
    assert "EVERY GPU node" in review.summary and "gpu-h100-01" in review.summary
    # Which live pods on which existing node the upgrade replaces, read from the cluster.
    assert "Pods restarted on existing nodes (live):" in review.summary
    assert "nvidia-driver-daemonset-00001 on gpu-h100-01" in review.summary
    assert "-00000 on gpu-b300-01" not in review.summary  # the new node is not "existing"
    diff = next(d for d in review.diffs if d.path == "cluster/helm/gpu-operator-values.yaml")
    added = {line[1:].strip() for line in diff.diff.splitlines() if line.startswith("+")}
    removed = {line[1:].strip() for line in diff.diff.splitlines() if line.startswith("-")}
    assert "enabled: false" in added  # what the wizard needs (driver.rdma) ...
    assert not [line for line in added if "kernelModuleType" in line]  # the chart's auto
    # ... merged into the user's values, none of which is removed (their driver pin included):
    assert not [line for line in removed if "580.126.20" in line]
    assert not [line for line in removed if "time-slicing" in line or "site-gpu-critical" in line]
    assert "name: time-slicing" in diff.diff and "priorityClassName: site-gpu-critical" in diff.diff
    # The blast radius is in the diff too (a front end may show only the diffs in full).
    assert "+# upgrades gpu-operator/gpu-operator-1764547200" in diff.diff
    assert "gpu-h100-01" in diff.diff
    assert outcome.summary.results[(STEP, "cluster")].value == "skipped"


async def test_a_confirmed_upgrade_keeps_the_user_values_on_the_live_release(tmp_path):
    frontend = Reviewer(Answer.PROCEED)
    outcome, lab = await run_in_lab(tmp_path, frontend, "operator-preinstalled", phases=K8S_PHASES)
    assert list(lab.releases) == [PREINSTALLED]
    release = lab.releases[PREINSTALLED]
    assert (release["version"], release["revision"]) == ("v26.7.0", 2)
    values = release["values"]
    assert values["devicePlugin"]["config"] == {"name": "time-slicing", "default": "any"}
    assert values["daemonsets"]["priorityClassName"] == "site-gpu-critical"
    # The user's driver pin stays (it runs on every GPU node); no kernelModuleType forced.
    assert "kernelModuleType" not in values["driver"]
    assert values["driver"]["version"] == "580.126.20"
    checks = findings_of(outcome, STEP)
    assert checks["T01.release"].severity is Severity.PASS
    assert "user value(s) of its own, kept" in checks["T01.release"].message
    # Its bundled NFD is the one NFD, not "another".
    assert (
        findings_of(outcome, "gpu-operator.preflight")["T01.single-nfd"].severity is Severity.PASS
    )


async def test_a_healthy_release_at_the_pinned_version_is_left_alone(tmp_path):
    lab = Lab(tmp_path / "lab")
    await lab.start()
    try:
        plan = build_plan()
        only = [s.id for p in plan.phases if p.id in K8S_PHASES for s in p.steps]
        first = await run_engine(
            load_site(lab.site_path), plan, tmp_path / "s1", Reviewer(Answer.PROCEED), only=only
        )
        assert lab.releases["gpu-operator/gpu-operator"]["revision"] == 1, first.exit_code
        # A second wizard run (another node, another day) on the same cluster:
        frontend = Reviewer(Answer.PROCEED)
        second = await run_engine(
            load_site(lab.site_path), plan, tmp_path / "s2", frontend, only=only
        )
    finally:
        await lab.stop()
    assert frontend.reviews == []  # nothing to confirm: no change
    assert lab.releases["gpu-operator/gpu-operator"]["revision"] == 1  # no helm upgrade ran
    notices = [getattr(e, "message", "") for e in frontend.events]
    assert f"{STEP}: already in place, nothing to change" in notices
    assert findings_of(second, STEP)["T01.release"].severity is Severity.PASS


async def test_a_tainted_node_the_running_operator_does_not_tolerate_is_named(tmp_path):
    def taint_and_pin(lab: Lab) -> None:
        text = lab.site_path.read_text()
        lab.site_path.write_text(text + yaml.safe_dump({"taint": {"enabled": True}}))
        release = lab.releases[PREINSTALLED]
        release["version"] = "v26.7.0"

    frontend = Reviewer(Answer.SKIP)
    await run_in_lab(
        tmp_path, frontend, "operator-preinstalled", phases=K8S_PHASES, prepare=taint_and_pin
    )
    review = frontend.reviews[0]
    assert "from chart" not in review.summary  # the pinned version already runs
    assert "EVERY GPU node" in review.summary  # operands roll when their tolerations change
    diff = next(d for d in review.diffs if d.path == "cluster/helm/gpu-operator-values.yaml")
    added = [line[1:].strip() for line in diff.diff.splitlines() if line.startswith("+")]
    assert added.count("key: accelerator") == 2  # operands and the NFD worker


async def test_another_nfd_under_another_name_fails_the_preflight(tmp_path):
    def add_nfd(lab: Lab) -> None:
        lab.cluster.put("apps/v1", "daemonsets", {"metadata": {"name": "labeller", "namespace": "kube-system"},
            "spec": {"template": {"spec": {"containers": [{"name": "w", "image": "x", "command": ["nfd-worker"]}]}}}})  # fmt: skip

    outcome, lab = await run_in_lab(
        tmp_path, HeadlessFrontEnd(yes=True, out=io.StringIO()), "greenfield", prepare=add_nfd,
        phases=K8S_PHASES,
    )  # fmt: skip
    nfd = findings_of(outcome, "gpu-operator.preflight")["T01.single-nfd"]
    assert nfd.severity is Severity.FAIL and "kube-system/labeller" in nfd.message
    assert not lab.releases


async def test_leftover_nfd_crds_are_a_warning(tmp_path):
    def add_crd(lab: Lab) -> None:
        lab.cluster.put("apiextensions.k8s.io/v1", "customresourcedefinitions",
                        {"metadata": {"name": "nodefeaturerules.nfd.k8s-sigs.io"}})  # fmt: skip

    outcome, _ = await run_in_lab(
        tmp_path,
        HeadlessFrontEnd(
            yes=True, out=io.StringIO(), allow_cluster_change={"gpu-operator-install"}
        ),
        "greenfield",  # no release owns the CRDs
        prepare=add_crd,
        phases=("gpu-operator",),
    )
    nfd = findings_of(outcome, "gpu-operator.preflight")["T01.single-nfd"]
    assert nfd.severity is Severity.WARN and "nodefeaturerules.nfd.k8s-sigs.io" in nfd.message


async def test_a_confirmed_toleration_change_covers_the_tainted_node(tmp_path):
    def taint(lab: Lab) -> None:
        lab.site_path.write_text(lab.site_path.read_text() + "taint: {enabled: true}\n")

    outcome, lab = await run_in_lab(
        tmp_path,
        Reviewer(Answer.PROCEED),
        "operator-preinstalled",
        phases=K8S_PHASES,
        prepare=taint,
    )
    covered = findings_of(outcome, STEP)["T01.covers-node"]
    assert covered.severity is Severity.PASS, covered.message
    policy = lab.cluster.get("nvidia.com/v1", "clusterpolicies", "", "cluster-policy")
    assert {"key": "accelerator", "operator": "Equal", "value": "nvidia-b300",
            "effect": "NoSchedule"} in policy["spec"]["daemonsets"]["tolerations"]  # fmt: skip


def test_coverage_names_what_does_not_tolerate_the_taint():
    from types import SimpleNamespace

    from steps.gpu_operator.install import InstallGpuOperator
    from wizard.probe import Report

    site = parse_site(MINIMAL_SITE + "taint: {enabled: true}\n")
    worker = {"metadata": {"name": "gpu-operator-node-feature-discovery-worker", "namespace": "gpu-operator"},
              "spec": {"template": {"spec": {"tolerations": [{"key": "accelerator", "operator": "Exists"}]}}}}  # fmt: skip
    state = ReleaseState(
        "gpu-operator",
        "gpu-operator",
        installed=True,
        cluster_policies=[{"metadata": {"name": "cluster-policy"},
                           "spec": {"daemonsets": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}}],
        nfd_workers=[worker],
    )  # fmt: skip
    report = Report("T01")
    InstallGpuOperator()._coverage(SimpleNamespace(site=site), state, report)
    (finding,) = report.findings
    assert finding.severity is Severity.FAIL
    assert "ClusterPolicy cluster-policy operands" in finding.message
    assert "NFD worker" not in finding.message  # that one tolerates it


async def test_with_the_driver_crd_the_nvidiadriver_is_applied_and_covers_the_node(tmp_path):
    def crd_and_taint(lab: Lab) -> None:
        text = lab.site_path.read_text()
        lab.site_path.write_text(
            text + "taint: {enabled: true}\nversions: {nvidia_driver_crd: true}\n"
        )

    frontend = Reviewer(Answer.PROCEED)
    outcome, lab = await run_in_lab(tmp_path, frontend, phases=K8S_PHASES, prepare=crd_and_taint)
    paths = [d.path for d in frontend.reviews[0].diffs]
    assert paths == ["cluster/helm/gpu-operator-values.yaml", "cluster/k8s/nvidiadriver.yaml"]
    drivers = {
        d["metadata"]["name"]: d
        for d in lab.cluster.list("nvidia.com/v1alpha1", "nvidiadrivers", None)
    }
    assert drivers.pop("default")["spec"]["default"] is True  # the rest of the GPU nodes
    (driver,) = drivers.values()
    assert driver["spec"]["kernelModuleType"] == "auto"
    assert driver["spec"]["nodeSelector"] == {"accelerator": "nvidia-b300"}
    checks = findings_of(outcome, STEP)
    assert checks["T01.covers-node"].severity is Severity.PASS, checks["T01.covers-node"].message
    policy = lab.cluster.get("nvidia.com/v1", "clusterpolicies", "", "cluster-policy")
    assert "kernelModuleType" not in policy["spec"]["driver"]  # the CR carries it


async def test_a_second_operator_release_refuses_the_install(tmp_path):
    def second(lab: Lab) -> None:
        lab.releases["ml/gpu-operator"] = {"name": "gpu-operator", "namespace": "ml",
            "chart": "nvidia/gpu-operator", "version": "v26.7.0", "values": {}, "revision": 1,
            "status": "deployed"}  # fmt: skip

    outcome, lab = await run_in_lab(
        tmp_path,
        Reviewer(Answer.PROCEED),
        "operator-preinstalled",
        phases=K8S_PHASES,
        prepare=second,
    )
    refusal = findings_of(outcome, STEP)["T01.release"]
    assert refusal.severity is Severity.FAIL
    assert "ml/gpu-operator" in refusal.message and PREINSTALLED in refusal.message
    assert lab.releases[PREINSTALLED]["revision"] == 1  # nothing was upgraded


async def test_an_operator_installed_without_helm_is_not_installed_again(tmp_path):
    def olm(lab: Lab) -> None:
        lab.cluster.put(
            "nvidia.com/v1",
            "clusterpolicies",
            {"metadata": {"name": "gpu-cluster-policy"}, "spec": {}},
        )

    frontend = Reviewer(Answer.PROCEED)
    outcome, lab = await run_in_lab(
        tmp_path, frontend, "greenfield", phases=K8S_PHASES, prepare=olm
    )
    refusal = findings_of(outcome, STEP)["T01.release"]
    assert refusal.severity is Severity.FAIL and "gpu-cluster-policy" in refusal.message
    assert frontend.reviews == [] and not lab.releases


_KEYS = st.sampled_from(["driver", "version", "env", "tolerations", "a", "b", "c"])
_LEAVES = st.one_of(st.integers(0, 3), st.sampled_from(["x", "y"]), st.booleans())
_VALUES = st.recursive(
    _LEAVES, lambda inner: st.dictionaries(_KEYS, inner, max_size=4), max_leaves=12
).filter(lambda v: isinstance(v, dict))


def _leaves(data, prefix=()):
    """(path, value) of every leaf; an empty mapping sets nothing (as in Helm's coalescing)."""
    for key, value in data.items():
        if isinstance(value, dict):
            yield from _leaves(value, (*prefix, key))
        else:
            yield (*prefix, key), value


@settings(max_examples=200, deadline=None)
@given(live=_VALUES, wanted=_VALUES)
def test_a_merge_never_drops_a_user_value_the_wizard_does_not_set(live, wanted):
    merged = merge_values(live, wanted)

    def paths(data, prefix=()):
        for key, value in data.items():
            yield (*prefix, key)
            if isinstance(value, dict):
                yield from paths(value, (*prefix, key))

    wanted_paths = set(paths(wanted))

    def get(data, path):
        for part in path:
            data = data[part]
        return data

    for path, value in _leaves(wanted):
        assert get(merged, path) == value  # everything the wizard needs is there
    for path, value in _leaves(live):
        # A user value stays unless the wizard sets that very key, one below it, or one
        # above it to something that is not a mapping (a mapping above merges).
        below = any(w[: len(path)] == path for w in wanted_paths)
        above = any(
            path[: len(w)] == w and not isinstance(get(wanted, w), dict) for w in wanted_paths
        )
        touched = below or above
        if not touched:
            assert get(merged, path) == value
    assert covers(merged, wanted)


def test_a_key_the_release_lacks_but_the_wizard_sets_to_the_chart_default_is_covered():
    """Review N9: a live release at the pinned version without `nfd.enabled` or `cdi.enabled`
    has the chart's own default (true) for them; the wizard setting that very value is no
    change, so covers() must not ask for an upgrade that changes nothing (one rule with
    changed_keys)."""
    live = {"devicePlugin": {"config": {"name": "time-slicing"}}}
    wanted = {"nfd": {"enabled": True}, "cdi": {"enabled": True}}
    assert changed_keys(live, merge_values(live, wanted)) == []
    assert covers(live, wanted)
    assert not covers(live, {"cdi": {"enabled": False}})
