"""Identity and boundaries: a Node deleted and joined again (a new Node UID) resets that
node's results from the join phase on, and containerd's ">= 2.0" is judged at 2.0 itself."""

from __future__ import annotations

import copy
import io

import pytest

from frontend.headless import HeadlessFrontEnd
from steps.preflight import evaluate_containerd
from tests.conftest import K8S_PHASES, MINIMAL_SITE
from wizard.facts import parse
from wizard.model import Severity
from wizard.probe import Probe, Report
from wizard.site import parse_site
from wizard.transports.base import CommandResult

NODE = "gpu-b300-01"


async def test_a_node_deleted_and_joined_again_resets_its_results(tmp_path):
    from frontend.runner import run_engine
    from simulator.lab import Lab
    from steps import build_plan
    from wizard.site import load_site

    plan = build_plan()
    only = [s.id for p in plan.phases if p.id in K8S_PHASES for s in p.steps]
    join = next(p for p in plan.phases if p.id == "join")
    lab = Lab(tmp_path / "lab")
    await lab.start()
    try:
        site = load_site(lab.site_path)

        def frontend():
            return HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())

        first = await run_engine(site, plan, tmp_path / "state", frontend(), only=only)
        assert first.exit_code == 0
        again = await run_engine(site, plan, tmp_path / "state", frontend(), only=only)
        assert again.summary.reset == []  # the same Node object: nothing is forgotten
        old = lab.cluster.delete("v1", "nodes", "", NODE)
        rejoined = copy.deepcopy(old)
        del rejoined["metadata"]["uid"]  # the API server gives a new object a new UID
        lab.cluster.put("v1", "nodes", rejoined)
        assert lab.cluster.node(NODE)["metadata"]["uid"] != old["metadata"]["uid"]
        third = await run_engine(site, plan, tmp_path / "state", frontend(), only=only)
    finally:
        await lab.stop()
    reset = {step for step, target in third.summary.reset if target == NODE}
    later = {s.id for p in plan.phases if p.id in K8S_PHASES and p.number >= join.number
             for s in p.steps if s.scope.value == "node"}  # fmt: skip
    earlier = {s.id for p in plan.phases if p.id in K8S_PHASES and p.number < join.number
               for s in p.steps}  # fmt: skip
    assert later and later <= reset, later - reset
    assert not reset & earlier  # the host's own results still hold
    assert third.exit_code == 0


def _containerd(version_line: str) -> Severity:
    site = parse_site(MINIMAL_SITE)
    report = Report("T00")
    fact = parse("containerd-version", version_line)
    result = CommandResult("n", "containerd --version", 0, version_line + "\n", "")
    evaluate_containerd(site, fact, report, Probe("containerd --version", result))
    return report.findings[0].severity


@pytest.mark.parametrize(
    ("line", "severity"),
    [
        (
            "containerd github.com/containerd/containerd/v2 v2.0.0 207ad711eabd375a01713109a8a197d197ff6542",
            Severity.PASS,
        ),
        ("containerd containerd.io 2.0.0 207ad711eabd375a01713109a8a197d197ff6542", Severity.PASS),
        (
            "containerd github.com/containerd/containerd v1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da",
            Severity.FAIL,
        ),
        (
            "containerd github.com/containerd/containerd v1.7.99 05044ec0a9a75232cad458027ca83437aae3f4da",
            Severity.FAIL,
        ),
        (
            "containerd github.com/containerd/containerd/v2 v2.1.4 75cb2b7193e4e490e9fbdc236c0e811ccaba3376",
            Severity.PASS,
        ),
    ],
)
def test_containerd_is_judged_at_the_boundary(line, severity):
    """Exactly 2.0.0 passes (GPU Operator 26.7: containerd >= 2.0); 1.7.x fails. A '>' for
    '>=' fails the first case."""
    assert _containerd(line) is severity


async def test_the_lab_node_on_containerd_2_0_0_passes_preflight(tmp_path):
    from tests.test_lab_checks import by_check, check_lab

    outcome = await check_lab(tmp_path, "containerd-2.0.0")
    finding = by_check(outcome)["T00.containerd-version"][0][1]
    assert finding.severity is Severity.PASS and "2.0.0" in finding.message
