"""Every image any exported artifact references is pinned (a tag other than latest, or a
digest) and listed in the air-gap mirror list, cluster/mirror/images.txt (#30): an untagged
or :latest image changes between the run and its repetition, and an image missing from the
list cannot be pulled behind an air gap."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from steps import build_plan
from steps.gpu_operator import image_list, mirror_ref
from steps.mirror import IMAGES_PATH, object_images
from tests.conftest import with_nodes
from wizard.errors import SiteError
from wizard.export import export
from wizard.site import parse_site

MIRROR = "nexus.lab:8443/mirror"
SITES = {
    "public": with_nodes(2) + "taint: {enabled: true}\nversions: {nvidia_driver_crd: true}\n",
    "mirrored": with_nodes(2)
    + "versions: {nvidia_driver_crd: true}\n"
    + f"registry: {{mirror: {MIRROR}, pull_secret: nexus-pull}}\n",
}


def pinned(image: str) -> bool:
    name, _, digest = image.partition("@")
    if digest:
        return digest.startswith("sha256:") and len(digest) == len("sha256:") + 64
    tag = name.rsplit("/", 1)[-1].partition(":")[2]
    return bool(tag) and tag != "latest"


def _image_strings(node, found: set[str]) -> None:
    """Every ``image:`` value that is a whole reference (has a registry path), anywhere."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "image" and isinstance(value, str) and "/" in value:
                found.add(value)
            _image_strings(value, found)
    elif isinstance(node, list):
        for value in node:
            _image_strings(value, found)


def referenced(out: Path, site) -> set[str]:
    """The images the exported files make a node pull: each workload object's (and the
    NVIDIADriver's composed ones), any other whole ``image:`` reference, and what the GPU
    Operator values deploy (the pinned chart's images under the values' repositories)."""
    found: set[str] = set()
    for path in sorted(out.rglob("*.y*ml")):
        for doc in yaml.safe_load_all(path.read_text()):
            found |= object_images(doc, site)
            _image_strings(doc, found)
    found |= {mirror_ref(image, site.registry.mirror) for image in image_list(site)}
    return found


@pytest.mark.parametrize("name", sorted(SITES))
def test_every_referenced_image_is_pinned_and_listed_for_the_mirror(tmp_path, name):
    site = parse_site(SITES[name])
    out = tmp_path / "out"
    export(site, build_plan(), out)
    listed = (out / IMAGES_PATH).read_text().split()
    images = referenced(out, site)
    assert len(images) > 8  # the plan's pods, the plugin, the driver, the operands
    unpinned = sorted(i for i in images | set(listed) if not pinned(i))
    assert not unpinned, f"not pinned by tag or digest: {unpinned}"
    pulled_from_mirror = {mirror_ref(source, site.registry.mirror) for source in listed}
    missing = sorted(images - pulled_from_mirror)
    assert not missing, f"referenced but not in {IMAGES_PATH}: {missing}"


@pytest.mark.parametrize("field", ["rdma_test_image", "nccl_tests_image", "cuda_perftest_image"])
@pytest.mark.parametrize(
    "image", ["docker.io/mellanox/rping-test", "docker.io/mellanox/rping-test:latest"]
)
def test_a_site_image_without_a_tag_or_with_latest_is_refused_by_name(field, image):
    with pytest.raises(SiteError) as raised:
        parse_site(SITES["public"] + f"measurements: {{{field}: {image}}}\n")
    message = str(raised.value)
    assert f"measurements.{field}" in message and "not pinned" in message, message


SAMPLE = Path(__file__).parent / "facts/samples/ibv-devinfo/01.txt"


def _pod_verdict(logs: str, device: str | None = None):
    from types import SimpleNamespace

    from steps.rdma_plugin import evaluate_pod_rdma
    from wizard.probe import Report

    report = Report("T04")
    evaluate_pod_rdma(logs, SimpleNamespace(name="gpu-1"), report, device)
    (finding,) = report.findings
    return finding


def test_the_rdma_test_pod_is_judged_by_ibv_devinfo_with_or_without_iproute2():
    """The default image (nccl-tests) has ibv_devinfo and no `rdma`: the verdict rests on
    ibv_devinfo's ACTIVE Ethernet port; `rdma link`, where the image has it, names the netdev."""
    from wizard.model import Severity

    real = "\n".join(line for line in SAMPLE.read_text().splitlines() if not line.startswith("#"))
    with_iproute2 = _pod_verdict(real)
    assert with_iproute2.severity is Severity.PASS
    assert "irdma1 (enp23s0f1)" in with_iproute2.message
    devinfo = real[real.index("hca_id:") :]
    without = _pod_verdict("sh: 1: rdma: not found\n" + devinfo)
    assert without.severity is Severity.PASS and "irdma1 ACTIVE" in without.message
    down = _pod_verdict(devinfo.replace("PORT_ACTIVE", "PORT_DOWN"))
    assert down.severity is Severity.FAIL
    none = _pod_verdict("sh: 1: rdma: not found\nNo IB devices found\n")
    assert none.severity is Severity.FAIL and "ibv_devinfo lists none" in none.message


def test_the_rdma_test_pod_must_see_the_nodes_own_device():
    """irdma.verify's device (irdma1 here) must be ACTIVE in the pod: another ACTIVE device
    does not pass for it (review #30 point 6)."""
    from wizard.model import Severity

    real = "\n".join(line for line in SAMPLE.read_text().splitlines() if not line.startswith("#"))
    devinfo = real[real.index("hca_id:") :]
    assert _pod_verdict(devinfo, "irdma1").severity is Severity.PASS
    foreign = _pod_verdict(devinfo, "irdma0")  # the node's own device; the pod sees irdma1 only
    assert foreign.severity is Severity.FAIL
    assert "irdma0" in foreign.message and "irdma1" in foreign.message


def test_an_infiniband_port_is_not_roce():
    """link layer InfiniBand ACTIVE is not the E810's RoCE port: the link-layer check fails
    the pod, with or without the node's device known."""
    from wizard.model import Severity

    real = "\n".join(line for line in SAMPLE.read_text().splitlines() if not line.startswith("#"))
    devinfo = real[real.index("hca_id:") :]
    assert "link_layer:             Ethernet" in devinfo
    infiniband = devinfo.replace("Ethernet", "InfiniBand")
    assert _pod_verdict(infiniband).severity is Severity.FAIL
    assert _pod_verdict(infiniband, "irdma1").severity is Severity.FAIL


def test_the_rdma_test_pod_gets_no_gpus_from_its_cuda_image():
    """nccl-tests is nvidia/cuda-based (NVIDIA_VISIBLE_DEVICES=all): the pod says void."""
    from steps.rdma_plugin import rdma_test_pod

    site = parse_site(SITES["public"])
    (container,) = rdma_test_pod(site, site.nodes[0])["spec"]["containers"]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in container["env"]
