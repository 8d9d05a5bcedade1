"""The TUI's report is report.md's report (issue #28, point 6): the same verdicts from the
same checkpoint, the verdict line first, and it refreshes while the run goes on (after an
abort it showed T01 and T03 as "-" where `report` of the same checkpoint said pass and fail)."""

from __future__ import annotations

from textual.widgets import Static

from frontend.lab_session import open_lab
from frontend.tui.report import ReportScreen
from steps import build_plan
from tests.test_tui import SIZE, screen_name, wait_for
from wizard.report import checkpoint_report, verdict_line


async def test_the_tui_report_is_report_md_and_follows_the_run(tmp_path):
    from frontend.tui.app import WizardApp

    holder = {}

    async def opener():
        holder["session"] = await open_lab(("irdma-not-loaded",), 1, tmp_path / "state")
        return holder["session"]

    app = WizardApp(opener, auto_start=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: screen_name(app) == "MainScreen")
        await pilot.press("r")  # at once: little or nothing is recorded yet
        await wait_for(pilot, lambda: any(isinstance(x, ReportScreen) for x in app.screen_stack))
        report = next(x for x in app.screen_stack if isinstance(x, ReportScreen))
        await wait_for(pilot, lambda: screen_name(app) == "ReviewScreen", 60)  # irdma.enable
        session = holder["session"]

        def statuses() -> dict:
            return {g["gate"]: g["status"]
                    for g in checkpoint_report(session.state_dir, session.site, build_plan())["gates"]}  # fmt: skip

        # The run went on under the report: it read the checkpoint again and shows it.
        await wait_for(pilot, lambda: report.verdicts() == statuses(), 10)
        assert report.verdicts()["T00"] != "not run"
        await pilot.press("ctrl+x")  # abort the run: it asks first
        await wait_for(pilot, lambda: screen_name(app) == "ConfirmAbortScreen")
        await pilot.press("y")
        await wait_for(pilot, lambda: app.finished, 30)
        await pilot.pause(0.3)
        if screen_name(app) != "ReportScreen":
            await pilot.press("r")
        await wait_for(pilot, lambda: screen_name(app) == "ReportScreen")
        await pilot.pause(0.3)
        cli = checkpoint_report(session.state_dir, session.site, build_plan())
        assert cli is not None
        assert app.screen.verdicts() == {g["gate"]: g["status"] for g in cli["gates"]}
        shown = str(app.screen.query_one("#verdict-line", Static).content)
        assert shown == verdict_line(cli).replace("**", "")
        assert shown.startswith("Verdict: ")
        await pilot.press("q")
