"""Issue #28 point 9: after "Leave failed" the run stops after its phase, and the palette
then offers to retry the step (the same dialog again says which attempt it is) or to waive
its failed checks with a typed reason; either runs again from the checkpoint, in the same
TUI (the demo's lab stays up for it, and goes with the TUI)."""

from __future__ import annotations

from frontend.lab_session import open_lab
from frontend.tui.app import WizardApp
from frontend.tui.commands import palette_commands
from tests.test_tui import SIZE, run_to_end, screen_name, wait_for


def titles(app) -> list[str]:
    return [c.title for c in palette_commands(app, app.screen)]


def command(app, title: str):
    return next(c for c in palette_commands(app, app.screen) if c.title == title)


async def test_a_step_left_failed_is_retried_from_the_palette_and_says_attempt_2(tmp_path):
    holder = {}

    async def opener():
        holder["session"] = await open_lab(("containerd-1.7",), 1, None)
        return holder["session"]

    app = WizardApp(opener, auto_start=True)
    async with app.run_test(size=SIZE) as pilot:
        asked = await run_to_end(pilot, app, 60)
        assert [d.step for d in asked] == ["preflight.containerd"]
        while screen_name(app) != "MainScreen":
            await pilot.press("escape")
            await pilot.pause(0.1)
        retry = "Retry preflight.containerd on gpu-b300-01"
        assert retry in titles(app)
        assert not any(t.startswith("Waive") for t in titles(app))  # a hard requirement
        session = holder["session"]
        assert (session.temporary_state / "lab").exists()  # up for the retry
        command(app, retry).callback()
        await wait_for(pilot, lambda: screen_name(app) == "FailedStepScreen", 60)
        title = str(app.screen.query_one(".dialog-title").content)
        assert title.endswith("failed again, attempt 2"), title
        assert retry not in titles(app)  # while the run goes on, the dialog has its own
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: app.finished, 60)
        assert retry in titles(app)
    assert not (session.temporary_state / "lab").exists()  # the lab went with the TUI
    session.discard()


async def test_a_check_left_failed_is_waived_from_the_palette_with_a_reason(tmp_path):
    app = WizardApp(lambda: open_lab(("gpu-missing",), 1, tmp_path / "state"), auto_start=True)
    async with app.run_test(size=SIZE) as pilot:
        asked = await run_to_end(pilot, app, 60)
        step, target = asked[0].step, asked[0].target
        while screen_name(app) != "MainScreen":
            await pilot.press("escape")
            await pilot.pause(0.1)
        command(app, f"Waive the failed checks of {step} on {target}").callback()
        await wait_for(pilot, lambda: screen_name(app) == "FailedStepScreen")
        await pilot.press(*"lab rack", "enter")

        def waived():
            return [f for s, t, f in app.main_screen.findings if (s, t) == (step, target)
                    and f.waived == "lab rack"]  # fmt: skip

        await wait_for(pilot, lambda: bool(waived()), 60)
        assert {f.check for f in waived()} == {f.check for f in asked[0].findings}
