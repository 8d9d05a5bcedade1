"""Kubernetes phases: values that the pinned chart accepts, manifests valid for 1.33, and
the join / GPU Operator / RDMA plugin flow against the lab, including its failure paths."""

from __future__ import annotations

import io
import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from frontend.headless import HeadlessFrontEnd
from frontend.runner import Outcome
from simulator.lab import Lab
from steps import build_plan
from steps.gpu_operator import (
    IMAGES_V26_7_0,
    build_values,
    gpu_test_pod,
    image_list,
)
from steps.rdma_plugin import configmap, daemonset, plugin_config, rdma_test_pod
from tests.conftest import K8S_PHASES, MINIMAL_SITE, REFS, leaf_paths, run_in_lab
from wizard.export import export
from wizard.model import Severity
from wizard.site import load_site, parse_site

MIRRORED = MINIMAL_SITE + (
    "registry: {mirror: nexus.lab:8443/mirror, pull_secret: nexus-pull}\n"
    "cluster: {containerd_config: /etc/containerd/custom.toml, containerd_socket: /run/k/containerd.sock}\n"
    "versions: {nvidia_driver_crd: true}\ntaint: {enabled: true}\n"
)


def ref(name: str):
    path = REFS / name
    if not path.exists():
        pytest.skip(f"{path} not available")
    return yaml.safe_load(path.read_text())


# Keys the chart's templates read that its values.yaml does not list (tests/
# test_gpu_operator_chart.py renders the whole chart with them; this pins that the template
# really reads each one).
TEMPLATE_ONLY_KEYS = {"dcgmExporter.imagePullSecrets"}


def test_template_only_keys_are_read_by_the_chart_templates():
    template = REFS / "charts/gpu-operator-v26.7.0/templates/clusterpolicy.yaml"
    if not template.exists():
        pytest.skip(f"{template} not available")
    for key in TEMPLATE_ONLY_KEYS:
        assert f"{{{{- if .Values.{key} }}}}" in template.read_text(), key


@pytest.mark.parametrize("site_text", [MINIMAL_SITE, MIRRORED])
@pytest.mark.parametrize("prometheus", [False, True])
def test_every_values_key_exists_in_the_pinned_chart(site_text, prometheus):
    chart = ref("gpu-operator-values-v26.7.0.yaml")
    nfd_chart = ref("gpu-operator-v26.7.0-nfd-subchart-values.yaml")
    values = build_values(parse_site(site_text), prometheus_crds=prometheus)
    for path in leaf_paths(values):
        if path in TEMPLATE_ONLY_KEYS:
            continue
        if path.startswith("node-feature-discovery."):
            node, parts = nfd_chart, path.split(".")[1:]
        else:
            node, parts = chart, path.split(".")
        for part in parts:
            assert isinstance(node, dict) and part in node, f"{path} is not a key of the chart"
            node = node[part]
    # Left to the chart (auto, 595.91.07): the ClusterPolicy's driver runs on every GPU node.
    assert "kernelModuleType" not in values["driver"] and "version" not in values["driver"]
    assert values["driver"]["rdma"]["enabled"] is False
    assert values["nfd"]["enabled"] is True
    assert values["dcgmExporter"]["serviceMonitor"]["enabled"] is prometheus


def test_mirror_secrets_containerd_paths_and_driver_crd():
    values = build_values(parse_site(MIRRORED), prometheus_crds=False)
    assert values["toolkit"]["repository"] == "nexus.lab:8443/mirror/nvidia/k8s"
    assert values["driver"]["manager"]["repository"] == "nexus.lab:8443/mirror/nvidia/cloud-native"
    assert values["operator"]["imagePullSecrets"] == ["nexus-pull"]
    assert (
        values["node-feature-discovery"]["image"]["repository"]
        == "nexus.lab:8443/mirror/nfd/node-feature-discovery"
    )
    assert values["node-feature-discovery"]["imagePullSecrets"] == [{"name": "nexus-pull"}]
    assert values["toolkit"]["env"] == [
        {"name": "CONTAINERD_CONFIG", "value": "/etc/containerd/custom.toml"},
        {"name": "CONTAINERD_SOCKET", "value": "/run/k/containerd.sock"},
    ]
    # The chart's default NVIDIADriver keeps managing every other GPU node.
    assert values["driver"]["nvidiaDriverCRD"] == {"enabled": True, "deployDefaultCR": True}


