"""`run SITE --redo STEP[@NODE]`: a skip is kept on resume, and --redo is the way back to
it without starting over (issue #19: a skipped maintenance window could only be undone by
redoing every phase). What was skipped because of it runs again after it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conftest import run_cli, with_nodes
from tests.engine_world import ScriptedFrontEnd, World, WorldCheck, WorldMaintenance
from wizard.checkpoint import Checkpoint
from wizard.engine import Engine
from wizard.errors import UsageError
from wizard.events import Answer, Reply
from wizard.model import StepState
from wizard.plan import Phase, Plan
from wizard.redo import Redo, forget_for_redo, parse_redo
from wizard.result_keys import ResultKey
from wizard.site import load_site

QOS = ResultKey("qos.apply", "qos", str)


class QosWindow(WorldMaintenance):
    """A maintenance change that provides what it verified (as qos.apply does)."""

    provides = (QOS,)

    async def verify(self, ctx):
        findings = await super().verify(ctx)
        ctx.provide(QOS, "verified")
        return findings


def plan_of(world: World) -> Plan:
    return Plan(
        (
            Phase("one", 1, "First", "checks", (WorldCheck("one.check", world),)),
            Phase("qos", 2, "QoS", "maintenance", (QosWindow("qos.apply", world),)),
            Phase("after", 3, "After", "uses the QoS",
                  (WorldCheck("qos.measure", world, needs=(QOS,)),)),
        )
    )  # fmt: skip


@pytest.fixture
def setup(tmp_path: Path):
    site_path = tmp_path / "site.yaml"
    site_path.write_text(with_nodes(2))
    world = World(tmp_path / "world.json")
    return load_site(site_path), plan_of(world), tmp_path / "state", world, site_path


def run(site, plan, state_dir, frontend):
    with Checkpoint.open(state_dir, site) as checkpoint:
        return asyncio.run(Engine(site, plan, checkpoint, frontend).run())


def test_redo_brings_back_a_skipped_window_and_what_was_skipped_with_it(setup):
    site, plan, state_dir, world, _ = setup
    shut = ScriptedFrontEnd({"maintenance-window:qos.apply@gpu-1": Reply(Answer.SKIP)})
    first = run(site, plan, state_dir, shut)
    assert first.results[("qos.apply", "gpu-1")] is StepState.SKIPPED
    assert first.results[("qos.measure", "gpu-1")] is StepState.SKIPPED  # built on the skip
    # A plain resume keeps the skip: the window is not asked again.
    again = ScriptedFrontEnd()
    run(site, plan, state_dir, again)
    assert not [d for d in again.decisions if d.target == "gpu-1"]
    with Checkpoint.open(state_dir, site) as checkpoint:
        forgotten = forget_for_redo(
            checkpoint, plan, site, parse_redo("qos.apply@gpu-1", plan, site)
        )
        assert forgotten == ["qos.apply@gpu-1", "qos.measure@gpu-1"]
        assert checkpoint.step_state("qos.apply", "gpu-2") is StepState.DONE  # untouched
    opened = ScriptedFrontEnd()
    summary = run(site, plan, state_dir, opened)
    assert [(d.kind.value, d.target) for d in opened.decisions] == [("maintenance-window", "gpu-1")]
    assert summary.results[("qos.apply", "gpu-1")] is StepState.DONE
    assert summary.results[("qos.measure", "gpu-1")] is StepState.DONE
    assert world.load()["applies"] == {"qos.apply@gpu-2": 1, "qos.apply@gpu-1": 1}


def test_redo_refuses_a_change_whose_maintenance_is_in_flight(setup):
    site, plan, state_dir, _, _ = setup
    with Checkpoint.open(state_dir, site) as checkpoint:
        checkpoint.set_step("qos.apply", "gpu-1", StepState.RUNNING,
                            extra={"maintenance": {"stage": "applying", "capture": {}}})  # fmt: skip
        with pytest.raises(UsageError, match="in flight"):
            forget_for_redo(checkpoint, plan, site, Redo("qos.apply", "gpu-1"))
        assert checkpoint.step_state("qos.apply", "gpu-1") is StepState.RUNNING


def test_redo_names_what_is_wrong_with_its_argument(setup):
    site, plan, *_ = setup
    with pytest.raises(UsageError, match=r"no step 'qos\.aply'"):
        parse_redo("qos.aply", plan, site)
    with pytest.raises(UsageError, match="runs on gpu-1, gpu-2, not on 'gpu-9'"):
        parse_redo("qos.apply@gpu-9", plan, site)
    assert parse_redo("qos.apply", plan, site) == Redo("qos.apply", None)
    with pytest.raises(UsageError, match="a node after the @"):
        parse_redo("qos.apply@", plan, site)  # was every node


def test_the_cli_redo_says_what_it_forgot_and_refuses_bad_input(tmp_path, site_file):
    state = tmp_path / "state"
    bad = run_cli("run", str(site_file), "--headless", "--redo", "nope", "--state-dir", str(state))
    assert bad.returncode == 2 and "no step 'nope'" in bad.stderr
    assert "Traceback" not in bad.stderr
    both = run_cli("run", str(site_file), "--headless", "--redo", "qos.apply", "--start-over",
                   "--state-dir", str(state))  # fmt: skip
    assert both.returncode == 2 and "give one" in both.stderr
    site = load_site(site_file)
    with Checkpoint.open(state, site) as checkpoint:
        checkpoint.set_step("qos.apply", "gpu-1", StepState.SKIPPED, message="window not confirmed")
    # The run itself fails to reach the site's made-up hosts; the redo happened first.
    done = run_cli("run", str(site_file), "--headless", "--redo", "qos.apply@gpu-1",
                   "--phase", "preflight", "--state-dir", str(state))  # fmt: skip
    assert "--redo qos.apply@gpu-1: qos.apply@gpu-1" in done.stdout
    with Checkpoint.open(state, site) as checkpoint:
        assert checkpoint.step_state("qos.apply", "gpu-1") is StepState.PENDING
