"""Issue #28, point 9: a retry says it is one (attempt count), the TUI exits like a
headless run (1 after a stopped run, with the verdict line), not 0 and silent."""

from __future__ import annotations

from textual.widgets import Label

from frontend.lab_session import open_lab
from frontend.tui.failed import FailedStepScreen
from tests.test_tui import SIZE, ModalHost, run_to_end, screen_name, wait_for
from tests.test_tui_keys import failed_decision


async def test_a_failed_retry_says_which_attempt_it_is_and_retrying_says_so():
    app = ModalHost(FailedStepScreen(failed_decision(), attempt=2))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await pilot.pause()
        title = str(app.screen.query_one(".dialog-title", Label).content)
        assert title.endswith("failed again, attempt 2"), title
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert any("(attempt 3)" in n.message for n in app._notifications)
    first = FailedStepScreen(failed_decision())
    assert first.attempt == 1


async def test_the_tui_exits_1_after_a_stopped_run_and_says_why_with_the_verdict(tmp_path):
    from frontend.tui.app import WizardApp

    app = WizardApp(lambda: open_lab(("containerd-1.7",), 1, tmp_path / "state"), auto_start=True)
    async with app.run_test(size=SIZE) as pilot:
        await run_to_end(pilot, app, 60)
        await wait_for(pilot, lambda: screen_name(app) == "MainScreen")
        await pilot.press("q")
        await pilot.pause(0.3)
    assert app.return_value == 1
    assert app.exit_message.startswith("gpu-node-wizard: the run stopped: phase 1")
    assert "Verdict: not ready" in app.exit_message and "T00" in app.exit_message


async def test_leaving_mid_run_says_the_checkpoint_keeps_it(tmp_path):
    from frontend.tui.app import WizardApp

    app = WizardApp(lambda: open_lab(("irdma-not-loaded",), 1, tmp_path / "state"),
                    auto_start=True)  # fmt: skip
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: screen_name(app) == "ReviewScreen")
        await pilot.press("q")
        await pilot.pause(0.3)
    assert app.return_value == 0
    assert "run again to resume" in app.exit_message


async def test_q_mid_step_asks_first_as_ctrl_c_does_and_not_at_a_question():
    from frontend.tui.app import TuiFrontEnd
    from tests.test_tui_keys import IdleApp, show

    app = IdleApp()
    async with app.run_test(size=SIZE) as pilot:
        await show(app, pilot, "main")
        app.frontend = TuiFrontEnd(app.main(), None, [])
        app.frontend.running = {"preflight.host": ["gpu-1"]}
        await pilot.press("q")
        await wait_for(pilot, lambda: screen_name(app) == "QuitScreen", 5)
        assert "A step is running" in str(app.screen.query_one(".dialog-title", Label).content)
        assert "gpu-1: preflight.host is running" in str(
            app.screen.query_one("#in-flight-nodes").content
        )
        await pilot.press("escape")  # Stay
        await wait_for(pilot, lambda: screen_name(app) == "MainScreen", 5)
        app.frontend.deciding = 1  # at a question nothing runs: q leaves at once
        await pilot.press("q")
        await pilot.pause(0.3)
    assert app.return_value == 0


async def test_leaving_mid_run_names_a_node_left_cordoned(monkeypatch):
    """Nothing else is on the terminal once the TUI is gone: a cordoned node is said there."""
    from types import SimpleNamespace

    import frontend.tui.app
    from tests.test_tui_keys import IdleApp, show
    from wizard.status import Cordon

    cordon = Cordon("gpu-1", "qos.apply", "its change failed to verify", "01:27:51")
    monkeypatch.setattr(frontend.tui.app, "_cordons", lambda session, plan: [cordon])
    monkeypatch.setattr(frontend.tui.app, "_in_flight_lines", lambda session: [])
    app = IdleApp()
    async with app.run_test(size=SIZE) as pilot:
        await show(app, pilot, "main")
        app.session = SimpleNamespace()
        code, said = app.exit_summary()
    assert code == 0
    assert said.splitlines()[1:] == [
        "gpu-1 is cordoned (by qos.apply, since 01:27:51): its change failed to verify",
        f"  to uncordon: {cordon.remedy}",
    ]


async def test_notices_never_cover_the_command_palettes_search_box():
    """Notices sit at the top right (off the dialogs' buttons), but over the palette that is
    its search box (seen at 80x24): while the palette is open they go to the bottom."""
    from textual.widgets._toast import ToastRack

    from tests.test_tui_keys import IdleApp, show

    app = IdleApp()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await show(app, pilot, "main")
        app.notify("The run stopped: phase 11 (RoCE QoS (maintenance window)) did not pass")
        await pilot.pause(0.2)
        assert app.screen.query_one(ToastRack).styles.dock == "top"
        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "CommandPalette", 5)
        assert app.screen.query_one(ToastRack).styles.dock == "bottom"
