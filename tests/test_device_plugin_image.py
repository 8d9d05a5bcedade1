"""`device_plugin.image` is what the RDMA device plugin DaemonSet runs (issue #18)."""

from __future__ import annotations

import pytest

from steps.rdma_plugin import daemonset
from tests.conftest import MINIMAL_SITE
from wizard.errors import SiteError
from wizard.site import parse_site


def image_of(site_text: str) -> str:
    manifest = daemonset(parse_site(site_text))
    return manifest["spec"]["template"]["spec"]["containers"][0]["image"]


def test_the_default_image_and_version():
    assert image_of(MINIMAL_SITE) == "ghcr.io/mellanox/k8s-rdma-shared-dev-plugin:v1.5.3"


def test_a_site_image_is_honoured_and_mirrored():
    custom = (
        MINIMAL_SITE
        + "device_plugin: {image: registry.corp:5000/rdma/shared-dp, version: v1.5.4}\n"
    )
    assert image_of(custom) == "registry.corp:5000/rdma/shared-dp:v1.5.4"
    mirrored = custom + "registry: {mirror: nexus.lab:8443/m}\n"
    assert image_of(mirrored) == "nexus.lab:8443/m/rdma/shared-dp:v1.5.4"


@pytest.mark.parametrize("image", ["ghcr.io/x/y:v1", "ghcr.io/x/y@sha256:ab", "a b", "ghcr.io/x\n"])
def test_an_image_with_a_tag_or_junk_is_refused(image):
    with pytest.raises(SiteError, match=r"device_plugin\.image"):
        parse_site(MINIMAL_SITE + f"device_plugin: {{image: {image!r}}}\n")
