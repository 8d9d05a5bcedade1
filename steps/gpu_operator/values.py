"""GPU Operator chart values, the NVIDIADriver resource and the chart's images, as data.

Every key the wizard sets exists in the pinned chart (values.yaml, or a key its templates
read); tests render the real v26.7.0 chart with these values and validate the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from wizard.site import Node, Site

NAMESPACE = "gpu-operator"
RELEASE = "gpu-operator"
CHART = "nvidia/gpu-operator"
VALUES_PATH = "cluster/helm/gpu-operator-values.yaml"
SERVICE_MONITOR_CRD = "servicemonitors.monitoring.coreos.com"
NFD_SUBCHART = "node-feature-discovery"


@dataclass(frozen=True)
class Image:
    """One image the chart deploys for container workloads (values key, repo, image, tag)."""

    values_key: str  # dotted path of the component in values.yaml ("" for the NFD subchart)
    repository: str
    image: str
    tag: str  # "{app}" = the chart's appVersion; "{os}" = the node OS suffix of the driver


# The images GPU Operator v26.7.0 deploys for container (non-sandbox) workloads, read from
# its values.yaml (tests/test_k8s_phases.py checks every row against the reference file).
IMAGES_V26_7_0 = (
    Image("operator", "nvcr.io/nvidia", "gpu-operator", "{app}"),
    Image("validator", "nvcr.io/nvidia", "gpu-operator", "{app}"),
    Image("driver", "nvcr.io/nvidia", "driver", "595.91.07-{os}"),
    Image("driver.manager", "nvcr.io/nvidia/cloud-native", "k8s-driver-manager", "v0.12.0"),
    Image("toolkit", "nvcr.io/nvidia/k8s", "container-toolkit", "v1.20.0"),
    Image("devicePlugin", "nvcr.io/nvidia", "k8s-device-plugin", "v0.20.0"),
    Image("gfd", "nvcr.io/nvidia", "k8s-device-plugin", "v0.20.0"),
    Image("dcgmExporter", "nvcr.io/nvidia/k8s", "dcgm-exporter", "4.6.0-4.8.3-distroless"),
    Image("migManager", "nvcr.io/nvidia/cloud-native", "k8s-mig-manager", "v0.15.0"),
    Image("", "registry.k8s.io/nfd", "node-feature-discovery", "v0.19.0"),
)
# Components whose pull secrets the v26.7.0 chart passes on: each has an imagePullSecrets key
# in values.yaml, except dcgmExporter, whose key only templates/clusterpolicy.yaml reads
# (`{{- if .Values.dcgmExporter.imagePullSecrets }}`, line 549): without it dcgm-exporter
# pulls anonymously from the mirror. (driver.manager uses the driver's secrets.)
_SECRET_KEYS = (
    "operator",
    "validator",
    "driver",
    "toolkit",
    "devicePlugin",
    "gfd",
    "dcgmExporter",
    "migManager",
)

# The default tolerations of GPU Operator v26.7.0 (deployments/gpu-operator/values.yaml):
# `daemonsets.tolerations` (lines 45-48) for every operand, and the NFD worker's
# `node-feature-discovery.worker.tolerations` (lines 631-638). Helm replaces a list given in
# values as a whole, so a site taint is added to these, never in their place.
OPERAND_TOLERATIONS: tuple[dict[str, str], ...] = (
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
)
NFD_WORKER_TOLERATIONS: tuple[dict[str, str], ...] = (
    {
        "key": "node-role.kubernetes.io/control-plane",
        "operator": "Equal",
        "value": "",
        "effect": "NoSchedule",
    },
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
)


def mirrored(repository: str, mirror: str | None) -> str:
    """``nvcr.io/nvidia/k8s`` behind mirror ``nexus:8443/m`` is ``nexus:8443/m/nvidia/k8s``."""
    if not mirror:
        return repository
    path = repository.split("/", 1)[1] if "/" in repository else ""
    return f"{mirror.rstrip('/')}/{path}" if path else mirror


def mirror_ref(image: str, mirror: str | None) -> str:
    """Where a public image lives in the mirror: ``nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0``
    behind ``nexus:8443/m`` is ``nexus:8443/m/nvidia/k8s/dcgm-exporter:4.6.0`` (the
    repository through ``mirrored``, the name and tag or digest kept)."""
    if not mirror:
        return image
    separator = "@" if "@" in image else ":"
    name, _, ref = image.partition("@") if separator == "@" else image.rpartition(":")
    if "/" in ref:  # "host:port/name" without a tag: the colon was the port's
        name, ref = image, ""
    path, _, last = name.rpartition("/")
    target = f"{mirrored(path, mirror)}/{last}" if path else f"{mirror.rstrip('/')}/{last}"
    return f"{target}{separator}{ref}" if ref else target


def os_tag(node: Node) -> str:
    """The driver image's OS suffix for a node profile (``rhel10.2``, ``ubuntu24.04``)."""
    name, _, version = node.os.partition("-")
    return f"{name}{version}"


