"""The quick-start demo keeps its results while its TUI is open (issue #28, point 1): after a
demo without --state-dir, `m` said "Nothing measured yet" and the palette's report said "no
checkpoint to report from yet": the temporary state was deleted when the run ended."""

from __future__ import annotations

from frontend import demo
from frontend.lab_session import open_lab
from frontend.tui.app import WizardApp
from tests.test_tui import SIZE, run_to_end, screen_name, wait_for
from wizard.checkpoint import site_state_dir


async def test_the_demo_state_outlives_the_run_and_goes_with_the_tui(monkeypatch, capsys):
    holder: dict = {}

    async def opener():
        holder["session"] = await open_lab(("containerd-1.7",), 1, None)  # a temporary state
        return holder["session"]

    app = WizardApp(opener, auto_start=True)
    async with app.run_test(size=SIZE) as pilot:
        await run_to_end(pilot, app, 60)  # stops after phase 1: containerd 1.7
        await pilot.pause(0.5)
        session = holder["session"]
        state = site_state_dir(session.state_dir, session.site) / "state.json"
        assert state.exists(), "the run ended and its checkpoint went with the lab"
        # Its failed step was left failed: the lab stays up for a retry from the palette
        # (tests/test_tui_left_failed.py) and stops with the TUI (below).
        assert (session.temporary_state / "lab").exists()
        while screen_name(app) != "MainScreen":
            await pilot.press("escape")
            await pilot.pause(0.1)
        await pilot.press("r")
        await wait_for(pilot, lambda: screen_name(app) == "ReportScreen")
        assert app.screen.verdicts()["T00"] == "fail"  # read from the checkpoint after the run
        assert app.screen.load is not None
        await pilot.press("q")
    assert not (session.temporary_state / "lab").exists()  # the lab itself is stopped
    assert session.discard() is None
    assert not session.temporary_state.exists()


def test_run_demo_tui_removes_the_temporary_state_on_exit_and_says_so(monkeypatch, capsys):
    import frontend.tui.app

    seen = {}

    def fake_run_tui(opener):
        import asyncio

        async def go():
            session = await opener()
            await session.close()
            seen["tmp"] = session.temporary_state
            assert seen["tmp"].exists()  # still there after the run, while the TUI is up
            return 0

        return asyncio.run(go())

    monkeypatch.setattr(frontend.tui.app, "run_tui", fake_run_tui)
    assert demo.run_demo_tui((), 1, None) == 0
    assert not seen["tmp"].exists()
    assert "temporary state went with the TUI" in capsys.readouterr().out
