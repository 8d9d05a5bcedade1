"""The live release's driver pin wins over the site's (cluster-r1 M7): keeping it avoids a
cluster-wide driver roll, but the review must say that the new nodes get the release's
driver, not the site's."""

from __future__ import annotations

from steps.gpu_operator.release import merge_values
from steps.gpu_operator.values import build_values, driver_pin_note
from tests.conftest import MINIMAL_SITE
from tests.test_brownfield_driver import EXISTING
from wizard.site import parse_site


def test_the_review_says_the_new_nodes_get_the_releases_driver():
    site = parse_site(MINIMAL_SITE)  # the site's driver: the chart's 595.91.07
    merged = merge_values(EXISTING.user_values, build_values(site, prometheus_crds=False))
    note = driver_pin_note(site, merged)
    assert (
        f"new nodes get driver 580.126.20 (the release's pin), not the site's "
        f"{site.versions.driver}" in note
    )


def test_no_word_when_the_release_runs_the_sites_driver():
    site = parse_site(MINIMAL_SITE)
    assert driver_pin_note(site, build_values(site, prometheus_crds=False)) == ""
    crd = parse_site(MINIMAL_SITE + "versions: {nvidia_driver_crd: true}\n")
    merged = merge_values(EXISTING.user_values, build_values(crd, prometheus_crds=False))
    assert driver_pin_note(crd, merged) == ""  # the new nodes' own NVIDIADriver
