"""From a failed step, without leaving the run: retry once the cause is fixed, or waive a
failed check with a typed reason (recorded as the CLI's --waive is), or leave it failed
(issue #19, "Findings you can work with"). A front end without anybody to ask (headless)
is never asked: its failure stands and the run stops after the phase, as before."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conftest import with_nodes
from tests.engine_world import ScriptedFrontEnd, World, world_plan
from wizard.checkpoint import Checkpoint, read_state
from wizard.engine import Engine
from wizard.events import Answer, DecisionKind, Reply
from wizard.model import Finding, Severity, StepState
from wizard.site import load_site


class Operator(ScriptedFrontEnd):
    """A front end that offers retries; ``on_failed`` answers each retry-failed decision
    (and may change the world first, as the operator fixing the cause would)."""

    offers_retry = True

    def __init__(self, on_failed) -> None:
        super().__init__()
        self.on_failed = on_failed

    async def decide(self, decision):
        if decision.kind is DecisionKind.RETRY_FAILED:
            self.decisions.append(decision)
            return self.on_failed(decision)
        return await super().decide(decision)


@pytest.fixture
def site_path(tmp_path: Path) -> Path:
    path = tmp_path / "site.yaml"
    path.write_text(with_nodes(2))
    return path


def run(site_path: Path, state_dir: Path, world: World, frontend):
    site = load_site(site_path)
    with Checkpoint.open(state_dir, site) as checkpoint:
        summary = asyncio.run(Engine(site, world_plan(world), checkpoint, frontend).run())
    # What the run left on disk (the checkpoint flushes on close).
    return summary, read_state(checkpoint.directory)


def retries(frontend: ScriptedFrontEnd):
    return [d for d in frontend.decisions if d.kind is DecisionKind.RETRY_FAILED]


def test_a_retry_after_the_fix_passes_and_the_run_goes_on(site_path, tmp_path):
    world = World(tmp_path / "world.json")
    world.update(fail=["one.check@gpu-1", "one.check@gpu-2"])

    def fixed_then_retry(decision):
        world.update(fail=[])  # the operator fixed the cause on both nodes
        return Reply(Answer.PROCEED)

    frontend = Operator(fixed_then_retry)
    summary, state = run(site_path, tmp_path / "state", world, frontend)
    asked = retries(frontend)
    assert len(asked) == 1  # one question for both failed nodes, not one per node
    assert asked[0].target == "gpu-1, gpu-2" or "2 nodes" in asked[0].target
    assert {f.check for f in asked[0].findings} == {"one.check.ok"}
    assert asked[0].waivable  # a read-only check's own verdict
    assert summary.ok and summary.stopped is None
    assert state["steps"]["one.check"]["gpu-1"]["state"] == "done"
    assert state["steps"]["four.check"]["gpu-2"]["state"] == "done"  # the run went on


def test_leaving_it_failed_stops_the_run_after_the_phase_as_before(site_path, tmp_path):
    world = World(tmp_path / "world.json")
    world.update(fail=["one.check@gpu-1"])
    frontend = Operator(lambda decision: Reply(Answer.SKIP))
    summary, state = run(site_path, tmp_path / "state", world, frontend)
    assert len(retries(frontend)) == 1
    assert summary.stopped and "phase 1" in summary.stopped
    assert state["steps"]["one.check"]["gpu-1"]["state"] == "failed"
    assert "two.apply" not in state["steps"]


def test_a_retry_that_fails_again_is_asked_again(site_path, tmp_path):
    world = World(tmp_path / "world.json")
    world.update(fail=["one.check@gpu-2"])
    answers = iter([Reply(Answer.PROCEED), Reply(Answer.PROCEED), Reply(Answer.SKIP)])
    frontend = Operator(lambda decision: next(answers))
    summary, _ = run(site_path, tmp_path / "state", world, frontend)
    asked = retries(frontend)
    assert len(asked) == 3
    assert all(d.target == "gpu-2" for d in asked)  # gpu-1 passed: it is not asked about
    assert summary.results[("one.check", "gpu-2")] is StepState.FAILED


def test_a_waiver_with_a_reason_is_recorded_and_the_check_is_judged_with_it(site_path, tmp_path):
    world = World(tmp_path / "world.json")
    world.update(fail=["one.check@gpu-1"])
    frontend = Operator(lambda decision: Reply(Answer.WAIVE, reason="lab NIC, accepted by ops"))
    summary, state = run(site_path, tmp_path / "state", world, frontend)
    assert summary.stopped is None
    record = state["steps"]["one.check"]["gpu-1"]
    assert record["state"] == "done"
    finding = next(f for f in record["findings"] if f["check"] == "one.check.ok")
    assert finding["severity"] == "fail" and finding["waived"] == "lab NIC, accepted by ops"
    (waiver,) = state["waivers"]
    assert waiver["check"] == "one.check.ok" and waiver["reason"] == "lab NIC, accepted by ops"
    assert waiver["by"] and waiver["at"]  # who and when, as --waive records it


def test_a_waiver_without_a_reason_is_refused_and_asked_again(site_path, tmp_path):
    world = World(tmp_path / "world.json")
    world.update(fail=["one.check@gpu-1"])
    answers = iter([Reply(Answer.WAIVE, reason="   "), Reply(Answer.SKIP)])
    frontend = Operator(lambda decision: next(answers))
    summary, state = run(site_path, tmp_path / "state", world, frontend)
    assert len(retries(frontend)) == 2
    assert state["waivers"] == []
    assert summary.results[("one.check", "gpu-1")] is StepState.FAILED
    notices = [getattr(e, "message", "") for e in frontend.events]
    assert any("a waiver needs a reason" in m for m in notices)


def test_a_failed_change_can_be_retried_but_not_waived(site_path, tmp_path):
    world = World(tmp_path / "world.json")
    plan = world_plan(world)
    step = plan.step("two.apply")

    async def never_in_place(ctx):  # the change does not take on gpu-1 until it is fixed
        data = world.load()
        broken = "two.apply@gpu-1" in data["fail"]
        return [
            Finding(
                "two.apply.in-place",
                "T02",
                Severity.FAIL if broken else Severity.PASS,
                "not in place" if broken else "in place",
            )
        ]

    step.verify = never_in_place  # type: ignore[method-assign]
    world.update(fail=["two.apply@gpu-1"])
    answers = iter([Reply(Answer.WAIVE, reason="looks fine to me"), Reply(Answer.SKIP)])
    frontend = Operator(lambda decision: next(answers))
    site = load_site(site_path)
    with Checkpoint.open(tmp_path / "state", site) as checkpoint:
        summary = asyncio.run(Engine(site, plan, checkpoint, frontend).run())
        waivers = checkpoint.waivers()
    asked = retries(frontend)
    assert asked and not asked[0].waivable  # a change's verification is not waivable
    assert waivers == ()
    assert summary.results[("two.apply", "gpu-1")] is StepState.FAILED


def test_an_unreachable_host_is_not_waivable(site_path, tmp_path):
    world = World(tmp_path / "world.json")
    plan = world_plan(world)

    async def unreachable(ctx):
        return [Finding("T00.reachable", "T00", Severity.FAIL, "no route to host")]

    plan.step("one.check").verify = unreachable  # type: ignore[method-assign]
    frontend = Operator(lambda decision: Reply(Answer.SKIP))
    site = load_site(site_path)
    with Checkpoint.open(tmp_path / "state", site) as checkpoint:
        asyncio.run(Engine(site, plan, checkpoint, frontend).run())
    assert retries(frontend) and not retries(frontend)[0].waivable


def test_a_front_end_that_does_not_offer_retries_is_never_asked(site_path, tmp_path):
    world = World(tmp_path / "world.json")
    world.update(fail=["one.check@gpu-1"])
    frontend = ScriptedFrontEnd()  # no offers_retry: headless and the CLI
    summary, _ = run(site_path, tmp_path / "state", world, frontend)
    assert not retries(frontend)
    assert summary.stopped


# -- the dialog --------------------------------------------------------------------------


async def answer_of(decision, *keys: str):
    from frontend.tui.failed import FailedStepScreen
    from tests.test_tui import ModalHost

    app = ModalHost(FailedStepScreen(decision))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert "T11.acs" in str(screen.query_one("#failing").content)  # the evidence is shown
        assert "ACSCtl: SrcValid+" in str(screen.query_one("#failing").content)
        for key in keys:
            await pilot.press(key)
            await pilot.pause()
    return app.return_value


async def test_the_dialog_retries_on_ctrl_r_and_leaves_it_failed_on_ctrl_l():
    from frontend.tui.bridge import SET_ASIDE
    from tests.test_tui_keys import failed_decision

    assert (await answer_of(failed_decision(), "ctrl+r")).answer is Answer.PROCEED
    assert (await answer_of(failed_decision(), "ctrl+l")).answer is Answer.SKIP
    assert await answer_of(failed_decision(), "escape") is SET_ASIDE  # Esc never decides
    # Not waivable: Retry has the focus, and r answers too.
    assert (await answer_of(failed_decision(waivable=False), "enter")).answer is Answer.PROCEED
    assert (await answer_of(failed_decision(waivable=False), "r")).answer is Answer.PROCEED


async def test_typing_goes_into_the_reason_and_enter_waives_with_it():
    """Typed into a focused button, "lab rack" pressed r and retried (a new user's review):
    the reason box has the focus, so letters are the reason, never a key's action."""
    from tests.test_tui_keys import failed_decision

    reply = await answer_of(failed_decision(), *"lab rack", "enter")
    assert reply.answer is Answer.WAIVE and reply.reason == "lab rack"


async def test_enter_without_a_reason_waives_nothing():
    from frontend.tui.failed import FailedStepScreen
    from tests.test_tui import ModalHost
    from tests.test_tui_keys import failed_decision

    app = ModalHost(FailedStepScreen(failed_decision()))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert "type the reason" in str(app.screen.query_one("#waive-error").content)
        assert app.return_value is None  # still open


async def test_a_dialog_for_checks_that_cannot_be_waived_has_no_waiver():
    from frontend.tui.failed import FailedStepScreen
    from tests.test_tui import ModalHost
    from tests.test_tui_keys import failed_decision

    app = ModalHost(FailedStepScreen(failed_decision(waivable=False)))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert not app.screen.query("#reason") and not app.screen.query("#waive")
        await pilot.press("w")
        await pilot.pause()
        assert "cannot be waived" in str(app.screen.query_one("#waive-error").content)
        assert app.return_value is None  # still open: nothing was answered
