"""The engine over a simulated world: order, decisions, blocking, waivers and resume."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conftest import fleet_site, with_nodes
from tests.engine_world import ScriptedFrontEnd, World, WorldCheck, WorldMaintenance, world_plan
from wizard.checkpoint import Checkpoint, read_state
from wizard.engine import Engine
from wizard.events import Answer, DecisionKind, Notice, Reply, StepFinished
from wizard.model import Finding, Severity, StepState
from wizard.plan import Phase, Plan, Scope
from wizard.site import load_site

TWO_NODES = with_nodes(2)


@pytest.fixture
def two_node_site(tmp_path: Path) -> Path:
    path = tmp_path / "site.yaml"
    path.write_text(TWO_NODES)
    return path


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path / "world.json")


def run(site_path: Path, state_dir: Path, world: World, frontend=None, **kwargs):
    site = load_site(site_path)
    frontend = frontend or ScriptedFrontEnd()
    only = {k: kwargs.pop(k) for k in ("phase", "step") if k in kwargs}
    with Checkpoint.open(state_dir, site) as checkpoint:
        engine = Engine(site, world_plan(world), checkpoint, frontend, **kwargs)
        summary = asyncio.run(engine.run(**only))
    # What the run left on disk (the checkpoint flushes on close).
    return summary, frontend, read_state(checkpoint.directory)


def test_whole_plan_passes_and_asks_before_every_change(two_node_site, state_dir, world):
    summary, frontend, state = run(two_node_site, state_dir, world)
    assert summary.ok, summary
    applies = world.load()["applies"]
    assert applies == {
        "two.apply@gpu-1": 1,
        "two.apply@gpu-2": 1,
        "two.cluster@cluster": 1,
        "three.qos@gpu-1": 1,
        "three.qos@gpu-2": 1,
    }
    confirms = [d for d in frontend.decisions if d.kind is DecisionKind.CONFIRM_APPLY]
    assert {(d.step, d.target) for d in confirms} == {
        ("two.apply", "gpu-1"),
        ("two.apply", "gpu-2"),
        ("two.cluster", "cluster"),
    }  # fmt: skip  (a maintenance change is confirmed once, at its window gate)
    # The diff shown is the artifact against the (absent) live file.
    diff = next(d for d in confirms if d.step == "two.apply").diffs[0]
    assert diff.changed and "+two.apply for gpu-" in diff.diff and "(absent)" in diff.diff
    windows = [d for d in frontend.decisions if d.kind is DecisionKind.MAINTENANCE_WINDOW]
    assert {d.confirm_text for d in windows} == {"gpu-1", "gpu-2"}
    assert all(d.rollback == "undo it" for d in windows)
    # The one maintenance screen carries the diff too.
    assert all(d.diffs and d.diffs[0].changed for d in windows)
    assert state["steps"]["four.check"]["gpu-2"]["state"] == "done"


def test_nothing_is_applied_when_the_operator_skips(two_node_site, state_dir, world):
    frontend = ScriptedFrontEnd({"confirm-apply:two.apply@gpu-1": Reply(Answer.SKIP)})
    _summary, _, state = run(two_node_site, state_dir, world, frontend)
    assert "two.apply@gpu-1" not in world.load()["applies"]
    assert state["steps"]["two.apply"]["gpu-1"]["state"] == "skipped"
    assert world.load()["applies"]["two.apply@gpu-2"] == 1


def test_abort_stops_the_run_and_leaves_no_running_step(two_node_site, state_dir, world):
    frontend = ScriptedFrontEnd({"confirm-apply": Reply(Answer.ABORT)})
    summary, _, state = run(two_node_site, state_dir, world, frontend)
    assert summary.stopped and "aborted" in summary.stopped
    assert world.load()["applies"] == {}
    for targets in state["steps"].values():
        assert all(record["state"] != "running" for record in targets.values())


def test_wrong_node_name_refuses_the_maintenance_window(two_node_site, state_dir, world):
    frontend = ScriptedFrontEnd({"maintenance-window": Reply(Answer.PROCEED, typed="gpu-9")})
    _summary, frontend, state = run(two_node_site, state_dir, world, frontend)
    assert "three.qos@gpu-1" not in world.load()["applies"]
    assert state["steps"]["three.qos"]["gpu-1"]["state"] == "skipped"
    assert any(isinstance(e, Notice) and "expected 'gpu-1'" in e.message for e in frontend.events)


def test_a_failed_phase_stops_the_flow_and_blocks_later_steps(two_node_site, state_dir, world):
    world.update(fail=["one.check@gpu-2"])
    summary, _, state = run(two_node_site, state_dir, world)
    assert not summary.ok and "phase 1" in summary.stopped
    assert state["steps"]["one.check"]["gpu-2"]["state"] == "failed"
    assert "two.apply" not in state["steps"]  # the flow stopped after phase 1
    # Like kubeadm phases, a phase run on its own enforces only explicit prerequisites.
    summary, _, state = run(two_node_site, state_dir, world, phase="two")
    assert state["steps"]["two.apply"]["gpu-2"]["state"] == "done"


def test_blocked_step_names_its_prerequisite(two_node_site, state_dir, world, tmp_path):
    blocked = WorldCheck("later.check", world, requires=("two.apply",))
    plan = Plan((Phase("later", 1, "Later", "", (blocked,)),))
    site = load_site(two_node_site)
    with Checkpoint.open(state_dir, site) as checkpoint:
        full = Plan(world_plan(world).phases + plan.phases)
        engine = Engine(site, full, checkpoint, ScriptedFrontEnd())
        asyncio.run(engine.run(step="later.check"))
        record = checkpoint.record("later.check", "gpu-1")
    assert record.state is StepState.BLOCKED
    assert record.message == "requires two.apply (apply two.apply), which is pending"


def test_waiver_turns_a_failure_into_a_recorded_warning(two_node_site, state_dir, world):
    world.update(fail=["one.check@gpu-1"])
    summary, _frontend, state = run(
        two_node_site, state_dir, world, waivers={"one.check.ok": "lab NIC, accepted by ops"}
    )
    assert summary.ok
    finding = state["steps"]["one.check"]["gpu-1"]["findings"][0]
    assert finding["waived"] == "lab NIC, accepted by ops"
    assert state["waivers"][0]["check"] == "one.check.ok"
    assert state["waivers"][0]["reason"] == "lab NIC, accepted by ops"


def test_resume_does_not_reapply_completed_steps(two_node_site, state_dir, world):
    run(two_node_site, state_dir, world)
    before = dict(world.load()["applies"])
    summary, frontend, _ = run(two_node_site, state_dir, world)
    assert summary.ok
    assert world.load()["applies"] == before
    assert frontend.decisions == []
    assert all(
        e.message == "already done (checkpoint)"
        for e in frontend.events
        if isinstance(e, StepFinished)
    )


def test_interrupted_step_reverifies_before_acting(two_node_site, state_dir, world):
    site = load_site(two_node_site)
    # The change landed but the process died before recording it: state is still running.
    world.update(live={"two.apply@gpu-1": "two.apply for gpu-1\n"})
    with Checkpoint.open(state_dir, site) as checkpoint:
        for step in ("one.check",):
            for target in ("gpu-1", "gpu-2"):
                checkpoint.set_step(step, target, StepState.DONE)
        checkpoint.set_step("two.apply", "gpu-1", StepState.RUNNING)
    summary, _frontend, state = run(two_node_site, state_dir, world)
    assert summary.ok
    assert "two.apply@gpu-1" not in world.load()["applies"]  # verified, not re-applied
    assert state["steps"]["two.apply"]["gpu-1"]["message"] == "verified after interruption"
    assert world.load()["redundant"] == 0


def test_interrupted_step_whose_change_is_missing_is_offered_again(two_node_site, state_dir, world):
    site = load_site(two_node_site)
    with Checkpoint.open(state_dir, site) as checkpoint:
        for target in ("gpu-1", "gpu-2"):
            checkpoint.set_step("one.check", target, StepState.DONE)
        checkpoint.set_step("two.apply", "gpu-1", StepState.RUNNING)
    _summary, frontend, _ = run(two_node_site, state_dir, world)
    assert world.load()["applies"]["two.apply@gpu-1"] == 1
    assert any(d.step == "two.apply" and d.target == "gpu-1" for d in frontend.decisions)


def test_failed_step_is_offered_again(two_node_site, state_dir, world):
    world.update(fail=["four.check@gpu-1"])
    summary, _, _ = run(two_node_site, state_dir, world)
    assert not summary.ok
    world.update(fail=[])
    summary, _, state = run(two_node_site, state_dir, world)
    assert summary.ok and state["steps"]["four.check"]["gpu-1"]["state"] == "done"


def test_changed_site_resets_only_the_steps_that_read_it(two_node_site, state_dir, world):
    run(two_node_site, state_dir, world)
    two_node_site.write_text(
        TWO_NODES.replace(
            "ens5f1np1]}\n    rdma_ip: 192.168.50.2", "ens5f1np2]}\n    rdma_ip: 192.168.50.2"
        )
    )
    summary, frontend, _state = run(two_node_site, state_dir, world)
    assert summary.reset == [("two.apply", "gpu-2")]
    notice = next(
        e for e in frontend.events if isinstance(e, Notice) and "site file changed" in e.message
    )
    assert "nodes.gpu-2.bond" in notice.message
    # The reset step was verified again; its change was still in place, so no re-apply.
    assert world.load()["applies"]["two.apply@gpu-2"] == 1
    assert world.load()["redundant"] == 0


def test_node_steps_run_concurrently_within_the_bound(tmp_path, state_dir, world):
    site_path = tmp_path / "six.yaml"
    site_path.write_text(fleet_site(6, "six") + "max_parallel_nodes: 2\n")
    active = 0
    peak = 0

    class Slow(WorldCheck):
        async def verify(self, ctx):
            nonlocal active, peak
            active += 1
            peak = max(peak, active)
            await asyncio.sleep(0.02)
            active -= 1
            return await super().verify(ctx)

    plan = Plan((Phase("p", 1, "P", "", (Slow("p.slow", world),)),))
    site = load_site(site_path)
    with Checkpoint.open(state_dir, site) as checkpoint:
        asyncio.run(Engine(site, plan, checkpoint, ScriptedFrontEnd()).run())
    assert peak == 2


def test_cluster_scope_runs_once(two_node_site, state_dir, world):
    _, _, state = run(two_node_site, state_dir, world)
    assert list(state["steps"]["two.cluster"]) == ["cluster"]
    assert world_plan(world).step("two.cluster").scope is Scope.CLUSTER


def test_headless_front_end_stops_at_the_first_decision_and_names_the_flag(
    two_node_site, state_dir, world
):
    import io

    from frontend.headless import HeadlessFrontEnd
    from wizard.engine import DecisionRequired

    out = io.StringIO()
    with pytest.raises(DecisionRequired, match="--yes"):
        run(two_node_site, state_dir, world, HeadlessFrontEnd(out=out))
    assert world.load()["applies"] == {}
    with pytest.raises(DecisionRequired, match="--maintenance-window-open"):
        run(two_node_site, state_dir, world, HeadlessFrontEnd(yes=True, out=out))
    assert "three.qos@gpu-1" not in world.load()["applies"]
    summary, _, _ = run(
        two_node_site, state_dir, world, HeadlessFrontEnd(yes=True, window_open=True, out=out)
    )
    assert summary.ok
    assert "== 4. Fourth" in out.getvalue()


THREE_NODES = with_nodes(3)


def patch_maintenance(monkeypatch, broken_on: str | None = None) -> dict[str, int]:
    """Count the maintenance applies running at once (``peak``) and, with ``broken_on``,
    make the verification fail on that node."""
    active = {"now": 0, "peak": 0}
    original_apply, original_verify = WorldMaintenance.apply, WorldMaintenance.verify

    async def counting(self, ctx, changes):
        active["now"] += 1
        active["peak"] = max(active["peak"], active["now"])
        try:
            await original_apply(self, ctx, changes)
        finally:
            active["now"] -= 1

    async def verify(self, ctx):
        findings = await original_verify(self, ctx)
        if ctx.target == broken_on:
            return [Finding("T08.broken", "T08", Severity.FAIL, f"broken on {broken_on}")]
        return findings

    monkeypatch.setattr(WorldMaintenance, "apply", counting)
    monkeypatch.setattr(WorldMaintenance, "verify", verify)
    return active


def test_maintenance_rolls_one_node_at_a_time_with_a_window_each(
    tmp_path, state_dir, world, monkeypatch
):
    site = tmp_path / "three.yaml"
    site.write_text(THREE_NODES)
    world.update(delay=0.05)
    active = patch_maintenance(monkeypatch)
    summary, frontend, _ = run(site, state_dir, world)
    assert summary.ok
    assert active["peak"] == 1
    windows = [d.target for d in frontend.decisions if d.kind is DecisionKind.MAINTENANCE_WINDOW]
    assert windows == ["gpu-1", "gpu-2", "gpu-3"]


def test_a_failed_batch_stops_the_rollout(tmp_path, state_dir, world, monkeypatch):
    site = tmp_path / "three.yaml"
    site.write_text(THREE_NODES)
    patch_maintenance(monkeypatch, broken_on="gpu-1")
    _, _, state = run(site, state_dir, world)
    assert state["steps"]["three.qos"]["gpu-1"]["state"] == "failed"
    for node in ("gpu-2", "gpu-3"):
        assert state["steps"]["three.qos"][node]["state"] == "blocked"
        assert "rollout stopped" in state["steps"]["three.qos"][node]["message"]
    assert "three.qos@gpu-2" not in world.load()["applies"]


def test_percentage_batches_and_a_percentage_failure_limit(tmp_path, state_dir, world, monkeypatch):
    """67% of three nodes is a batch of two; 34% of three tolerates one failed node."""
    site = tmp_path / "three.yaml"
    site.write_text(THREE_NODES + "rollout: {maintenance_batch: 67%, max_failed_nodes: 34%}\n")
    world.update(delay=0.05)
    active = patch_maintenance(monkeypatch, broken_on="gpu-1")
    _, _, state = run(site, state_dir, world)
    assert active["peak"] == 2
    states = {
        node: state["steps"]["three.qos"][node]["state"] for node in ("gpu-1", "gpu-2", "gpu-3")
    }
    assert states == {"gpu-1": "failed", "gpu-2": "done", "gpu-3": "done"}  # one failure allowed


class SlowOperator(ScriptedFrontEnd):
    """Takes a moment to answer, as a person does: the other nodes queue up meanwhile."""

    async def decide(self, decision):
        await asyncio.sleep(0.05)
        return await super().decide(decision)


def test_an_approval_for_the_same_change_covers_other_nodes_only_when_it_is_the_same(
    tmp_path, state_dir, world
):
    site = tmp_path / "three.yaml"
    site.write_text(THREE_NODES)
    # gpu-3 already holds something else: its diff differs, so it is asked about.
    world.update(live={"two.apply@gpu-3": "someone's edit\n"})
    frontend = SlowOperator({"confirm-apply:two.apply@gpu-1": Reply(Answer.PROCEED_SAME)})
    summary, _, state = run(site, state_dir, world, frontend, phase="two")
    assert summary.ok
    asked = [d.target for d in frontend.decisions if d.step == "two.apply"]
    assert asked == ["gpu-1", "gpu-3"]  # gpu-2's change was the same as gpu-1's
    first = next(d for d in frontend.decisions if d.step == "two.apply")
    assert first.other_nodes == 2
    assert {n: state["steps"]["two.apply"][n]["state"] for n in ("gpu-1", "gpu-2", "gpu-3")} == {
        "gpu-1": "done", "gpu-2": "done", "gpu-3": "done"}  # fmt: skip
    notes = [e for e in frontend.events if isinstance(e, Notice) and e.target == "gpu-2"]
    assert any("same change as approved" in e.message for e in notes)


def test_maintenance_is_confirmed_on_every_node_even_after_apply_same(tmp_path, state_dir, world):
    site = tmp_path / "three.yaml"
    site.write_text(THREE_NODES)
    frontend = ScriptedFrontEnd(
        {
            "confirm-apply": Reply(Answer.PROCEED_SAME),
            "maintenance-window": Reply(Answer.PROCEED_SAME, typed=""),
        }
    )
    summary, _, _ = run(site, state_dir, world, frontend, phase="three")
    # "the same change" never stands for a window: without each node's name typed, none ran.
    assert [s for s in summary.results.values()] == [StepState.SKIPPED] * 3
    windows = [d for d in frontend.decisions if d.kind is DecisionKind.MAINTENANCE_WINDOW]
    assert [d.target for d in windows] == ["gpu-1", "gpu-2", "gpu-3"]
    assert all(d.other_nodes == 0 for d in windows)  # the TUI offers no "same change" there


def test_a_shared_read_is_made_once_per_step_run_for_the_whole_fan_out(tmp_path, state_dir, world):
    site_path = tmp_path / "three.yaml"
    site_path.write_text(THREE_NODES)
    reads = []

    async def cluster_nodes():
        reads.append(1)
        await asyncio.sleep(0.02)  # the other nodes ask while the first read is in flight
        return ["gpu-1", "gpu-2", "gpu-3"]

    seen = {}

    class NeedsTheClusterList(WorldCheck):
        async def verify(self, ctx):
            seen[ctx.target] = await ctx.shared("kube.nodes", cluster_nodes)
            return await super().verify(ctx)

    plan = Plan((Phase("p", 1, "P", "", (NeedsTheClusterList("p.list", world),)),))
    site = load_site(site_path)
    with Checkpoint.open(state_dir, site) as checkpoint:
        engine = Engine(site, plan, checkpoint, ScriptedFrontEnd())
        asyncio.run(engine.run())
        assert len(reads) == 1 and set(seen) == {"gpu-1", "gpu-2", "gpu-3"}
        asyncio.run(engine.run(step="p.list"))  # a new run of the step reads afresh
    assert len(reads) == 2


def test_compact_headless_output_groups_nodes_and_their_notes(tmp_path, state_dir, world):
    import io

    from frontend.headless import HeadlessFrontEnd

    site = tmp_path / "three.yaml"
    site.write_text(THREE_NODES)
    world.update(live={f"two.apply@gpu-{i}": f"two.apply for gpu-{i}\n" for i in (1, 2, 3)})
    out = io.StringIO()
    summary, _, _ = run(
        site, state_dir, world, HeadlessFrontEnd(out=out, yes=True, compact=True), phase="two"
    )
    assert summary.ok
    lines = out.getvalue().splitlines()
    assert "   note (gpu-1, gpu-2, gpu-3): two.apply: already in place, nothing to change" in lines
    assert "   two.apply: done on gpu-1, gpu-2, gpu-3" in lines
    assert not any(line.startswith("   gpu-") for line in lines)  # no line per node
