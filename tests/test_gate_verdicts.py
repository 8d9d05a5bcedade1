"""One verdict everywhere (issue #28, point 5): a run stopped in phase 1 printed `T11 pass`
(from the IOMMU/ACS preflight alone) in the headless demo, `status` and the TUI's report
2 s into a run. A gate passes only when every step that proves it ran."""

from __future__ import annotations

import re

from frontend.demo import run_demo_headless
from frontend.lab_session import open_lab
from steps import build_plan
from tests.test_tui import SIZE, screen_name, wait_for
from wizard.report import checkpoint_report, verdict_line
from wizard.site import load_site
from wizard.status import format_status, load_status


def gate_row(output: str, gate: str) -> str:
    return next(line for line in output.splitlines() if re.match(rf"{gate}\s", line))


async def test_a_run_stopped_in_phase_1_has_no_gate_of_later_phases_passed(tmp_path, capsys):
    state = tmp_path / "state"
    code = await run_demo_headless(("containerd-1.7",), 1, state)
    out = capsys.readouterr().out
    assert code != 0 and "stopped:" in out
    assert gate_row(out, "T00").split()[1] == "fail"  # containerd 1.7
    assert gate_row(out, "T11").split()[1] == "partial"  # the ACS preflight alone ran
    assert gate_row(out, "T13")[6:].startswith("not run")
    assert not [line for line in out.splitlines()[-25:] if re.match(r"T1[1-7]\s+pass", line)]

    site = load_site(next((state / "demo-lab").glob("*.yaml")))
    plan = build_plan()
    status = load_status(state, site, plan)
    text = format_status(status)
    gates = next(line for line in text.splitlines() if line.startswith("gates: "))
    assert gates.startswith("gates: fail T00") and "partial" in gates and "T11" in gates
    assert status.to_json()["gates"]["T11"] == "partial"
    report = checkpoint_report(state, site, plan)
    assert {g["gate"]: g["status"] for g in report["gates"]}["T11"] == "partial"
    assert verdict_line(report).startswith("**Verdict: not ready**")


async def test_the_tui_report_two_seconds_in_passes_nothing_that_has_not_run(tmp_path):
    from frontend.tui.app import WizardApp

    app = WizardApp(lambda: open_lab((), 1, tmp_path / "state"), auto_start=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: screen_name(app) == "MainScreen")
        await wait_for(pilot, lambda: len(app.main_screen.findings) > 3)
        await pilot.press("r")
        await wait_for(pilot, lambda: screen_name(app) == "ReportScreen")
        verdicts = app.screen.verdicts()
        assert verdicts["T11"] in ("partial", "not run"), verdicts
        assert verdicts["T16"] == "not run"
        line = str(app.screen.query_one("#verdict-line").content)
        assert line.startswith("Verdict: not ready")
        await pilot.press("q")
