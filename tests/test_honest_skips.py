"""A skipped change is not a made one: the steps that build on it are skipped with it, and
no gate it belongs to passes.

The reproduction: Esc at the QoS maintenance gate, and the next screen offered the boot
unit that applies the same QoS at the next boot (bypassing the gate), qos.measure ran
"with QoS", phase 11 showed ✔ and the report said T08 pass. The dependency is declared
once (qos.apply provides what it verified; qos.persist, qos.measure and ecn.enable need
it), and the engine skips a step whose provider was skipped.
"""

from __future__ import annotations

import io

from frontend.headless import HeadlessFrontEnd
from steps import build_plan
from tests.conftest import K8S_PHASES, run_in_lab
from wizard.checkpoint import load_run, read_state, site_state_dir
from wizard.events import Answer, Reply
from wizard.model import StepState
from wizard.report import build_report
from wizard.site import load_site
from wizard.verdict import GateVerdict

DEPENDENTS = ("qos.persist", "qos.measure", "ecn.enable")


class WindowKeptShut(HeadlessFrontEnd):
    """Approves every review but cancels the maintenance window (Esc at the gate)."""

    async def decide(self, decision):
        if decision.kind.value == "maintenance-window":
            return Reply(Answer.SKIP)
        return await super().decide(decision)


async def test_a_skipped_qos_window_skips_what_builds_on_it_and_t08_is_not_passed(tmp_path):
    frontend = WindowKeptShut(yes=True, window_open=True, out=io.StringIO())
    outcome, lab = await run_in_lab(tmp_path, frontend, phases=(*K8S_PHASES, "qos", "ecn"))
    results = outcome.summary.results
    node = "gpu-b300-01"
    assert results[("qos.apply", node)] is StepState.SKIPPED
    for step in DEPENDENTS:
        assert results[(step, node)] is StepState.SKIPPED, step
    host = lab.hosts[node]
    assert "gpu-node-wizard-roce-qos.service" not in host.state.enabled_units  # no boot unit
    # A skip is not a failure: the run goes on past phase 11.
    assert not outcome.summary.stopped
    verdicts = outcome.gate_verdicts()
    assert verdicts["T08"] is GateVerdict.SKIP  # qos.switch and qos.peers passed: still not a pass
    # The report says skipped, who and why, for the gate.
    site = load_site(lab.site_path)
    run = load_run(site_state_dir(tmp_path / "state", site))
    t08 = next(g for g in build_report(run, site, build_plan())["gates"] if g["gate"] == "T08")
    assert t08["status"] == "skip"
    assert "skipped by the operator: the maintenance window was not confirmed" in t08["evidence"]
    persist = run.record("qos.persist", node)
    assert (
        "qos.apply (RoCE QoS on both bond ports (maintenance window)) was skipped"
        in persist.message
    )
    assert "qos_verified" not in run.record("qos.apply", node).result
    assert not run.record("qos.measure", node).measurements  # nothing "with QoS"
    assert not any("-T 96" in c or "-R" in c.split() for c in host.commands)


async def test_a_confirmed_window_records_what_it_verified_for_the_steps_after_it(tmp_path):
    frontend = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
    outcome, lab = await run_in_lab(tmp_path, frontend, phases=(*K8S_PHASES, "qos"))
    node = "gpu-b300-01"
    for step in ("qos.apply", "qos.persist", "qos.measure"):
        assert outcome.summary.results[(step, node)] is StepState.DONE, step
    site = load_site(lab.site_path)
    state = read_state(site_state_dir(tmp_path / "state", site))
    verified = state["steps"]["qos.apply"][node]["extra"]["qos_verified"]
    assert verified == {
        "ports": ["ens5f0np0", "ens5f1np1"], "dscp": 24, "priority": 3, "traffic_class": 3, "tos": 96,
    }  # fmt: skip
    # Everything of phase 11 passed; ECN (phase 12, a step that proves T08 too) did not run.
    assert outcome.gate_verdicts()["T08"] is GateVerdict.PARTIAL


async def test_in_the_tui_esc_at_the_qos_gate_shows_skipped_and_the_report_says_skip(tmp_path):
    """The same in the TUI: phases 1-10 are run headless first (on the engine's thread,
    into the state the TUI resumes), so the TUI part starts at phase 11."""
    from frontend.lab_session import open_lab
    from frontend.runner import run_engine
    from frontend.tui.app import WizardApp
    from tests.test_tui import SIZE, screen_name, wait_for

    state = tmp_path / "state"
    node = "gpu-b300-01"

    async def opener():
        session = await open_lab(("greenfield",), 1, state)  # the QoS gate is the point
        plan = build_plan()
        first = [s.id for p in plan.phases if p.id in K8S_PHASES for s in p.steps]
        quiet = HeadlessFrontEnd(
            yes=True, window_open=True, out=io.StringIO(),
            allow_cluster_change={"gpu-operator-install"},  # greenfield's first install
        )  # fmt: skip
        await run_engine(session.site, plan, state, quiet, only=first)
        return session

    app = WizardApp(opener, auto_start=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: screen_name(app) == "ManualScreen", 60)  # qos.switch
        assert app.screen.decision.step == "qos.switch"
        await pilot.press("v")  # done, verify it
        await wait_for(pilot, lambda: screen_name(app) == "MaintenanceScreen", 30)
        assert app.screen.decision.step == "qos.apply"
        await pilot.click("#cancel")  # Cancel: the window stays shut (Esc never decides)
        await wait_for(pilot, lambda: screen_name(app) == "ConfirmSkipScreen", 10)
        await pilot.press("y")  # later steps build on qos.apply: skip them too
        main = app.main_screen
        await wait_for(pilot, lambda: ("ecn.enable", node) in main.states, 30)
        # No review of the boot unit was offered: it was skipped with the gate.
        assert not [d for d in app.decisions if d.step in DEPENDENTS]
        for step in ("qos.apply", *DEPENDENTS):
            assert main.states[(step, node)] is StepState.SKIPPED, step
        await pilot.pause(0.3)
        sidebar = main.query_one("#phases")
        assert sidebar.get_cell("qos", node) == "↷"
        assert sidebar.get_cell("ecn", node) == "↷"
        await pilot.press("r")
        await wait_for(pilot, lambda: screen_name(app) == "ReportScreen")
        gates = app.screen.query_one("#gates")
        assert str(gates.get_cell("T08", "verdict")) == "skip"
        gates.move_cursor(row=gates.get_row_index("T08"))
        await pilot.pause(0.2)
        detail = str(app.screen.query_one("#gate-detail").content)
        assert "skipped by the operator: the maintenance window was not confirmed" in detail
        await pilot.press("q")
        # The run goes on after the skipped window (later phases): leaving mid-step asks.
        await wait_for(
            pilot, lambda: app.return_code is not None or screen_name(app) == "QuitScreen", 30
        )
        if app.return_code is None:
            await pilot.press("y")
        await wait_for(pilot, lambda: app.return_code is not None, 30)
