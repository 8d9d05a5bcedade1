"""The cluster objects the wizard exports, on a tainted, air-gapped site: the air-gap list is
what the site pulls (every image of every exported workload object, plus the images the real
GPU Operator chart deploys, each copied to where the mirrored objects look for it), and every
pod, job and DaemonSet the wizard creates tolerates the site's taint with the pull secret."""

from __future__ import annotations

import shlex

import pytest
import yaml

from steps import build_plan
from steps.gpu_operator import build_values, mirror_ref
from steps.mirror import OPERATOR_IMAGES, object_images
from tests.chart import container_images, one, packaged_chart, pod_specs, render
from tests.conftest import MINIMAL_SITE, with_nodes
from tests.test_gpu_operator_chart import component_images
from wizard.export import export
from wizard.site import parse_site

MIRROR = "nexus.lab:8443/mirror"
PUBLIC = with_nodes(2) + "taint: {enabled: true}\nversions: {nvidia_driver_crd: true}\n"
MIRRORED = PUBLIC + f"registry: {{mirror: {MIRROR}, pull_secret: nexus-pull}}\n"


@pytest.fixture(scope="module")
def chart(tmp_path_factory):
    return packaged_chart(tmp_path_factory.mktemp("chart"), "v26.7.0")


def exported(tmp_path, text: str):
    site = parse_site(text)
    out = tmp_path / "out"
    export(site, build_plan(), out)
    objects = [
        doc
        for path in sorted(out.rglob("*.yaml"))
        if "/k8s/" in str(path)
        for doc in yaml.safe_load_all(path.read_text())
    ]
    images = (out / "cluster/mirror/images.txt").read_text().splitlines()
    return site, out, objects, images


def chart_images(chart, site) -> set[str]:
    objects = render(chart, build_values(site, prometheus_crds=False))
    pulled = {i for _, spec in pod_specs(objects) for i in container_images(spec)}
    policy = one(objects, "ClusterPolicy")
    return pulled | {ref for refs in component_images(policy, site).values() for ref in refs}


def test_images_txt_is_every_image_the_export_and_the_chart_pull(tmp_path, chart):
    site, _, objects, images = exported(tmp_path, PUBLIC)
    from_objects = set().union(*(object_images(o, site) for o in objects))
    # The phases' own pods and jobs, which the old hand list left out, are in.
    for needed in ("k8s-rdma-shared-dev-plugin", "nccl-tests", "/cuda:"):
        assert any(needed in image for image in from_objects), needed
    assert images == sorted(images) and len(set(images)) == len(images)
    assert set(images) == from_objects | chart_images(chart, site) | set(OPERATOR_IMAGES)
    # The MPI Operator the NCCL MPIJob needs, pinned (kubeflow/mpi-operator v0.8.0).
    assert "docker.io/mpioperator/mpi-operator:0.8.0" in images


def test_every_mirrored_object_pulls_a_copied_image(tmp_path, chart):
    site, out, objects, images = exported(tmp_path, MIRRORED)
    copies = {}
    for line in (out / "cluster/mirror/copy-images.sh").read_text().splitlines():
        if line.startswith("copy "):
            _, source, target = shlex.split(line)
            copies[source] = target
    assert sorted(copies) == images
    assert all(target == mirror_ref(source, MIRROR) for source, target in copies.items())
    pulled = set().union(*(object_images(o, site) for o in objects)) | chart_images(chart, site)
    assert pulled, "no images found"
    missing = pulled - set(copies.values())
    assert not missing, f"pulled from the mirror but never copied there: {sorted(missing)}"


def test_every_workload_the_wizard_creates_tolerates_the_taint(tmp_path):
    _, _, objects, _ = exported(tmp_path, MIRRORED)
    toleration = {"key": "accelerator", "operator": "Equal", "value": "nvidia-b300",
                  "effect": "NoSchedule"}  # fmt: skip
    workloads = [(f"{o['kind']}/{o['metadata']['name']}", spec) for o in objects
                 for spec in _pod_spec(o)]  # fmt: skip
    kinds = {name.split("/")[0] for name, _ in workloads}
    assert {"Pod", "Job", "DaemonSet"} <= kinds, kinds
    for name, spec in workloads:
        assert toleration in spec.get("tolerations", []), f"{name} does not tolerate the taint"
        assert {"name": "nexus-pull"} in spec.get("imagePullSecrets", []), name
    driver = one(objects, "NVIDIADriver")
    assert toleration in driver["spec"]["tolerations"]


def _pod_spec(obj: dict) -> list[dict]:
    if obj.get("kind") == "Pod":
        return [obj["spec"]]
    if obj.get("kind") in ("DaemonSet", "Deployment", "Job"):
        return [obj["spec"]["template"]["spec"]]
    return []


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0", f"{MIRROR}/nvidia/k8s/dcgm-exporter:4.6.0"),
        ("docker.io/mellanox/rping-test", f"{MIRROR}/mellanox/rping-test"),
        ("ghcr.io/x/y@sha256:" + "a" * 64, f"{MIRROR}/x/y@sha256:" + "a" * 64),
        ("registry.k8s.io/pause:3.10", f"{MIRROR}/pause:3.10"),
    ],
)
def test_mirror_ref_keeps_the_name_and_the_tag_or_digest(image, expected):
    assert mirror_ref(image, MIRROR) == expected
    assert mirror_ref(image, None) == image


def test_minimal_site_without_a_mirror_still_lists_its_images(tmp_path):
    _, out, _, images = exported(tmp_path, MINIMAL_SITE)
    assert "nvcr.io/nvidia/gpu-operator:v26.7.0" in images
    assert "exit 1" in (out / "cluster/mirror/copy-images.sh").read_text()
