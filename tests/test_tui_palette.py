"""The operator's tools around the findings (issue #19): sort orders, copy, the command
palette offering every action, the export and report from the TUI, and a theme that is
remembered."""

from __future__ import annotations

import json
import os
import stat

from frontend.tui.commands import export_artifacts, write_report_files
from frontend.tui.failed import FailedStepScreen
from frontend.tui.findings import detail_text
from frontend.tui.preferences import preferences_path
from tests.test_tui import wait_for
from tests.test_tui_keys import PLAN, SITE, IdleApp, failed_decision, show
from wizard.events import StepFinished
from wizard.model import Evidence, Finding, Severity, StepState

FINDINGS = {
    "gpu-2": (
        Finding("T08.pfc", "T08", Severity.WARN, "PFC counters quiet"),
        Finding("T00.os", "T00", Severity.PASS, "RHEL 10.2"),
    ),
    "gpu-1": (
        Finding("T11.acs", "T11", Severity.FAIL, "ACS on", "BIOS: ACS off",
                (Evidence("lspci -vvv", "ACSCtl: SrcValid+"),)),
        Finding("T00.gpu-count", "T00", Severity.FAIL, "7 GPUs, expected 8"),
    ),
}  # fmt: skip


async def loaded_main(app, pilot):
    main = await show(app, pilot, "main")
    for target, findings in FINDINGS.items():
        main.deliver(StepFinished("preflight.host", target, StepState.FAILED, "", findings))
    await pilot.pause(0.1)
    return main


def rows(main):
    table = main.query_one("#findings")
    return [
        (str(table.get_row_at(i)[1]), str(table.get_row_at(i)[2])) for i in range(table.row_count)
    ]


async def test_o_cycles_the_findings_through_failures_first_by_gate_and_by_node():
    app = IdleApp()
    async with app.run_test(size=(120, 40)) as pilot:
        main = await loaded_main(app, pilot)
        found = [("gpu-2", "T08.pfc"), ("gpu-2", "T00.os"),
                 ("gpu-1", "T11.acs"), ("gpu-1", "T00.gpu-count")]  # fmt: skip
        assert rows(main) == found
        await pilot.press("o")
        await pilot.pause(0.1)
        assert rows(main) == [found[2], found[3], found[0], found[1]]  # failures first
        await pilot.press("o")
        await pilot.pause(0.1)
        assert [c for _, c in rows(main)] == ["T00.gpu-count", "T00.os", "T08.pfc", "T11.acs"]
        await pilot.press("o")
        await pilot.pause(0.1)
        assert rows(main) == [found[2], found[3], found[0], found[1]]  # gpu-1, failures first
        # A finding that arrives while sorted takes its place in the order.
        late = Finding("T02.bond", "T02", Severity.FAIL, "slave down")
        main.deliver(StepFinished("bond.lacp", "gpu-1", StepState.FAILED, "", (late,)))
        await pilot.pause(0.1)
        assert rows(main)[:3] == [("gpu-1", "T11.acs"), ("gpu-1", "T00.gpu-count"),
                                  ("gpu-1", "T02.bond")]  # fmt: skip
        await pilot.press("o")
        await pilot.pause(0.1)
        assert rows(main)[-1] == ("gpu-1", "T02.bond")  # as found again


async def test_c_copies_the_highlighted_finding_in_full():
    app = IdleApp()
    async with app.run_test(size=(120, 40)) as pilot:
        main = await loaded_main(app, pilot)
        table = main.query_one("#findings")
        table.move_cursor(row=2)
        await pilot.press("c")
        await pilot.pause()
        assert app.clipboard == detail_text(main.findings[2])
        assert "ACSCtl: SrcValid+" in app.clipboard and "fix: BIOS: ACS off" in app.clipboard


def titles(app, screen):
    return [command.title for command in app.get_system_commands(screen)]


