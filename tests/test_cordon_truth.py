"""Whether a node is cordoned comes from one place (screen-r3 review, B0 B1 B2 B4 B5): the
wizard's own record of the cordons it set and lifted, beside the step records, written
before the cordon and cleared by any step's uncordon. A start over keeps it (B0), the
reboot's uncordon clears the mark a failed QoS change left (B1), a kill -9 mid-change
leaves the node named cordoned (B5), the log says when the node left and re-entered
service (B2), and status, the report and the exit code give one verdict (B4)."""

from __future__ import annotations

import io

import pytest

from frontend.headless import HeadlessFrontEnd
from frontend.runner import EXIT_CODES, run_engine
from simulator.lab import Lab
from steps import build_plan
from tests.test_qos import steps_of
from wizard.checkpoint import Checkpoint, load_run, site_state_dir
from wizard.events import Answer, DecisionKind, Reply
from wizard.report import checkpoint_report, verdict_line
from wizard.site import load_site
from wizard.status import format_status, load_status
from wizard.verdict import RunVerdict

NODE = "gpu-b300-01"


class Killed(BaseException):
    """Stands for a kill -9 at the rollback question: nothing after it runs."""


class KilledAtRollback(HeadlessFrontEnd):
    async def decide(self, decision):
        if decision.kind is DecisionKind.ROLLBACK:
            raise Killed
        return await super().decide(decision)


class WindowKeptShut(HeadlessFrontEnd):
    async def decide(self, decision):
        if decision.kind is DecisionKind.MAINTENANCE_WINDOW and decision.step == "qos.apply":
            return Reply(Answer.SKIP)
        return await super().decide(decision)


async def fail_qos(lab, plan, state, out=None):
    """pfc-not-applied: qos.apply fails to verify, is rolled back, the node stays cordoned."""
    site = load_site(lab.site_path)
    yes = HeadlessFrontEnd(yes=True, window_open=True, out=out or io.StringIO())
    outcome = await run_engine(site, plan, state, yes, only=steps_of(plan))
    assert outcome.summary.results[("qos.apply", NODE)].value == "failed"
    assert lab.cluster.node(NODE)["spec"]["unschedulable"] is True
    return site, outcome


async def test_start_over_keeps_the_cordon_the_wizard_holds(tmp_path):
    plan = build_plan()
    state = tmp_path / "state"
    async with Lab(tmp_path / "lab", faults=("pfc-not-applied",), persist=True) as lab:
        site, _ = await fail_qos(lab, plan, state)
        with Checkpoint.open(state, site) as checkpoint:
            checkpoint.reset_all()
        text = format_status(load_status(state, site, plan))
        assert f"CORDONED: {NODE} is cordoned (by qos.apply" in text
        assert "verdict: failed" in text
        # --start-over on the command line keeps it as well.
        with Checkpoint.open(state, site, start_over=True):
            pass
        run = load_run(site_state_dir(state, site))
        assert run is not None and not run.steps and list(run.cordons) == [NODE]
        assert lab.cluster.node(NODE)["spec"]["unschedulable"] is True


async def test_a_later_uncordon_clears_the_cordon_a_failed_change_left_and_the_log_says_so(
    tmp_path,
):
    plan = build_plan()
    state = tmp_path / "state"
    log = io.StringIO()
    async with Lab(tmp_path / "lab", faults=("pfc-not-applied",), persist=True) as lab:
        site, _ = await fail_qos(lab, plan, state, log)
        said = log.getvalue()
        assert f"{NODE}: cordoned for qos.apply (`kubectl cordon {NODE}`)" in said
        assert f"{NODE}: drained:" in said
        # The reboot takes the node out of service and, once it verified, back in.
        shut = WindowKeptShut(yes=True, window_open=True, out=log)
        outcome = await run_engine(site, plan, state, shut, only=["operate.reboot"])
        assert outcome.summary.results[("operate.reboot", NODE)].value == "done"
        assert not lab.cluster.node(NODE)["spec"].get("unschedulable")
        assert f"{NODE}: uncordoned by operate.reboot" in log.getvalue()
        assert "lifts the cordon qos.apply left" in log.getvalue()
        text = format_status(load_status(state, site, plan))
        assert "CORDONED" not in text
        report = checkpoint_report(state, site, plan)
        assert report["cordoned"] == []
        assert "left cordoned" not in verdict_line(report)


