"""Esc never decides (issue #28, point 2): in every question's dialog Esc steps back to the
run and the question waits for `d`; skipping is its own key, and skipping a step that later
steps build on asks first and names them."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from frontend.lab_session import open_lab
from frontend.tui.app import WizardApp
from frontend.tui.bridge import SET_ASIDE
from frontend.tui.failed import FailedStepScreen
from frontend.tui.modals import MaintenanceScreen, ManualScreen, ReviewScreen, RollbackScreen
from tests.test_tui import SIZE, ModalHost, maintenance_decision, screen_name, wait_for
from tests.test_tui_keys import failed_decision, manual_decision, rollback_decision
from wizard.checkpoint import Checkpoint
from wizard.events import Answer, Decision, DecisionKind
from wizard.model import StepState

NODE = "gpu-b300-01"


def review_decision() -> Decision:
    return Decision(DecisionKind.CONFIRM_APPLY, "irdma.enable", "irdma with RoCEv2", "gpu-1",
                    "load irdma")  # fmt: skip


DIALOGS = {
    "review": lambda: ReviewScreen(review_decision()),
    "manual": lambda: ManualScreen(manual_decision()),
    "rollback": lambda: RollbackScreen(rollback_decision()),
    "failed": lambda: FailedStepScreen(failed_decision()),
    "maintenance": lambda: MaintenanceScreen(maintenance_decision()),
}


@pytest.mark.parametrize("name", sorted(DIALOGS))
async def test_escape_in_a_question_answers_nothing(name):
    app = ModalHost(DIALOGS[name]())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
    assert app.return_value is SET_ASIDE, name


async def test_escape_sets_the_review_aside_d_brings_it_back_and_skip_asks_naming_what_it_blocks(
    tmp_path,
):
    state = tmp_path / "state"
    holder = {}

    async def opener():
        holder["session"] = await open_lab(("irdma-not-loaded",), 1, state)
        return holder["session"]

    app = WizardApp(opener, auto_start=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: screen_name(app) == "ReviewScreen")
        assert app.screen.decision.step == "irdma.enable"
        await pilot.press("escape")  # back to the run: nothing decided
        await wait_for(pilot, lambda: screen_name(app) == "MainScreen")
        waiting = app.main_screen.query_one("#waiting", Static)
        assert waiting.display
        assert "irdma.enable on gpu-b300-01" in str(waiting.content)
        assert "d: answer it" in str(waiting.content)
        from tests.test_tui_palette import titles

        assert "Answer the waiting question" in titles(app, app.screen)
        await pilot.pause(0.5)
        assert ("irdma.enable", NODE) not in app.main_screen.states or app.main_screen.states[
            ("irdma.enable", NODE)
        ] is StepState.RUNNING  # still waiting: not skipped
        await pilot.press("d")  # the same question again
        await wait_for(pilot, lambda: screen_name(app) == "ReviewScreen")
        assert app.screen.decision.step == "irdma.enable"
        assert not app.main_screen.query_one("#waiting", Static).display
        await pilot.press("s")  # skip: later steps build on irdma.enable, so it asks first
        await wait_for(pilot, lambda: screen_name(app) == "ConfirmSkipScreen")
        said = str(app.screen.query_one("#blocked", Static).content)
        assert "irdma.verify" in said and "nccl.all-reduce" in said and "(T02) cannot pass" in said
        await pilot.press("escape")  # back to the review, still nothing decided
        await wait_for(pilot, lambda: screen_name(app) == "ReviewScreen")
        await pilot.press("s")
        await wait_for(pilot, lambda: screen_name(app) == "ConfirmSkipScreen")
        await pilot.press("y")
        await wait_for(pilot, lambda: screen_name(app) in ("MainScreen", "FailedStepScreen"))
        await wait_for(
            pilot, lambda: app.main_screen.states.get(("irdma.enable", NODE)) is StepState.SKIPPED
        )
        assert [d.step for d in app.decisions][:1] == ["irdma.enable"]
        await pilot.press("q")
    with Checkpoint.open(state, holder["session"].site) as checkpoint:
        assert checkpoint.step_state("irdma.enable", NODE) is StepState.SKIPPED


async def test_a_skip_that_nothing_builds_on_is_not_asked_twice():
    decision = Decision(DecisionKind.CONFIRM_APPLY, "ecn.enable", "ECN", "gpu-1", "x")
    app = ModalHost(ReviewScreen(decision))
    app.plan = __import__("steps").build_plan()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("s")
        await pilot.pause()
    assert app.return_value.answer is Answer.SKIP


@pytest.mark.parametrize("size", [SIZE, (80, 24)])
async def test_enter_in_a_review_decides_nothing_skip_is_its_own_key(size):
    """screen-r3 N1: Skip had the focus, so a reflex Enter (the start screen's key) skipped
    the step. The diffs have the focus now: Enter scrolls nothing away and answers nothing."""
    app = ModalHost(ReviewScreen(review_decision()))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        assert app.focused is app.screen.query_one("#diffs")
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, ReviewScreen) and app.return_value is None
        await pilot.press("s")
        await pilot.pause()
    assert app.return_value.answer is Answer.SKIP
