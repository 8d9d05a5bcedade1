"""Driver settings scoped to the new nodes (#30): adding a node must not change the driver of
every other GPU node. The ClusterPolicy's driver runs on all of them and
driver.upgradePolicy.autoUpgrade rolls a change over all of them, so the wizard leaves the
chart's driver version and kernelModuleType auto there unless the site asks otherwise (then
the review names the cluster-wide change); with the NVIDIADriver CRD the chart's default
NVIDIADriver keeps the other nodes' driver."""

from __future__ import annotations

from steps.gpu_operator.release import ReleaseState, blast_radius, merge_values
from steps.gpu_operator.values import build_values, nvidia_driver_resource
from tests.conftest import MINIMAL_SITE
from wizard.site import parse_site

EXISTING = ReleaseState(
    name="gpu-operator", namespace="gpu-operator", installed=True, chart_version="v26.7.0", status="deployed",
    user_values={"driver": {"version": "580.126.20"}, "devicePlugin": {"config": {"name": "ts"}}},
    gpu_nodes=["gpu-1", "gpu-h100-01"],
)  # fmt: skip


def test_a_default_site_leaves_the_other_gpu_nodes_driver_alone():
    site = parse_site(MINIMAL_SITE)
    driver = build_values(site, prometheus_crds=False)["driver"]
    assert "kernelModuleType" not in driver and "version" not in driver
    merged = merge_values(EXISTING.user_values, build_values(site, prometheus_crds=False))
    assert merged["driver"]["version"] == "580.126.20"  # the cluster's pin stays
    text = blast_radius(EXISTING, site, merged)
    assert "nvidia-driver-daemonset" not in text and "autoUpgrade" not in text


def test_a_site_that_forces_open_modules_is_told_it_changes_every_gpu_node():
    site = parse_site(MINIMAL_SITE + "versions: {kernel_module_type: open}\n")
    values = build_values(site, prometheus_crds=False)
    assert values["driver"]["kernelModuleType"] == "open"
    text = blast_radius(EXISTING, site, merge_values(EXISTING.user_values, values))
    assert "changes driver.kernelModuleType" in text
    assert "EVERY GPU node" in text and "gpu-h100-01" in text and "autoUpgrade" in text


def test_with_the_driver_crd_the_default_nvidiadriver_keeps_the_other_nodes():
    site = parse_site(
        MINIMAL_SITE + "versions: {nvidia_driver_crd: true, kernel_module_type: open}\n"
    )
    driver = build_values(site, prometheus_crds=False)["driver"]
    assert driver["nvidiaDriverCRD"] == {"enabled": True, "deployDefaultCR": True}
    assert "kernelModuleType" not in driver  # the chart's default CR keeps auto
    spec = nvidia_driver_resource(site)["spec"]  # the new nodes' own driver
    assert spec["kernelModuleType"] == "open" and spec["default"] is False
    assert spec["nodeSelector"] == dict(site.labels)


def test_chart_defaults_are_the_pinned_charts():
    import yaml

    from steps.gpu_operator.values import CHART_DEFAULTS
    from tests.conftest import REFS

    chart = yaml.safe_load((REFS / "gpu-operator-values-v26.7.0.yaml").read_text())
    for path, value in CHART_DEFAULTS.items():
        node = chart
        for part in path.split("."):
            node = node[part]
        assert node == value, path


def test_a_service_monitor_change_restarts_no_pod():
    site = parse_site(MINIMAL_SITE)
    text = blast_radius(
        EXISTING,
        site,
        merge_values(
            EXISTING.user_values, {"dcgmExporter": {"serviceMonitor": {"enabled": False}}}
        ),
    )
    assert "changes dcgmExporter.serviceMonitor.enabled" in text and "EVERY" not in text