async def test_the_palette_offers_every_action_where_it_applies():
    app = IdleApp()
    async with app.run_test(size=(120, 40)) as pilot:
        main = await show(app, pilot, "main")
        offered = titles(app, main)
        for title in ("Report", "Measurements", "Log", "Nodes", "Findings: problems only / all",
                      "Findings: next sort order", "Copy the highlighted finding", "Help",
                      "Theme", "Quit"):  # fmt: skip
            assert title in offered, title
        assert offered.count("Quit") == 1
        assert "Retry the failed step" not in offered  # only in a failed step's dialog
        dialog = FailedStepScreen(failed_decision())
        await app.push_screen(dialog)
        await wait_for(pilot, lambda: dialog.is_mounted)
        offered = titles(app, dialog)
        for title in ("Retry the failed step", "Waive the failed checks", "Copy"):
            assert title in offered, title
        retry = next(c for c in app.get_system_commands(dialog) if c.title.startswith("Retry"))
        retry.callback()
        await pilot.pause()
        assert dialog not in app.screen_stack  # answered: the dialog is gone


class _Session:
    def __init__(self, state_dir):
        self.site = SITE
        self.state_dir = state_dir


async def test_export_and_report_from_the_palette_write_new_folders(tmp_path):
    from wizard.checkpoint import Checkpoint
    from wizard.export import MANIFEST, RUNBOOK

    app = IdleApp()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, "main")
        app.session = _Session(tmp_path / "state")
        assert "Export every artifact (dry run)" in titles(app, app.screen)
        first = await export_artifacts(app, here=tmp_path)
        second = await export_artifacts(app, here=tmp_path)
        assert first and second and first != second  # never over an earlier export
        assert (first / RUNBOOK).is_file() and (first / MANIFEST).is_file()
        assert await write_report_files(app, here=tmp_path) is None  # no checkpoint yet
        with Checkpoint.open(tmp_path / "state", SITE) as checkpoint:
            checkpoint.set_step("preflight.host", "gpu-1", StepState.DONE)
        report = await write_report_files(app, here=tmp_path)
        assert report is not None and (report / "report.md").read_text().startswith("#")
        assert stat.S_IMODE(os.stat(report / "report.md").st_mode) == 0o600


async def test_the_chosen_theme_is_the_next_runs_theme():
    path = preferences_path()
    assert str(path).startswith(os.environ["XDG_CONFIG_HOME"])  # the tests' own folder
    app = IdleApp()
    async with app.run_test(size=(80, 24)) as pilot:
        app.theme = "nord"
        await wait_for(pilot, lambda: path.exists() and "nord" in path.read_text(), 5)
    assert json.loads(path.read_text())["theme"] == "nord"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    again = IdleApp()
    async with again.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert again.theme == "nord"
    path.write_text("{not json")
    third = IdleApp()
    async with third.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert third.theme == "textual-dark"  # a mangled file is the defaults, not an error
    path.unlink()


async def test_slash_filters_the_findings_by_node_gate_or_severity_and_escape_clears():
    app = IdleApp()
    async with app.run_test(size=(120, 40)) as pilot:
        main = await loaded_main(app, pilot)
        await pilot.press("slash")
        await pilot.pause()
        box = main.query_one("#findings-filter")
        assert box.display and app.focused is box
        await pilot.press(*"gpu-1 fail")
        await pilot.pause(0.1)
        assert rows(main) == [("gpu-1", "T11.acs"), ("gpu-1", "T00.gpu-count")]
        await pilot.press("enter")  # back to the table, the filter stays
        await pilot.pause()
        assert app.focused is main.query_one("#findings")
        late = Finding("T02.bond", "T02", Severity.FAIL, "slave down")
        main.deliver(StepFinished("bond.lacp", "gpu-2", StepState.FAILED, "", (late,)))
        await pilot.pause(0.1)
        assert ("gpu-2", "T02.bond") not in rows(main)  # a new finding is filtered too
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert not box.display and len(rows(main)) == 5


