"""The GPU Operator's namespace is the existing release's (#30 M4): at a site whose release
runs in another namespace (lab fault operator-other-namespace, nvidia-gpu-operator), the
pull secret, the pod waits and the verification act on that namespace, and nothing is
created in gpu-operator. (The exported runbook's lines: tests/test_operator_namespace_runbook.py.)"""

from __future__ import annotations

import io

from frontend.headless import HeadlessFrontEnd
from simulator.existing import OTHER_NAMESPACE
from tests.conftest import K8S_PHASES, run_in_lab


async def test_an_existing_release_in_another_namespace_is_used_everywhere(tmp_path):
    frontend = HeadlessFrontEnd(yes=True, out=io.StringIO())
    outcome, lab = await run_in_lab(
        tmp_path, frontend, "operator-other-namespace", phases=K8S_PHASES
    )
    assert list(lab.releases) == [f"{OTHER_NAMESPACE}/gpu-operator"]  # no second operator
    results = outcome.summary.results
    states = {
        key: state.value
        for key, state in results.items()
        if key[0].startswith(("registry.", "gpu-operator."))
    }
    assert states and all(v in ("done", "verified", "unchanged") for v in states.values()), states
    secret = lab.cluster.get("v1", "secrets", OTHER_NAMESPACE, "nexus-pull")
    assert secret is not None  # the operator's pods pull with it there
    assert lab.cluster.get("v1", "namespaces", "", "gpu-operator") is None
    assert lab.cluster.get("v1", "secrets", "gpu-operator", "nexus-pull") is None
    assert not [p for p in lab.cluster.list("v1", "pods", "gpu-operator")]
