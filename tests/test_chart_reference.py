"""The GPU Operator chart reference is a site setting and is checked before use (#30): an
air gap's helm has no NVIDIA repository, and a wrong reference must stop the run at the
preflight with the reference, the version and helm's own words, before any release."""

from __future__ import annotations

import io

from frontend.headless import HeadlessFrontEnd
from simulator.lab import Lab
from steps.gpu_operator.install import upgrade_args
from tests.conftest import K8S_PHASES, MINIMAL_SITE, run_in_lab
from wizard.model import Severity
from wizard.site import parse_site


def test_the_upgrade_uses_the_site_chart():
    site = parse_site(
        MINIMAL_SITE + "registry: {gpu_operator_chart: oci://nexus.site:8443/charts/gpu-operator}\n"
    )
    assert (
        upgrade_args(site, "v.yaml", "gpu-operator", "gpu-operator")[3]
        == "oci://nexus.site:8443/charts/gpu-operator"
    )


async def test_a_chart_helm_cannot_find_stops_the_preflight_before_any_release(tmp_path):
    def wrong_chart(lab: Lab) -> None:
        text = lab.site_path.read_text().replace(
            "pull_secret: nexus-pull",
            "pull_secret: nexus-pull\n  gpu_operator_chart: mirror/gpu-operator",
        )
        lab.site_path.write_text(text)

    frontend = HeadlessFrontEnd(yes=True, out=io.StringIO())
    outcome, lab = await run_in_lab(
        tmp_path, frontend, "greenfield", phases=K8S_PHASES, prepare=wrong_chart
    )  # no release yet: nothing may be installed with a chart helm cannot find
    found = [f for _, _, f in outcome.findings if f.check == "T01.chart"]
    assert found and found[0].severity is Severity.FAIL
    assert "mirror/gpu-operator version v26.7.0" in found[0].message
    assert "repo mirror not found" in found[0].message  # helm's own words
    assert "registry.gpu_operator_chart" in found[0].remediation
    assert not lab.releases


async def test_the_default_chart_is_found(tmp_path):
    frontend = HeadlessFrontEnd(yes=True, out=io.StringIO())
    outcome, _ = await run_in_lab(tmp_path, frontend, phases=("gpu-operator",))
    found = [f for _, _, f in outcome.findings if f.check == "T01.chart"]
    assert found and found[0].severity is Severity.PASS, found