def test_image_table_matches_the_chart():
    chart = ref("gpu-operator-values-v26.7.0.yaml")
    nfd_chart = ref("gpu-operator-v26.7.0-nfd-subchart-values.yaml")
    for image in IMAGES_V26_7_0:
        if not image.values_key:
            assert f"{image.repository}/{image.image}" == nfd_chart["image"]["repository"]
            continue
        node = chart
        for part in image.values_key.split("."):
            node = node[part]
        assert node["repository"] == image.repository, image
        assert node["image"] == image.image, image
        expected = node.get("version") or "{app}"
        assert image.tag.replace("-{os}", "") == expected, image
    images = image_list(parse_site(MINIMAL_SITE))
    assert "nvcr.io/nvidia/gpu-operator:v26.7.0" in images
    assert "nvcr.io/nvidia/driver:595.91.07-rhel10.2" in images
    assert "registry.k8s.io/nfd/node-feature-discovery:v0.19.0" in images


def test_plugin_config_selects_intel_by_driver_and_discovered_netdevs():
    site = parse_site(MINIMAL_SITE)
    config = plugin_config(site, ["ens5f0np0"])
    entry = config["configList"][0]
    assert entry["resourceName"] == "e810" and entry["resourcePrefix"] == "rdma"
    assert entry["selectors"] == {"vendors": ["8086"], "drivers": ["ice"], "ifNames": ["ens5f0np0"]}
    assert "ifNames" not in plugin_config(site, [])["configList"][0]["selectors"]  # never guessed
    sample = ref("k8s-rdma-shared-dev-plugin-configmap.yaml")
    sample_config = json.loads(sample["data"]["config.json"])
    assert set(entry) - {"resourcePrefix"} <= {k for e in sample_config["configList"] for k in e}


@pytest.mark.parametrize("site_text", [MINIMAL_SITE, MIRRORED])
def test_manifests_validate_against_kubernetes_1_33(site_text):
    site = parse_site(site_text)
    node = site.nodes[0]
    for manifest in (configmap(site, ["ens5f0np0"]), daemonset(site), rdma_test_pod(site, node),
                     gpu_test_pod(site, node, "gpu-operator")):  # fmt: skip
        kubernetes_validate.validate(manifest, "1.33.0", strict=True)


