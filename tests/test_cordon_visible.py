"""A node left cordoned is never silent (issue #28, point 3): with `--fault pfc-not-applied`
the change failed, was rolled back and the node stayed cordoned; only a log line cut at 76
columns said so. After a resume and a cancelled window the failure was recorded as "skipped"
and `status`, the report and the start screen did not mention the cordon."""

from __future__ import annotations

import io

from frontend.headless import HeadlessFrontEnd
from frontend.runner import run_engine
from simulator.lab import Lab
from steps import build_plan
from tests.test_qos import steps_of
from wizard.events import Answer, DecisionKind, Reply
from wizard.report import checkpoint_report, markdown, verdict_line
from wizard.site import load_site
from wizard.status import format_status, load_status

NODE = "gpu-b300-01"


class WindowKeptShut(HeadlessFrontEnd):
    async def decide(self, decision):
        if decision.kind is DecisionKind.MAINTENANCE_WINDOW:
            return Reply(Answer.SKIP)
        return await super().decide(decision)


async def test_a_failed_change_leaves_a_cordon_that_status_and_the_report_name_under_a_later_skip(
    tmp_path,
):
    plan = build_plan()
    only = steps_of(plan)
    state = tmp_path / "state"
    async with Lab(tmp_path / "lab", faults=("pfc-not-applied",), persist=True) as lab:
        site = load_site(lab.site_path)
        yes = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
        first = await run_engine(site, plan, state, yes, only=only)
        assert first.summary.results[("qos.apply", NODE)].value == "failed"
        assert lab.cluster.node(NODE)["spec"]["unschedulable"] is True

        text = format_status(load_status(state, site, plan))
        assert f"CORDONED: {NODE} is cordoned (by qos.apply" in text
        assert f"kubectl uncordon {NODE}" in text and f"--redo qos.apply@{NODE}" in text
        report = checkpoint_report(state, site, plan)
        assert [c["node"] for c in report["cordoned"]] == [NODE]
        assert f"{NODE} left cordoned" in verdict_line(report)
        assert "## Cordoned nodes" in markdown(report)

        # Resume; the window is cancelled this time: qos.apply is skipped.
        shut = WindowKeptShut(yes=True, window_open=True, out=io.StringIO())
        await run_engine(site, plan, state, shut, only=only)
        status = load_status(state, site, plan)
        apply = next(s for s in status.steps if s.step == "qos.apply" and s.target == NODE)
        assert apply.state.value == "skipped"
        # The failed change and its rollback stay in the record under the skip.
        assert apply.earlier and apply.earlier[0].state == "failed"
        assert "rolled back" in apply.earlier[0].message
        text = format_status(status)
        assert f"CORDONED: {NODE}" in text  # still cordoned, still said
        assert "before that on gpu-b300-01: failed - verification failed; rolled back" in text
        report = checkpoint_report(state, site, plan)
        assert [c["node"] for c in report["cordoned"]] == [NODE]
        assert verdict_line(report).startswith("**Verdict: not ready**")
        skipped = next(s for s in report["skipped_steps"] if s["step"] == "qos.apply")
        assert skipped["earlier"] and "rolled back" in skipped["earlier"][0]
        assert "before that failed: verification failed; rolled back" in markdown(report)
        assert lab.cluster.node(NODE)["spec"]["unschedulable"] is True


async def test_the_tui_names_the_cordoned_node_on_the_start_screen_header_panel_and_nodes_view(
    tmp_path,
):
    from textual.widgets import Static

    from frontend.lab_session import open_lab
    from frontend.tui.app import WizardApp
    from tests.test_tui import SIZE, screen_name, wait_for

    plan = build_plan()
    only = steps_of(plan)
    state = tmp_path / "state"
    session = await open_lab(("pfc-not-applied",), 1, state, keep=True)
    try:
        yes = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
        await run_engine(session.site, plan, state, yes, only=only)
    finally:
        await session.close()

    app = WizardApp(lambda: open_lab(("pfc-not-applied",), 1, state, keep=True))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: screen_name(app) == "StartScreen", 60)
        summary = str(app.screen.query_one("#checkpoint-summary", Static).content)
        assert f"CORDONED: {NODE} is cordoned (by qos.apply" in summary
        assert f"kubectl uncordon {NODE}" in summary
        await pilot.press("enter")
        await wait_for(
            pilot, lambda: screen_name(app) == "MainScreen" or app.main_screen is not None
        )
        main = app.main_screen
        await wait_for(pilot, lambda: bool(main.cordons), 10)
        assert f"CORDONED: {NODE}" in main.sub_title
        panel = main.query_one("#cordon-panel", Static)
        assert panel.display and "To uncordon" in str(panel.content)
        while screen_name(app) != "MainScreen":  # a question of the resumed run: set aside
            await pilot.press("escape")
            await pilot.pause(0.2)
        await pilot.press("n")
        await wait_for(pilot, lambda: screen_name(app) == "FleetScreen")
        assert "CORDONED by qos.apply" in app.screen.query_one("#fleet").get_cell(NODE, "problem")
        assert f"CORDONED: {NODE}" in str(app.screen.query_one("#fleet-summary").content)
        await pilot.press("q")