def _set(values: dict[str, Any], dotted: str, value: Any) -> None:
    node = values
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def site_toleration(site: Site) -> dict[str, str] | None:
    """The toleration of the site's GPU-node taint (None when the site sets no taint)."""
    if not site.taint.enabled:
        return None
    t = site.taint
    return {"key": t.key, "operator": "Equal", "value": t.value, "effect": t.effect}


def tolerations(site: Site, defaults: tuple[dict[str, str], ...]) -> list[dict[str, str]]:
    """The chart's default tolerations plus the site's taint (when on)."""
    extra = site_toleration(site)
    return [dict(t) for t in defaults] + ([extra] if extra else [])


# The driver the v26.7.0 chart deploys when the values name none (values.yaml driver.version)
# and its kernel module type (driver.kernelModuleType "auto": "the recommended kernel module
# type is chosen based on the GPU devices on the host and the driver branch",
# gpu-operator api/nvidia/v1alpha1/nvidiadriver_types.go; a B300 gets the open modules).
CHART_DRIVER_VERSION = "595.91.07"
CHART_KERNEL_MODULE_TYPE = "auto"
# The v26.7.0 defaults (values.yaml) of the other keys the wizard sets: a key a release's
# user values lack has its chart default, so setting that very value changes nothing
# (tests/test_brownfield_driver.py checks each against the chart's values.yaml).
CHART_DEFAULTS: dict[str, Any] = {
    "driver.version": CHART_DRIVER_VERSION,
    "driver.kernelModuleType": CHART_KERNEL_MODULE_TYPE,
    "driver.rdma.enabled": False,
    "driver.nvidiaDriverCRD.enabled": False,
    "driver.nvidiaDriverCRD.deployDefaultCR": True,
    "nfd.enabled": True,
    "cdi.enabled": True,
    "dcgmExporter.serviceMonitor.enabled": True,
}


def driver_values(site: Site) -> dict[str, Any]:
    """The driver keys, scoped to the new nodes: the ClusterPolicy's driver runs on EVERY GPU
    node of the cluster, and ``driver.upgradePolicy.autoUpgrade`` (true in values.yaml) rolls
    a changed one over all of them. So the ClusterPolicy gets a driver version or kernel
    module type only when the site asks for one other than the chart's (a cluster-wide
    change the blast radius then names). With the NVIDIADriver CRD the new nodes' driver is
    the wizard's NVIDIADriver (``nvidia_driver_resource``) and the chart's default CR
    (``deployDefaultCR``; ``default: true``, "the fallback driver daemon set manager for GPU
    nodes that do not match any non-default NVIDIADriver nodeSelector",
    crds/nvidia.com_nvidiadrivers.yaml) keeps managing every other GPU node: without it
    they would have none (controllers/state_manager.go deletes the ClusterPolicy's driver
    DaemonSets, orphaning their pods, once the CRD is on)."""
    versions = site.versions
    driver: dict[str, Any] = {"rdma": {"enabled": False}}
    if versions.nvidia_driver_crd:
        driver["nvidiaDriverCRD"] = {"enabled": True, "deployDefaultCR": True}
        return driver
    driver["nvidiaDriverCRD"] = {"enabled": False}
    if versions.driver != CHART_DRIVER_VERSION:
        driver["version"] = versions.driver
    if versions.kernel_module_type != CHART_KERNEL_MODULE_TYPE:
        driver["kernelModuleType"] = versions.kernel_module_type
    return driver


def driver_pin_note(site: Site, merged: dict[str, Any]) -> str:
    """What the review says when the release's driver is not the site's: ``merge_values``
    keeps a live ``driver.version`` (changing it rolls the driver over every GPU node), so
    the new nodes run the release's pin. Empty when they get the site's driver (the same
    version, or the NVIDIADriver CRD: their own NVIDIADriver carries the site's)."""
    driver = merged.get("driver") or {}
    if site.versions.nvidia_driver_crd:
        return ""
    running = str(driver.get("version") or CHART_DRIVER_VERSION)
    if running == site.versions.driver:
        return ""
    return (
        f"The new nodes get driver {running} (the release's pin), not the site's "
        f"{site.versions.driver}: changing the release's pin rolls the driver over every GPU "
        "node; versions.nvidia_driver_crd gives the new nodes their own driver."
    )


