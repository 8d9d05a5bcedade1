"""ECN (phase 12): DCQCN is turned on only when the site asks, and verify fails when the
site asks for it and the device has it off."""

from __future__ import annotations

import io

from frontend.headless import HeadlessFrontEnd
from tests.conftest import K8S_PHASES, run_in_lab
from wizard.model import Severity

UP_TO_ECN = (*K8S_PHASES, "qos", "ecn")
DCQCN = "/sys/kernel/config/irdma/irdma0/roce_dcqcn_enable"


def _ecn_on(lab):
    site = lab.site_path.read_text()
    lab.site_path.write_text(site + "qos: {ecn: true}\n")


async def test_ecn_is_enabled_and_verified_when_the_site_asks(tmp_path):
    frontend = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
    outcome, lab = await run_in_lab(tmp_path, frontend, phases=UP_TO_ECN, prepare=_ecn_on)
    ecn = [f for (s, _), fs in outcome.summary.findings.items() if s == "ecn.enable" for f in fs]
    assert [f.severity for f in ecn] == [Severity.PASS], ecn
    assert lab.hosts["gpu-b300-01"].configfs[DCQCN] == "1\n"
    # The boot script installed by qos.persist carries it too.
    boot = lab.hosts["gpu-b300-01"].files["/usr/local/sbin/gpu-node-wizard-roce-tos"]
    assert 'write_dcqcn "$dev"' in boot


async def test_verify_fails_when_dcqcn_is_off_although_the_site_asks(tmp_path):
    from simulator.lab import Lab
    from steps import build_plan
    from wizard.checkpoint import Checkpoint
    from wizard.engine import Engine
    from wizard.engine.runtime import StepRuntime
    from wizard.services import build_services
    from wizard.site import load_site

    async with Lab(tmp_path / "lab") as lab:
        _ecn_on(lab)
        site = load_site(lab.site_path)
        host = lab.hosts["gpu-b300-01"]
        host.configfs["/sys/kernel/config/irdma/irdma0/"] = ""
        host.configfs[DCQCN] = "0\n"  # a device registered again, or irdma reloaded
        services = build_services(site)
        try:
            with Checkpoint.open(tmp_path / "state", site) as checkpoint:
                engine = Engine(
                    site, build_plan(), checkpoint, HeadlessFrontEnd(out=io.StringIO()), services
                )
                step = build_plan().step("ecn.enable")
                ctx = StepRuntime(site, step, "gpu-b300-01", site.nodes[0], services, engine)
                findings = await step.verify(ctx)
        finally:
            await services.close()
    [finding] = findings
    assert finding.severity is Severity.FAIL and "not enabled" in finding.message