async def test_a_kill_mid_change_leaves_the_node_named_cordoned(tmp_path):
    plan = build_plan()
    state = tmp_path / "state"
    async with Lab(tmp_path / "lab", faults=("pfc-not-applied",), persist=True) as lab:
        site = load_site(lab.site_path)
        killed = KilledAtRollback(yes=True, window_open=True, out=io.StringIO())
        with pytest.raises(Killed):
            await run_engine(site, plan, state, killed, only=steps_of(plan))
        assert lab.cluster.node(NODE)["spec"]["unschedulable"] is True
        status = load_status(state, site, plan)
        assert [c.node for c in status.cordoned] == [NODE]
        text = format_status(status)
        assert "IN FLIGHT: qos.apply" in text
        assert f"CORDONED: {NODE} is cordoned (by qos.apply" in text
        assert [c["node"] for c in checkpoint_report(state, site, plan)["cordoned"]] == [NODE]
        # E1: what the terminal says when the TUI is left there (at the rollback question).
        from types import SimpleNamespace

        from frontend.tui.app import _out_of_service

        said = _out_of_service(SimpleNamespace(state_dir=state, site=site), plan)
        assert f"{NODE}: mid-change in qos.apply (maintenance stage verifying)" in said
        assert "finish or roll back: `gpu-node-wizard run" in said
        assert f"{NODE} is cordoned (by qos.apply" in said


async def test_status_report_and_exit_code_give_one_verdict_after_a_failure_under_a_skip(
    tmp_path,
):
    plan = build_plan()
    state = tmp_path / "state"
    async with Lab(tmp_path / "lab", faults=("pfc-not-applied",), persist=True) as lab:
        site, _ = await fail_qos(lab, plan, state)
        shut = WindowKeptShut(yes=True, window_open=True, out=io.StringIO())
        outcome = await run_engine(site, plan, state, shut, only=steps_of(plan))
        assert outcome.summary.results[("qos.apply", NODE)].value == "skipped"
        status = load_status(state, site, plan)
        report = checkpoint_report(state, site, plan)
        assert status.verdict is RunVerdict.FAILED
        assert verdict_line(report).startswith("**Verdict: not ready**")
        assert outcome.exit_code == EXIT_CODES[RunVerdict.FAILED]


async def test_the_resumed_screen_shows_the_settled_phases_and_the_cordon_at_once(tmp_path):
    """screen-r3 B5/B6: after a kill at the rollback question the resumed screen showed every
    phase not run and no cordon until the interrupted change was settled."""
    from textual.widgets import DataTable, Static

    from frontend.lab_session import open_lab
    from frontend.tui.app import WizardApp
    from tests.test_tui import SIZE, screen_name, wait_for

    plan = build_plan()
    state = tmp_path / "state"
    session = await open_lab(("pfc-not-applied",), 1, state, keep=True)
    try:
        killed = KilledAtRollback(yes=True, window_open=True, out=io.StringIO())
        with pytest.raises(Killed):
            await run_engine(session.site, plan, state, killed, only=steps_of(plan))
    finally:
        await session.close()

    app = WizardApp(lambda: open_lab(("pfc-not-applied",), 1, state, keep=True))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: screen_name(app) == "StartScreen", 60)
        summary = str(app.screen.query_one("#checkpoint-summary", Static).content)
        assert f"CORDONED: {NODE} is cordoned (by qos.apply" in summary
        await pilot.press("enter")
        await wait_for(pilot, lambda: screen_name(app) == "MaintenanceScreen", 60)
        main = app.main_screen
        phases = main.query_one("#phases", DataTable)
        assert str(phases.get_cell(plan.phases[0].id, NODE)) == "✔"
        await wait_for(pilot, lambda: bool(main.cordons), 10)
        assert f"CORDONED: {NODE}" in main.sub_title
        await pilot.press("escape")
        await pilot.press("q")
        await pilot.pause(0.5)
        if screen_name(app) == "QuitScreen":
            await pilot.press("y")


def test_one_verdict_counts_a_failure_under_a_later_skip_and_a_node_left_cordoned():
    """screen-r3 B4: `status` said `verdict: ok` (and the TUI exited 0) where report.md said
    "not ready — left cordoned": the failed change was later skipped at a re-asked window."""
    from wizard.checkpoint import EarlierResult, StepRecord
    from wizard.model import StepState

    skipped = StepRecord(
        state=StepState.SKIPPED,
        earlier=(EarlierResult("failed", "verification failed; rolled back", None),),
        recorded=True,
    )
    done = StepRecord(state=StepState.DONE, recorded=True)
    from wizard.verdict import judge_run

    assert judge_run({("qos.apply", NODE): skipped}) is RunVerdict.FAILED
    assert judge_run({("e810.ice", NODE): done}, cordoned=True) is RunVerdict.FAILED
    assert judge_run({("e810.ice", NODE): done}) is RunVerdict.OK