def build_values(site: Site, *, prometheus_crds: bool) -> dict[str, Any]:
    """The chart values the wizard sets (each a key of the chart's values.yaml or one its
    templates read): a site taint is tolerated by every operand and by the NFD worker, or
    neither lands on the new node."""
    versions = site.versions
    values: dict[str, Any] = {
        "nfd": {"enabled": True},
        "cdi": {"enabled": versions.cdi},
        "driver": driver_values(site),
        "dcgmExporter": {"serviceMonitor": {"enabled": prometheus_crds}},
    }
    mirror = site.registry.mirror
    secrets = [site.registry.pull_secret] if site.registry.pull_secret else []
    for image in IMAGES_V26_7_0:
        if not image.values_key:
            continue
        if mirror:
            _set(values, f"{image.values_key}.repository", mirrored(image.repository, mirror))
        if secrets and image.values_key in _SECRET_KEYS:
            _set(values, f"{image.values_key}.imagePullSecrets", list(secrets))
    if mirror:
        nfd = next(i for i in IMAGES_V26_7_0 if not i.values_key)
        values[NFD_SUBCHART] = {
            "image": {"repository": f"{mirrored(nfd.repository, mirror)}/{nfd.image}"}
        }
        if secrets:
            values[NFD_SUBCHART]["imagePullSecrets"] = [{"name": s} for s in secrets]
    if site.taint.enabled:
        values["daemonsets"] = {"tolerations": tolerations(site, OPERAND_TOLERATIONS)}
        nfd_values = values.setdefault(NFD_SUBCHART, {})
        nfd_values["worker"] = {"tolerations": tolerations(site, NFD_WORKER_TOLERATIONS)}
    env = []
    if site.cluster.containerd_config:
        env.append({"name": "CONTAINERD_CONFIG", "value": site.cluster.containerd_config})
    if site.cluster.containerd_socket:
        env.append({"name": "CONTAINERD_SOCKET", "value": site.cluster.containerd_socket})
    if env:
        _set(values, "toolkit.env", env)
    return values


def values_yaml(site: Site, *, prometheus_crds: bool) -> str:
    return yaml.safe_dump(build_values(site, prometheus_crds=prometheus_crds), sort_keys=True)


def nvidia_driver_resource(site: Site) -> dict[str, Any]:
    """An NVIDIADriver selecting the site's GPU nodes (when the CRD manages the driver).

    With the CRD on, the chart's ClusterPolicy carries no driver settings
    (templates/clusterpolicy.yaml renders ``driver.kernelModuleType`` only
    ``if not .Values.driver.nvidiaDriverCRD.enabled``), so this resource must carry the
    kernel module type, the mirror for the driver manager and the taint's toleration itself
    (crds/nvidia.com_nvidiadrivers.yaml: ``default``, ``driverType`` and ``image`` are
    required; a non-default resource may select nodes).
    """
    manager = next(i for i in IMAGES_V26_7_0 if i.values_key == "driver.manager")
    spec: dict[str, Any] = {
        "default": False,
        "driverType": "gpu",
        "kernelModuleType": site.versions.kernel_module_type,
        "usePrecompiled": False,
        "repository": mirrored("nvcr.io/nvidia", site.registry.mirror),
        "image": "driver",
        "version": site.versions.driver,
        "imagePullPolicy": "IfNotPresent",
        "imagePullSecrets": [site.registry.pull_secret] if site.registry.pull_secret else [],
        "nodeSelector": dict(site.labels),
        "tolerations": tolerations(site, OPERAND_TOLERATIONS),
        "manager": {
            "repository": mirrored(manager.repository, site.registry.mirror),
            "image": manager.image,
            "version": manager.tag,
        },
    }
    return {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": f"{site.name}-b300"},
        "spec": spec,
    }


def image_list(site: Site) -> list[str]:
    """Every image:tag to mirror for this chart version and the site's node OS profiles."""
    app = site.versions.gpu_operator
    tags: set[str] = set()
    for image in IMAGES_V26_7_0:
        oses = sorted({os_tag(n) for n in site.nodes}) if "{os}" in image.tag else [""]
        for os_name in oses:
            tag = image.tag.replace("{app}", app).replace("{os}", os_name)
            tags.add(f"{image.repository}/{image.image}:{tag}")
    return sorted(tags)