def test_exported_manifests_validate_and_everything_is_there(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text(MIRRORED)
    out = tmp_path / "out"
    export(load_site(path), build_plan(), out)
    for name in ("cluster/helm/gpu-operator-values.yaml", "cluster/k8s/nvidiadriver.yaml",
                 "cluster/k8s/rdma-devices-configmap.yaml", "cluster/k8s/rdma-plugin-daemonset.yaml",
                 "nodes/gpu-1/k8s/gpu-test-pod.yaml", "nodes/gpu-1/k8s/rdma-test-pod.yaml",
                 "nodes/gpu-1/k8s/node-metadata.yaml", "cluster/kubespray/hosts-fragment.yaml",
                 "cluster/mirror/images.txt", "cluster/mirror/copy-images.sh"):  # fmt: skip
        assert (out / name).exists(), name
    for manifest in out.rglob("*.yaml"):
        doc = yaml.safe_load(manifest.read_text())
        if isinstance(doc, dict) and doc.get("apiVersion") in ("v1", "apps/v1"):
            kubernetes_validate.validate(doc, "1.33.0", strict=True)
    script = (out / "cluster/mirror/copy-images.sh").read_text()
    assert "skopeo copy" in script and "nexus.lab:8443/mirror/nvidia/gpu-operator:v26.7.0" in script


def test_connectx_profile_renders_a_nicclusterpolicy_instead(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text(MINIMAL_SITE + "nic: {profile: connectx}\n")
    out = tmp_path / "out"
    export(load_site(path), build_plan(), out)
    policy = yaml.safe_load((out / "cluster/k8s/nicclusterpolicy.yaml").read_text())
    assert policy["kind"] == "NicClusterPolicy"
    config = json.loads(policy["spec"]["rdmaSharedDevicePlugin"]["config"])
    assert config["configList"][0]["selectors"]["vendors"] == ["15b3"]
    assert not (out / "cluster/k8s/rdma-plugin-daemonset.yaml").exists()


# -- the flow against the lab -----------------------------------------------------------------


async def run_lab(tmp_path: Path, *faults: str, prepare=None) -> tuple[Outcome, Lab]:
    frontend = HeadlessFrontEnd(yes=True, out=io.StringIO())
    return await run_in_lab(tmp_path, frontend, *faults, phases=K8S_PHASES, prepare=prepare)


def finding(outcome: Outcome, check: str):
    found = [f for _, _, f in outcome.findings if f.check == check]
    assert found, f"no {check}: {[f.check for _, _, f in outcome.findings]}"
    return found[0]


async def test_join_operator_and_plugin_pass_in_the_lab(tmp_path):
    outcome, lab = await run_lab(tmp_path)
    assert outcome.exit_code == 0, [
        (f.check, f.message) for _, _, f in outcome.findings if f.severity is Severity.FAIL
    ]
    for check in ("T00.joined-gpu-b300-01", "T00.labels", "T01.single-nfd", "T01.release", "T01.pods", "T01.nvidia-runtime",
                  "T01.allocatable", "T01.test-pod", "T03.allocatable-gpu-b300-01", "T04.pod-rdma"):  # fmt: skip
        assert finding(outcome, check).severity is Severity.PASS, check
    assert (
        finding(outcome, "T01.test-pod").message
        == "a pod on gpu-b300-01 sees 8 GPUs with nvidia-smi -L"
    )
    node = lab.cluster.node("gpu-b300-01")
    assert node["metadata"]["labels"]["accelerator"] == "nvidia-b300"
    assert node["status"]["allocatable"]["rdma/e810"] == "64"
    release = lab.releases["gpu-operator/gpu-operator"]
    assert release["version"] == "v26.7.0"
    assert "kernelModuleType" not in release["values"]["driver"]  # the chart's auto
    assert release["values"]["operator"]["repository"] == "nexus.lab.internal:8443/nvidia/nvidia"
    cm = lab.cluster.get("v1", "configmaps", "kube-system", "gnw-rdma-devices")
    selectors = json.loads(cm["data"]["config.json"])["configList"][0]["selectors"]
    assert selectors["ifNames"] == ["ens5f0np0"]  # what rdma link showed, not a guess
    # The test pods were cleaned up.
    assert not [
        p for p in lab.cluster.list("v1", "pods", None) if p["metadata"]["name"].startswith("gnw-")
    ]


async def test_crashlooping_operator_fails_t01_naming_the_pod(tmp_path):
    outcome, _ = await run_lab(tmp_path, "operator-crashloop")
    pods = finding(outcome, "T01.pods")
    assert pods.severity is Severity.FAIL
    assert "gpu-operator-657c5b798d-x7k2p (CrashLoopBackOff, 12 restarts)" in pods.message
    assert "kubectl -n gpu-operator describe pod" in pods.remediation


async def test_plugin_without_resource_fails_t03(tmp_path):
    outcome, _ = await run_lab(tmp_path, "plugin-missing-resource")
    allocatable = finding(outcome, "T03.allocatable-gpu-b300-01")
    assert allocatable.severity is Severity.FAIL
    assert "does not advertise rdma/e810" in allocatable.message
    assert "selectors" in allocatable.remediation


async def test_second_nfd_fails_before_the_install(tmp_path):
    def add_nfd(lab: Lab) -> None:
        lab.cluster.put("apps/v1", "daemonsets", {"metadata": {"name": "node-feature-discovery-worker", "namespace": "nfd"},
                                                  "spec": {}})  # fmt: skip

    outcome, lab = await run_lab(tmp_path, "greenfield", prepare=add_nfd)  # a first install
    nfd = finding(outcome, "T01.single-nfd")
    assert nfd.severity is Severity.FAIL and "nfd/node-feature-discovery-worker" in nfd.message
    assert "gpu-operator/gpu-operator" not in lab.releases  # nothing installed


def test_join_check_reads_runtime_kubelet_and_readiness_from_the_api():
    from steps.join import evaluate_joined
    from wizard.probe import Report

    site = parse_site(MINIMAL_SITE)

    def node(runtime: str, ready: str = "True", kubelet: str = "v1.33.5") -> dict:
        return {"metadata": {"name": "gpu-1"}, "status": {
            "conditions": [{"type": "Ready", "status": ready, "reason": "KubeletNotReady"}],
            "nodeInfo": {"kubeletVersion": kubelet, "containerRuntimeVersion": runtime}}}  # fmt: skip

    def judge(nodes: dict) -> dict:
        report = Report("T00")
        evaluate_joined(site, nodes, report)
        return {f.check: f for f in report.findings}

    ok = judge({"gpu-1": node("containerd://2.1.4")})
    assert ok["T00.joined-gpu-1"].severity is Severity.PASS
    old = judge({"gpu-1": node("containerd://1.7.27")})
    assert old["T00.runtime-gpu-1"].severity is Severity.FAIL
    assert "needs containerd >= 2.0" in old["T00.runtime-gpu-1"].message
    absent = judge({})
    assert "is not in the cluster" in absent["T00.joined-gpu-1"].message
    assert "scale.yml" in absent["T00.joined-gpu-1"].remediation
    not_ready = judge({"gpu-1": node("containerd://2.1.4", ready="False")})
    assert "not Ready (KubeletNotReady)" in not_ready["T00.joined-gpu-1"].message
    skew = judge({"gpu-1": node("containerd://2.1.4", kubelet="v1.32.9")})
    assert skew["T00.kubelet-gpu-1"].severity is Severity.WARN
