"""The wizard's GPU Operator values, rendered by the real v26.7.0 chart with a real Helm
engine, for each kind of site: the ClusterPolicy is valid for the chart's CRD, a site taint
is tolerated by every operand and the NFD worker, and every image comes from the mirror."""

from __future__ import annotations

import pytest
import yaml

from steps.gpu_operator import build_values, image_list, nvidia_driver_resource, os_tag
from tests.chart import (
    CHART_DIR,
    container_images,
    crd_schema,
    one,
    packaged_chart,
    pod_specs,
    render,
    schema_errors,
)
from tests.conftest import MINIMAL_SITE
from wizard.site import parse_site

MIRROR = "nexus.lab:8443/mirror"
REGISTRY = f"registry: {{mirror: {MIRROR}, pull_secret: nexus-pull}}\n"
TAINT = "taint: {enabled: true, key: dedicated, value: gpu-b300, effect: NoSchedule}\n"
VARIANTS = {
    "plain": MINIMAL_SITE,
    "mirror": MINIMAL_SITE + REGISTRY,
    "taint": MINIMAL_SITE + TAINT,
    "driver-crd": MINIMAL_SITE + REGISTRY + TAINT + "versions: {nvidia_driver_crd: true}\n",
}
SITE_TOLERATION = {
    "key": "dedicated",
    "operator": "Equal",
    "value": "gpu-b300",
    "effect": "NoSchedule",
}
# ClusterPolicy components the operator runs only on sandbox (VM) nodes: GPU Operator's
# controllers/state_manager.go (gpuStateLabels) labels a "container" workload node for the
# driver, toolkit, device plugin, GFD, DCGM, DCGM exporter, node status exporter and
# validator only; sandbox-device-plugin, vfio/kata/cc/vgpu managers go to vm-passthrough and
# vm-vgpu nodes, and sandboxWorkloads.enabled is false (values.yaml), so none is pulled here.
SANDBOX_ONLY = {
    "vgpuManager",
    "kataManager",
    "vfioManager",
    "vgpuDeviceManager",
    "ccManager",
    "sandboxDevicePlugin",
    "kataSandboxDevicePlugin",
}


@pytest.fixture(scope="module")
def chart(tmp_path_factory):
    return packaged_chart(tmp_path_factory.mktemp("chart"), "v26.7.0")


@pytest.fixture(scope="module")
def chart_values():
    path = CHART_DIR / "values.yaml"
    if not path.exists():
        pytest.skip(f"{path} not available")
    return yaml.safe_load(path.read_text())


def rendered(chart, variant: str, *, prometheus: bool = False):
    site = parse_site(VARIANTS[variant])
    return site, render(chart, build_values(site, prometheus_crds=prometheus))


def component_images(policy: dict, site) -> dict[str, list[str]]:
    """component -> image references the operator pulls for it (ClusterPolicy spec), for
    the components enabled for container workloads; the driver's tag gets the node's OS
    suffix, as the operator's driver image path does (``<version>-<os><version>``)."""
    images: dict[str, list[str]] = {}
    for name, spec in policy["spec"].items():
        if name in SANDBOX_ONLY or not isinstance(spec, dict) or spec.get("enabled") is False:
            continue
        refs = []
        for part in (spec, *(v for v in spec.values() if isinstance(v, dict))):
            if "image" in part and "repository" in part:
                tag = str(part["version"])
                if name == "driver" and part is spec:
                    refs += [
                        f"{part['repository']}/{part['image']}:{tag}-{os_tag(n)}"
                        for n in site.nodes
                    ]
                else:
                    refs.append(f"{part['repository']}/{part['image']}:{tag}")
        if refs:
            images[name] = refs
    return images


@pytest.mark.parametrize("prometheus", [False, True])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_cluster_policy_is_valid_for_the_chart_crd(chart, variant, prometheus):
    _, objects = rendered(chart, variant, prometheus=prometheus)
    policy = one(objects, "ClusterPolicy")
    assert schema_errors(policy, crd_schema("nvidia.com_clusterpolicies.yaml", "v1")) == []
    assert policy["spec"]["dcgmExporter"]["serviceMonitor"]["enabled"] is prometheus
    assert policy["spec"]["driver"]["useNvidiaDriverCRD"] is (variant == "driver-crd")


