"""The join's check of each node's runtime (the Node's containerRuntimeVersion) holds the
GPU Operator's minimum as the preflight does: exactly containerd 2.0.0 passes, 1.7 fails
(issue #23: a `<=` for `<` here broke no test)."""

from __future__ import annotations

import pytest

from steps.join import evaluate_joined
from tests.conftest import with_nodes
from wizard.model import Severity
from wizard.probe import Report
from wizard.site import load_site


def _node(name: str, runtime: str) -> dict:
    return {
        "metadata": {"name": name},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"kubeletVersion": "v1.33.13", "containerRuntimeVersion": runtime},
        },
    }


@pytest.mark.parametrize(
    ("runtime", "severity"),
    [
        ("containerd://2.0.0", Severity.PASS),
        ("containerd://2.1.4", Severity.PASS),
        ("containerd://1.7.27", Severity.FAIL),
        ("cri-o://1.33.0", Severity.FAIL),
    ],
)
def test_the_joined_nodes_runtime_is_judged_at_the_boundary(tmp_path, runtime, severity):
    (tmp_path / "site.yaml").write_text(with_nodes(1))
    site = load_site(tmp_path / "site.yaml")
    name = site.nodes[0].name
    report = Report("T00")
    evaluate_joined(site, {name: _node(name, runtime)}, report)
    verdict = {f.check: f.severity for f in report.findings}
    if severity is Severity.PASS:
        assert f"T00.runtime-{name}" not in verdict, verdict
        assert verdict[f"T00.joined-{name}"] is Severity.PASS, verdict
    else:
        assert verdict[f"T00.runtime-{name}"] is Severity.FAIL, verdict
