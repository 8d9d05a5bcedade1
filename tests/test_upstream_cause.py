"""A failure downstream of a skipped or failed step names that step first (issue #28,
point 4): with the labels skipped the RDMA plugin failed with "does not advertise
rdma/e810" and a fix that pointed at NIC and driver selectors, not at the skipped label
its DaemonSet selects on."""

from __future__ import annotations

import io

from frontend.headless import HeadlessFrontEnd
from steps import build_plan
from tests.conftest import run_in_lab
from tests.test_k8s_phases import K8S_PHASES
from wizard.events import Answer, DecisionKind, Reply

NODE = "gpu-b300-01"


class LabelsSkipped(HeadlessFrontEnd):
    async def decide(self, decision):
        if decision.kind is DecisionKind.CONFIRM_APPLY and decision.step == "join.labels":
            return Reply(Answer.SKIP)
        return await super().decide(decision)


def test_the_rdma_plugin_builds_on_the_labels_its_daemonset_selects_on():
    plan = build_plan()
    assert "join.labels" in [s.id for s in plan.upstream("rdma-plugin.install")]
    assert "rdma-plugin.install" in [s.id for s in plan.dependents("join.labels")]


async def test_skipped_labels_are_named_first_in_the_rdma_plugin_failure(tmp_path):
    frontend = LabelsSkipped(yes=True, window_open=True, out=io.StringIO())
    outcome, _lab = await run_in_lab(tmp_path, frontend, phases=K8S_PHASES)
    assert outcome.summary.results[("join.labels", NODE)].value == "skipped"
    assert outcome.summary.results[("rdma-plugin.install", "cluster")].value == "failed"
    failing = [
        f
        for f in outcome.summary.findings[("rdma-plugin.install", "cluster")]
        if f.severity.value == "fail"
    ]
    assert failing
    for finding in failing:
        assert finding.message.startswith(
            f"join.labels (Node labels and taint) on {NODE} was skipped"
        ), finding.message
        assert finding.remediation.startswith(
            f"let join.labels run first: `run SITE --redo join.labels@{NODE}`"
        ), finding.remediation