def test_the_strict_schema_catches_a_field_the_crd_lacks(chart):
    """The validation above can fail: a misspelt field is reported, not pruned silently."""
    _, objects = rendered(chart, "plain")
    policy = one(objects, "ClusterPolicy")
    policy["spec"]["driver"]["kernelModuleTyp"] = "open"
    policy["spec"]["driver"]["kernelModuleType"] = "opn"
    errors = schema_errors(policy, crd_schema("nvidia.com_clusterpolicies.yaml", "v1"))
    assert any("kernelModuleTyp'" in e for e in errors), errors
    assert any(e.startswith("spec.driver.kernelModuleType:") for e in errors), errors


@pytest.mark.parametrize("variant", ["taint", "driver-crd"])
def test_operands_and_the_nfd_worker_tolerate_the_site_taint(chart, chart_values, variant):
    _, objects = rendered(chart, variant)
    policy = one(objects, "ClusterPolicy")
    operands = policy["spec"]["daemonsets"]["tolerations"]
    # The chart's own defaults stay (control plane, nvidia.com/gpu), the taint is added.
    assert operands == [*chart_values["daemonsets"]["tolerations"], SITE_TOLERATION]
    worker = one(objects, "DaemonSet", "node-feature-discovery-worker")
    defaults = chart_values["node-feature-discovery"]["worker"]["tolerations"]
    assert worker["spec"]["template"]["spec"]["tolerations"] == [*defaults, SITE_TOLERATION]


def test_without_a_taint_the_chart_defaults_are_left_alone(chart, chart_values):
    site, objects = rendered(chart, "plain")
    assert "daemonsets" not in build_values(site, prometheus_crds=False)
    policy = one(objects, "ClusterPolicy")
    assert policy["spec"]["daemonsets"]["tolerations"] == chart_values["daemonsets"]["tolerations"]


@pytest.mark.parametrize("variant", ["mirror", "driver-crd"])
def test_every_image_comes_from_the_mirror_with_the_pull_secret(chart, variant):
    site, objects = rendered(chart, variant)
    for name, spec in pod_specs(objects):
        for image in container_images(spec):
            assert image.startswith(MIRROR + "/"), f"{name} pulls {image}"
        assert {"name": "nexus-pull"} in spec.get("imagePullSecrets", []), name
    policy = one(objects, "ClusterPolicy")
    for name, refs in component_images(policy, site).items():
        for ref in refs:
            assert ref.startswith(MIRROR + "/"), f"ClusterPolicy {name} pulls {ref}"
        secrets = policy["spec"][name].get("imagePullSecrets")
        if name == "driver" and variant == "driver-crd":
            continue  # the NVIDIADriver resource carries the driver's secret (below)
        assert secrets == ["nexus-pull"], f"ClusterPolicy {name} has no pull secret"


def test_the_chart_images_are_the_image_list(chart):
    """images.txt's GPU Operator part is what the chart makes the cluster pull, not a hand
    list: the rendered workloads plus the ClusterPolicy's container components."""
    site, objects = rendered(chart, "plain")
    pulled = {i for _, spec in pod_specs(objects) for i in container_images(spec)}
    policy = one(objects, "ClusterPolicy")
    pulled |= {ref for refs in component_images(policy, site).values() for ref in refs}
    assert set(image_list(site)) == pulled


def test_nvidia_driver_resource_is_valid_and_carries_what_the_policy_leaves_out(chart):
    site, objects = rendered(chart, "driver-crd")
    policy = one(objects, "ClusterPolicy")
    # With the CRD on the chart puts no driver settings in the ClusterPolicy ...
    assert "kernelModuleType" not in policy["spec"]["driver"]
    # deployDefaultCR on: the chart's default NVIDIADriver, the fallback for every GPU node
    # no other NVIDIADriver selects (the CRD's `default`), so the existing ones keep theirs.
    (default,) = [o for o in objects if o.get("kind") == "NVIDIADriver"]
    assert default["spec"]["default"] is True and not default["spec"].get("nodeSelector")
    # ... so the wizard's NVIDIADriver must carry them.
    resource = nvidia_driver_resource(site)
    schema = crd_schema("nvidia.com_nvidiadrivers.yaml", "v1alpha1")
    assert schema_errors(resource, schema) == []
    spec = resource["spec"]
    assert spec["kernelModuleType"] == "auto"  # the site's default: open on a B300
    assert SITE_TOLERATION in spec["tolerations"]
    assert spec["imagePullSecrets"] == ["nexus-pull"]
    assert spec["repository"].startswith(MIRROR + "/")
    assert spec["manager"]["repository"].startswith(MIRROR + "/")
    # The CRD's CEL rule: "default NVIDIADriver must not use nodeSelector".
    assert spec["default"] is False and spec["nodeSelector"] == {"accelerator": "nvidia-b300"}
