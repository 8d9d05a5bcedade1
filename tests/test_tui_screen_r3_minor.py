"""The MINOR findings of the third new-user review of the screen (/work/reviews/screen-r3.md,
issue #28), each at the size the review saw it."""

from __future__ import annotations

import pytest

from frontend.tui.widgets.phase_table import GLYPHS, WAIVED_GLYPH, PhaseTable
from tests.test_tui_keys import IdleApp, show
from wizard.events import Answer, Reply, StepFinished
from wizard.model import Finding, Severity, StepState


async def test_a_waived_phase_is_not_shown_as_a_clean_pass_in_the_sidebar():
    """F1: a waived phase showed ✔ like a clean pass; the README: "shown as waived, never as
    pass"."""
    app = IdleApp()
    async with app.run_test(size=(160, 48)) as pilot:
        main = await show(app, pilot, "main")
        waived = Finding("T01.pkg", "T01", Severity.FAIL, "old package", waived="lab rack")
        main.deliver(StepFinished("packages.install", "gpu-1", StepState.DONE, "", (waived,)))
        await pilot.pause(0.2)
        cell = str(main.query_one(PhaseTable).get_cell("packages", "gpu-1"))
        assert cell not in (GLYPHS[StepState.DONE], GLYPHS[StepState.PENDING])
        assert cell == WAIVED_GLYPH


async def test_the_nodes_views_first_problem_id_is_whole_at_80x24():
    """C1: at 80x24 the "first problem" column showed `T0`: the phase columns took the 80
    columns and the check id was cut (#28 point 7: ids are never cut)."""
    from frontend.tui.fleet import FleetScreen

    check = "T02.kernel-vs-workload"
    app = IdleApp()
    async with app.run_test(size=(80, 24)) as pilot:
        main = await show(app, pilot, "main")
        failing = Finding(check, "T02", Severity.FAIL, "the kernel is not the workload's")
        main.deliver(StepFinished("irdma.verify", "gpu-1", StepState.FAILED, "", (failing,)))
        await pilot.pause(0.2)
        screen = FleetScreen(main)
        await app.push_screen(screen)
        await pilot.pause(0.3)
        table = screen.query_one("#fleet")
        columns = table.ordered_columns
        keys = [c.key.value for c in columns]
        at = keys.index("problem")
        left = sum(c.get_render_width(table) for c in columns[:at]) + table.cell_padding
        problem = columns[at]
        assert problem.get_render_width(table) - 2 * table.cell_padding >= len(check)
        assert left + len(check) <= table.scrollable_content_region.width, (left, keys)
        assert check in str(table.get_cell("gpu-1", "problem"))


@pytest.mark.parametrize("name", ["review", "manual", "failed"])
async def test_ctrl_x_asks_before_it_aborts_and_escape_there_decides_nothing(name):
    """C4: ctrl+x aborted the run at once, one chord from ctrl+c and ctrl+r, while q and
    ctrl+c ask first (seen at 80x24)."""
    from tests.test_tui import ModalHost
    from tests.test_tui_esc import DIALOGS

    app = ModalHost(DIALOGS[name]())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        dialog = app.screen
        await pilot.press("ctrl+x")
        await pilot.pause()
        assert app.screen is not dialog and app.return_value is None  # asked, not aborted
        await pilot.press("escape")  # back to the question: nothing decided
        await pilot.pause()
        assert app.screen is dialog and app.return_value is None
        await pilot.press("ctrl+x")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
    assert app.return_value == Reply(Answer.ABORT)


async def test_d_pressed_twice_does_not_confirm_a_manual_step():
    """N2: `d` brings a question set aside back (main screen) and was "Done, verify it" in a
    manual step: `d` twice told the wizard the switch was configured. Done is `v` (verify)."""
    from frontend.tui.modals import ManualScreen
    from tests.test_tui import ModalHost
    from tests.test_tui_keys import manual_decision

    app = ModalHost(ManualScreen(manual_decision()))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        dialog = app.screen
        await pilot.press("d")  # the second `d`
        await pilot.pause()
        assert app.screen is dialog and app.return_value is None
        await pilot.press("v")
        await pilot.pause()
    assert app.return_value == Reply(Answer.PROCEED)


@pytest.mark.parametrize("name", ["rollback", "failed"])
async def test_the_rollback_and_failed_dialogs_say_the_node_stays_cordoned(name):
    """B8: under a modal the header is hidden, and the rollback question and the failed-step
    dialog said nothing of the cordon the node stays in (seen at 160x48)."""
    from textual.widgets import Static

    from frontend.tui.failed import FailedStepScreen
    from frontend.tui.modals import RollbackScreen
    from tests.test_tui_keys import failed_decision, rollback_decision
    from wizard.runview import Cordon

    decision = {"rollback": rollback_decision, "failed": failed_decision}[name]()
    app = IdleApp()
    async with app.run_test(size=(160, 48)) as pilot:
        main = await show(app, pilot, "main")
        main.show_cordons([Cordon(decision.target, "qos.apply", "QoS change", "06:10:00")])
        dialog = {"rollback": RollbackScreen, "failed": FailedStepScreen}[name](decision)
        await app.push_screen(dialog)
        await pilot.pause(0.3)
        shown = " ".join(str(s.content) for s in dialog.query(Static))
        assert f"{decision.target} stays cordoned" in shown
