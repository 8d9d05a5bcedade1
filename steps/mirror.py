"""The air-gap mirror list, computed from what the plan makes the cluster pull.

An air-gapped site pulls nothing that is not in its mirror, so ``images.txt`` is never a
hand list: it is every image of every workload object the plan renders (the RDMA device
plugin, the test pods, the NCCL job ...), the NVIDIADriver's driver and manager images, and
the images the pinned GPU Operator chart deploys (``image_list``, checked against the real
chart rendered in tests/test_gpu_operator_chart.py). The objects are rendered for the site
without its mirror, so each entry is the public source; ``copy-images.sh`` copies each to
``mirror_ref`` of it, the reference the mirrored objects use.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from steps.gpu_operator.values import image_list, mirror_ref, os_tag
from wizard.artifacts import Artifact, Target, render
from wizard.plan import Scope
from wizard.site import Site

IMAGES_PATH = "cluster/mirror/images.txt"
COPY_SCRIPT_PATH = "cluster/mirror/copy-images.sh"
_WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job")
# What the plan needs in the cluster but does not install itself: the inter-node NCCL run is
# an MPIJob (kubeflow.org/v2beta1), which only the Kubeflow MPI Operator runs; an air-gapped
# site installs it from the mirror too (kubeflow/mpi-operator v0.8.0
# deploy/v2beta1/mpi-operator.yaml: image mpioperator/mpi-operator:0.8.0, on Docker Hub).
OPERATOR_IMAGES = ("docker.io/mpioperator/mpi-operator:0.8.0",)


def object_images(obj: Any, site: Site) -> set[str]:
    """The images one Kubernetes object makes a node pull (empty for non-workloads)."""
    if not isinstance(obj, dict):
        return set()
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    if kind == "NVIDIADriver":
        # The operator pulls <repository>/<image>:<version>-<os> per node OS and the manager.
        images = {
            f"{spec['repository']}/{spec['image']}:{spec['version']}-{os_tag(n)}"
            for n in site.nodes
        }
        manager = spec.get("manager") or {}
        if manager.get("image"):
            images.add(f"{manager['repository']}/{manager['image']}:{manager['version']}")
        return images
    if kind == "MPIJob":  # kubeflow.org/v2beta1: a pod template per replica type
        return {
            image
            for replica in (spec.get("mpiReplicaSpecs") or {}).values()
            for image in object_images(
                {"kind": "Pod", "spec": (replica or {}).get("template", {}).get("spec", {})}, site
            )
        }
    if kind == "CronJob":
        spec = spec.get("jobTemplate", {}).get("spec", {})
        kind = "Job"
    if kind in _WORKLOADS:
        spec = spec.get("template", {}).get("spec", {})
    elif kind != "Pod":
        return set()
    containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
    return {c["image"] for c in containers if c.get("image")}


def plan_objects(site: Site) -> Iterable[Any]:
    """Every Kubernetes object the plan renders for ``site`` (cluster and each node)."""
    from steps import build_plan

    for step in build_plan().steps():
        targets = [None] if step.scope == Scope.CLUSTER else list(site.nodes)
        for node in targets:
            for artifact in step.artifacts(site, node):
                if artifact.target is Target.K8S_OBJECT:
                    yield from yaml.safe_load_all(artifact.content)


def source_images(site: Site) -> list[str]:
    """Every public image the site pulls: the plan's objects (rendered without the mirror)
    and the GPU Operator chart's images."""
    public = site.model_copy(update={"registry": site.registry.model_copy(update={"mirror": None})})
    images = set(image_list(public)) | set(OPERATOR_IMAGES)
    for obj in plan_objects(public):
        images |= object_images(obj, public)
    return sorted(images)


def mirror_artifacts(site: Site) -> list[Artifact]:
    """``images.txt`` and the ``copy-images.sh`` that fills the mirror with them."""
    images = source_images(site)
    mirror = site.registry.mirror
    copies = [(image, mirror_ref(image, mirror)) for image in images] if mirror else []
    return [
        Artifact(
            IMAGES_PATH,
            "".join(f"{image}\n" for image in images),
            Target.DOCUMENT,
            "the site's registry mirror",
            "every image the plan's objects and GPU Operator "
            f"{site.versions.gpu_operator} pull on this site",
        ),
        Artifact(
            COPY_SCRIPT_PATH,
            render("helm/copy-images.sh.j2", copies=copies, mirror=mirror),
            Target.SCRIPT,
            "run on a host that reaches both registries",
            "skopeo copy of every image into the mirror",
            mode=0o755,
        ),
    ]
