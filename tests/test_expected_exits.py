"""Issue #28 point 9: an exit status the command's definition expects (pkill of a server
that had ended, a read of a file not written yet, a unit not enabled yet) is no error: the
event carries what it means and the TUI's log says so instead of "exit status 1"."""

from __future__ import annotations

import io

from frontend.headless import HeadlessFrontEnd
from tests.conftest import run_in_lab
from tests.test_tui import SIZE
from tests.test_tui_keys import IdleApp, show
from wizard.events import CommandFinished


async def test_every_non_zero_exit_of_a_clean_demo_run_is_one_its_command_expects(tmp_path):
    frontend = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
    outcome, _ = await run_in_lab(tmp_path, frontend)
    assert outcome.exit_code == 0
    finished = [e for e in frontend.events if isinstance(e, CommandFinished)]
    non_zero = [e for e in finished if e.exit_status not in (0, None)]
    assert any(e.command.startswith("pkill ") for e in non_zero)  # the case at hand
    unexpected = [(e.command[:80], e.exit_status) for e in non_zero if not e.expected]
    assert unexpected == []
    pkill = next(e for e in non_zero if e.command.startswith("pkill "))
    assert pkill.exit_status == 1 and pkill.expected == "no server was left to stop (it had ended)"


async def test_the_log_says_what_an_expected_exit_means_and_shows_others_as_errors():
    app = IdleApp()
    async with app.run_test(size=SIZE) as pilot:
        await show(app, pilot, "main")
        main = app.main()
        main.engine_event(CommandFinished("aistor-01", "pkill -f 'ib_write_bw .*-p 1'", 1, 0.1,
                                          "no server was left to stop (it had ended)"))  # fmt: skip
        main.engine_event(CommandFinished("gpu-1", "dcb pfc set dev x", 2, 0.1))
        lines = [line.split(" ", 1)[1] for line in main.transcript[-2:]]
    assert lines == [
        "aistor-01: exit 1, as expected: no server was left to stop (it had ended)",
        "gpu-1: exit status 2",
    ]