async def test_a_retried_steps_result_replaces_the_one_before_and_the_report_says_waived():
    """After a waiver the report showed T00 fail and the failure twice (a new user's review):
    the failed result stood beside the waived one."""
    from frontend.tui.report import ReportData, ReportScreen

    app = IdleApp()
    async with app.run_test(size=(120, 40)) as pilot:
        main = await show(app, pilot, "main")
        failed = Finding("T00.gpu-count", "T00", Severity.FAIL, "7 GPUs, expected 8")
        other = Finding("T00.os", "T00", Severity.PASS, "RHEL 10.2")
        main.deliver(StepFinished("preflight.gpus", "gpu-1", StepState.FAILED, "", (failed, other)))
        main.deliver(StepFinished("preflight.host", "gpu-2", StepState.DONE, "", (other,)))
        waived = Finding("T00.gpu-count", "T00", Severity.FAIL, "7 GPUs, expected 8",
                         waived="lab node, one GPU out for repair")  # fmt: skip
        main.deliver(StepFinished("preflight.gpus", "gpu-1", StepState.DONE, "", (waived, other)))
        await pilot.pause(0.2)
        assert [(s, t, f.check, bool(f.waived)) for s, t, f in main.findings] == [
            ("preflight.host", "gpu-2", "T00.os", False),
            ("preflight.gpus", "gpu-1", "T00.gpu-count", True),
            ("preflight.gpus", "gpu-1", "T00.os", False),
        ]
        assert len(rows(main)) == 3
        report = ReportScreen(ReportData.of_run(SITE, PLAN, main.states, list(main.findings)), None)
        await app.push_screen(report)
        await wait_for(pilot, lambda: report.is_mounted, 5)
        await pilot.pause(0.1)
        # Waived, not failed; and only partial: the other steps that prove T00 did not run.
        assert str(report.query_one("#gates").get_cell("T00", "verdict")) == "partial"
        detail = str(report.query_one("#gate-detail").content)
        assert "[waived] gpu-1: T00.gpu-count" in detail and "[fail]" not in detail


async def test_a_node_with_a_skipped_step_is_not_all_done_in_the_fleet_view():
    """The nodes view said "1 ✔ all phases done" with phases 11, 12 and 16 skipped, and p
    (problems only) hid the node (a new user's review)."""
    from frontend.tui.fleet import FleetScreen

    app = IdleApp()
    async with app.run_test(size=(120, 40)) as pilot:
        main = await show(app, pilot, "main")
        main.deliver(StepFinished("preflight.host", "gpu-1", StepState.DONE, "", ()))
        main.deliver(StepFinished("qos.apply", "gpu-1", StepState.SKIPPED, "window not confirmed"))
        await pilot.pause(0.1)
        fleet = FleetScreen(main)
        await app.push_screen(fleet)
        await wait_for(pilot, lambda: fleet.is_mounted, 5)
        summary = str(fleet.query_one("#fleet-summary").content)
        assert "0 ✔ all phases done" in summary and "1 ↷ with a skipped step" in summary
        assert "0 ✖ with a problem" in summary
        table = fleet.query_one("#fleet")
        assert "qos.apply skipped" in str(table.get_cell("gpu-1", "problem"))
        await pilot.press("p")
        await pilot.pause(0.1)
        assert table.row_count == 1  # problems only keeps it


def test_the_start_screen_counts_skips_apart_from_done():
    from pathlib import Path

    from frontend.tui.start import checkpoint_summary
    from wizard.status import Status, StepStatus

    steps = [StepStatus("preflight.host", "Host", "preflight", "gpu-1", StepState.DONE),
             StepStatus("qos.apply", "QoS", "qos", "gpu-1", StepState.SKIPPED)]  # fmt: skip
    text = checkpoint_summary(Status(Path("/x"), True, updated="now", steps=steps))
    assert "1 of 2 step runs done, 1 skipped" in text
