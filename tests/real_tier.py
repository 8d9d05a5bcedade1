"""The real tier's shared parts: a lab served on the real control plane in its own
process, and the rule that CI runs this tier (a missing build fails there)."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from frontend.headless import HeadlessFrontEnd
from simulator.controlplane import build
from steps import build_plan
from tests.conftest import REPO
from wizard.checkpoint import Checkpoint
from wizard.engine import Engine
from wizard.engine.runtime import StepRuntime
from wizard.export import RUNBOOK, export
from wizard.model import Severity, StepState
from wizard.plan import CLUSTER, Scope
from wizard.services import build_services
from wizard.site import load_site

START_S = 300


def require_real() -> None:
    """Skip (fail under CI) without the built control plane. In .ci/run's embedded step
    (GNW_TIER=embedded) a test that gets here was not marked real_plane (tests/conftest.py
    is_real_plane): that is a mistake in the test, said as such."""
    if os.environ.get("GNW_TIER") == "embedded":
        pytest.fail(
            "this test needs the real control plane but is not marked real_plane: name its "
            "module test_real_*.py, parametrize control_plane='real', or use a *_real fixture"
        )
    reason = build.missing_reason()
    if reason is None:
        return
    if os.environ.get("CI") or os.environ.get("GNW_REQUIRE_REAL_CONTROL_PLANE"):
        pytest.fail(f"CI runs the real tier: {reason}")
    pytest.skip(reason)


class ServedLab:
    """`gpu-node-wizard lab --control-plane real --write-site SITE` in its own process."""

    def __init__(self, folder: Path, *extra: str) -> None:
        self.folder = folder
        self.site = folder / "site.yaml"
        argv = [sys.executable, "-m", "frontend.cli", "lab", "--control-plane", "real",
                "--write-site", str(self.site), *extra]  # fmt: skip
        self.process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
        )
        self.output: list[str] = []
        deadline = time.monotonic() + START_S
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            if line.startswith("try:") or time.monotonic() > deadline:
                break
        if not any(line.startswith("try:") for line in self.output):
            self.process.kill()
            _, err = self.process.communicate(timeout=30)
            raise AssertionError(f"the real lab did not start:\n{''.join(self.output)}\n{err}")
        self.kubeconfig = folder / "kubeconfig"
        self.helm = folder / "bin" / "helm"

    def children(self) -> list[int]:
        """The control plane's processes (the lab's process group of its children)."""
        out = subprocess.run(["ps", "-o", "pid=,ppid=", "-e"], capture_output=True, text=True)
        return [int(p) for p, pp in (line.split() for line in out.stdout.splitlines())
                if int(pp) == self.process.pid]  # fmt: skip

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


@pytest.fixture(scope="module")
def real_lab(tmp_path_factory):
    """One lab on the real control plane for a test module (it takes a while to start): the
    greenfield variant, a cluster built for the wizard, since these modules test the control
    plane's own behaviour (tests/test_brownfield_invariant.py runs the default lab on it)."""
    require_real()
    lab = ServedLab(tmp_path_factory.mktemp("real-lab"), "--fault", "greenfield")
    yield lab
    lab.stop()


def exported_real_lab(folder: Path, *lab_args: str):
    """A lab served on the real control plane (``lab_args``: its faults) and the export of
    its site: yields (lab, export folder, RUNBOOK.md's text), stops the lab after."""
    require_real()
    lab = ServedLab(folder, *lab_args)
    try:
        # Beside the lab's own folder, named after it: two such fixtures in one worker
        # (one basetemp) each export into their own empty folder.
        out = folder.with_name(f"{folder.name}-export")
        export(load_site(lab.site), build_plan(), out)
        yield lab, out, (out / RUNBOOK).read_text()
    finally:
        lab.stop()


def mpijob(name: str) -> dict:
    """An MPIJob of one worker on the lab's GPU node (both planes' MPI Operator launch it)."""
    on_node = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "kubernetes.io/hostname",
                                                     "operator": "In", "values": ["gpu-b300-01"]}]}]}}}  # fmt: skip
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": name},
            "spec": {"mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [{"name": "l", "image": "lab:1"}]}}},
                "Worker": {"replicas": 1, "template": {"spec": {"affinity": on_node,
                                                                "containers": [{"name": "w", "image": "lab:1"}]}}}}}}  # fmt: skip


async def verify_steps(site_path: Path, step_ids, state: Path) -> dict[tuple[str, str], list]:
    """Each step's own verify, in the order given, as the engine runs it: a cluster step
    once (keyed by CLUSTER), a node step on each GPU node of the site. What a step records
    for later steps (its ``provides``, e.g. gpu-operator.preflight's release) is kept in the
    checkpoint by the engine's own finish, so a step that ``needs`` it must come after its
    provider in ``step_ids``, as in the plan."""
    site = load_site(site_path)
    services = build_services(site)
    plan = build_plan()
    found = {}
    try:
        with Checkpoint.open(state, site) as checkpoint:
            engine = Engine(site, plan, checkpoint, HeadlessFrontEnd(out=io.StringIO()), services)
            for step_id in step_ids:
                step = plan.step(step_id)
                targets = (
                    [(CLUSTER, None)]
                    if step.scope == Scope.CLUSTER
                    else [(node.name, node) for node in site.nodes]
                )
                for target, node in targets:
                    ctx = StepRuntime(site, step, target, node, services, engine)
                    findings = await step.verify(ctx)
                    found[(step_id, target)] = findings
                    failed = any(f.severity is Severity.FAIL for f in findings)
                    engine.finish(ctx, StepState.FAILED if failed else StepState.DONE, findings)
    finally:
        await services.close()
    return found


def failures(found: dict) -> dict:
    """The failed findings of ``verify_steps`` by (step, node)."""
    return {
        key: [f"{f.check}: {f.message}" for f in findings if f.severity is Severity.FAIL]
        for key, findings in found.items()
        if any(f.severity is Severity.FAIL for f in findings)
    }
