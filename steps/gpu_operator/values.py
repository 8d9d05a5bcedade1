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
# Components whose values have an imagePullSecrets key in v26.7.0 (dcgmExporter has none).
_SECRET_KEYS = ("operator", "validator", "driver", "toolkit", "devicePlugin", "gfd", "migManager")


def mirrored(repository: str, mirror: str | None) -> str:
    """``nvcr.io/nvidia/k8s`` behind mirror ``nexus:8443/m`` is ``nexus:8443/m/nvidia/k8s``."""
    if not mirror:
        return repository
    path = repository.split("/", 1)[1] if "/" in repository else ""
    return f"{mirror.rstrip('/')}/{path}" if path else mirror


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


def build_values(site: Site, *, prometheus_crds: bool) -> dict[str, Any]:
    """The chart values the wizard sets (every key exists in the chart's values.yaml)."""
    versions = site.versions
    values: dict[str, Any] = {
        "nfd": {"enabled": True},
        "cdi": {"enabled": versions.cdi},
        "driver": {
            "version": versions.driver,
            "kernelModuleType": versions.kernel_module_type,
            "rdma": {"enabled": False},
            "nvidiaDriverCRD": {
                "enabled": versions.nvidia_driver_crd,
                "deployDefaultCR": not versions.nvidia_driver_crd,
            },
        },
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
    """An NVIDIADriver selecting the site's GPU nodes (when the CRD manages the driver)."""
    spec: dict[str, Any] = {
        "driverType": "gpu",
        "usePrecompiled": False,
        "repository": mirrored("nvcr.io/nvidia", site.registry.mirror),
        "image": "driver",
        "version": site.versions.driver,
        "imagePullPolicy": "IfNotPresent",
        "imagePullSecrets": [site.registry.pull_secret] if site.registry.pull_secret else [],
        "nodeSelector": dict(site.labels),
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
