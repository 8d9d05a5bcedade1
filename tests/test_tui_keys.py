"""Every key a screen shows (its footer, the help) does something without an exception.

An operator learns the keys from the footer and `?`; a key that crashes the app in the
middle of a run (`l` and `f` did: `InvalidQueryFormat: Unable to parse filter 'log'`) is
the worst first hour there is. Each screen is shown on a WizardApp whose engine never
starts, and each of its active bindings is pressed on a fresh instance of the screen.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.screen import Screen
from textual.widgets import Button, Input, Static

from frontend.tui.app import ErrorScreen, Failure, InternalErrorScreen, WizardApp
from frontend.tui.failed import FailedStepScreen
from frontend.tui.fleet import FleetScreen
from frontend.tui.logview import FollowLog, LogScreen
from frontend.tui.main import MainScreen
from frontend.tui.measurements import MeasurementsScreen
from frontend.tui.modals import (
    HelpScreen,
    MaintenanceScreen,
    ManualScreen,
    QuitScreen,
    ReviewScreen,
    RollbackScreen,
)
from frontend.tui.report import ReportData, ReportScreen
from frontend.tui.start import StartScreen
from steps import build_plan
from tests.conftest import MINIMAL_SITE
from tests.test_tui import labels_review, maintenance_decision, wait_for
from wizard.events import (
    CommandStarted,
    Decision,
    DecisionKind,
    OutputLine,
    ShownFile,
    StepFinished,
    StepStarted,
    Waiting,
)
from wizard.model import Evidence, Finding, Severity, StepState
from wizard.site import parse_site
from wizard.status import Status

SITE = parse_site(MINIMAL_SITE)
PLAN = build_plan()
QUIT_ACTIONS = {"app.quit", "quit", "choose('quit')"}
# Textual's own screen keys (focus moves, its copy of a selection): not ours to test.
TEXTUAL_ACTIONS = {
    "app.focus_next",
    "app.focus_previous",
    "screen.copy_text",
    "app.command_palette",
}


class IdleApp(WizardApp):
    """The WizardApp with its actions and bindings, and an engine that never starts."""

    def __init__(self) -> None:
        async def never():
            import asyncio

            await asyncio.Event().wait()

        super().__init__(never, auto_start=True)

    def main(self) -> MainScreen:
        if self.main_screen is None:
            self.main_screen = MainScreen(SITE, PLAN)
        return self.main_screen


def rollback_decision() -> Decision:
    failing = Finding(
        "T08.qos-identical", "T08", Severity.FAIL, "ens5f1np1 has PFC off on priority 3",
        "run the rollback, then check the port", (Evidence("dcb pfc show dev ens5f1np1", "prio-pfc 3:off"),),
    )  # fmt: skip
    return Decision(
        DecisionKind.ROLLBACK, "qos.apply", "RoCE QoS", "gpu-1",
        "verification failed on gpu-1 (T08.qos-identical: ens5f1np1 has PFC off on priority 3)",
        rollback="dcb app del dev ens5f0np0 dscp-prio 24:3", findings=(failing,),
    )  # fmt: skip


def manual_decision() -> Decision:
    fragment = ShownFile("cluster/kubespray/hosts-fragment.yaml", "the Kubespray inventory",
                         "inventory fragment", "all:\n  hosts:\n    gpu-1: {ansible_host: 10.0.0.1}\n")  # fmt: skip
    return Decision(DecisionKind.MANUAL_DONE, "join.kubespray", "Kubespray join", "gpu-1",
                    "ansible-playbook -i inventory/mycluster scale.yml --limit gpu-1",
                    files=(fragment,))  # fmt: skip


async def test_a_manual_steps_files_are_shown_whole_and_each_can_be_copied():
    app = IdleApp()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = ManualScreen(manual_decision())
        await app.push_screen(screen)
        await wait_for(pilot, lambda: screen.is_mounted, 5)
        assert "gpu-1: {ansible_host: 10.0.0.1}" in str(screen.query_one(".file", Static).content)
        await pilot.click("#copy_0")
        await pilot.pause()
        assert app.clipboard == manual_decision().files[0].content
        assert app.screen is screen  # copying answers nothing
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.clipboard.startswith("ansible-playbook") and "ansible_host" in app.clipboard


MEASUREMENTS = [
    {"target": "gpu-1", "name": "host.line_rate_port", "value": 400.0, "unit": "Gb/s"},
    {"target": "gpu-1", "name": "baseline.ib_write_bw.q4", "value": 361.0, "unit": "Gb/s"},
    {"target": "gpu-1", "name": "qos.ib_write_bw.q4", "value": 358.0, "unit": "Gb/s"},
]


def failed_decision(waivable: bool = True) -> Decision:
    failing = Finding(
        "T11.acs", "T11", Severity.FAIL, "ACS is on (SrcValid+) above GPU0 and mlx5_0",
        "turn ACS off in the BIOS", (Evidence("lspci -vvv", "ACSCtl: SrcValid+"),),
    )  # fmt: skip
    return Decision(
        DecisionKind.RETRY_FAILED, "gpudirect.readiness", "GPUDirect readiness failed", "gpu-1",
        "gpudirect.readiness failed on gpu-1: T11.acs.", findings=(failing,), waivable=waivable,
    )  # fmt: skip


def failure() -> Failure:
    return Failure(ValueError("x"), "step preflight.host on gpu-1", Path("/tmp/j.jsonl"), "trace")


SCREENS = {
    "main": lambda app: app.main(),
    "fleet": lambda app: FleetScreen(app.main()),
    "log": lambda app: LogScreen(["gpu-1$ uname -r", "gpu-1| 6.12.0"]),
    "review": lambda app: ReviewScreen(labels_review(other_nodes=2)),
    "manual": lambda app: ManualScreen(manual_decision()),
    "maintenance": lambda app: MaintenanceScreen(maintenance_decision()),
    "rollback": lambda app: RollbackScreen(rollback_decision()),
    "failed": lambda app: FailedStepScreen(failed_decision()),
    "report": lambda app: ReportScreen(ReportData.of_run(SITE, PLAN, {}, []), None),
    "measurements": lambda app: MeasurementsScreen(MEASUREMENTS),
    "start": lambda app: StartScreen(SITE, Status(Path("/nonexistent"), exists=False)),
    "quit": lambda app: QuitScreen({"gpu-1": "cordoned, QoS half applied"}),
    "help": lambda app: HelpScreen(),
    "error": lambda app: ErrorScreen("the site file has no nodes"),
    "internal-error": lambda app: InternalErrorScreen(failure()),
}


async def show(app: IdleApp, pilot, name: str) -> Screen:
    """Take every screen down to the default one, then show a fresh ``name``."""
    while len(app.screen_stack) > 1:
        app.pop_screen()
        await pilot.pause()
    if name == "main":
        app.main_screen = None
    screen = SCREENS[name](app)
    if name == "fleet":
        await app.push_screen(app.main())
    await app.push_screen(screen)
    await wait_for(pilot, lambda: screen.is_mounted and app.screen is screen, 5)
    return screen


def keys_of(app: IdleApp) -> dict[str, str]:
    """key -> action of every binding of the shown screen and of the app (what the footer
    and the help draw from). A focused widget's own keys (a table's arrows) are Textual's."""
    keys = {}
    for key, active in app.active_bindings.items():
        if active.node is app and key not in {"question_mark", "m", "q"}:
            continue  # Textual's own app keys (ctrl+q, ctrl+c...) are not ours to test
        if active.node is not app and active.node is not app.screen:
            continue
        if active.binding.action in TEXTUAL_ACTIONS:
            continue
        keys[key] = active.binding.action
    return keys


@pytest.mark.parametrize("name", list(SCREENS))
async def test_every_key_of_every_screen_works(name):
    app = IdleApp()
    pressed = []
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, name)
        keys = keys_of(app)
        assert keys, f"{name} shows no key"
        for key, action in keys.items():
            if action in QUIT_ACTIONS:
                continue  # leaving the app: see the test below
            await show(app, pilot, name)
            await pilot.press(key)
            await pilot.pause()
            pressed.append(key)
            assert app.return_code is None and app._exception is None, (
                f"{name}: {key} ({action}) ended the app: {app._exception!r}"
            )
    assert pressed or name in ("error", "internal-error")


@pytest.mark.parametrize("name", [n for n in SCREENS if n not in ("help", "start", "quit")])
async def test_q_quits_from_every_screen_cleanly(name):
    """`q` leaves from anywhere (HelpScreen closes on it; the start screen answers quit
    to the conductor)."""
    app = IdleApp()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await show(app, pilot, name)
        if isinstance(screen, MaintenanceScreen):
            screen.query_one("#cancel", Button).focus()  # not the name box: q is a letter there
        if isinstance(screen, FailedStepScreen):
            screen.query_one("#proceed", Button).focus()  # not the reason box, as above
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None, 5)
    assert app.return_code == 0


async def test_l_opens_the_full_log_with_a_search_and_f_focuses_the_findings():
    app = IdleApp()
    async with app.run_test(size=(120, 40)) as pilot:
        main = await show(app, pilot, "main")
        main.wall = lambda: "12:00:00"
        for n in range(300):
            main.deliver(OutputLine("gpu-1", f"line {n} {'ice' if n % 100 == 7 else 'x'}"))
        await pilot.pause(0.2)
        await pilot.press("f")
        assert app.focused is main.query_one("#findings")
        await pilot.press("l")
        await wait_for(pilot, lambda: isinstance(app.screen, LogScreen) and app.screen.is_mounted)
        log = app.screen.query_one("#full-log", FollowLog)
        assert log.line_count == 300
        await pilot.press("slash")
        assert isinstance(app.focused, Input)
        await pilot.press(*"ice")
        await pilot.pause(0.1)
        assert [line for line in log.lines] == [
            "12:00:00 gpu-1| line 7 ice",
            "12:00:00 gpu-1| line 107 ice",
            "12:00:00 gpu-1| line 207 ice",
        ]
        assert "3 of 300 lines contain 'ice'" in str(app.screen.query_one("#log-count").content)
        main.deliver(OutputLine("gpu-1", "modinfo ice: version 2.3.10"))  # still live
        main.deliver(OutputLine("gpu-1", "no match"))
        await wait_for(pilot, lambda: log.line_count == 4, 5)
        await pilot.press("escape")  # leaves the search box
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is main)


async def test_the_live_log_follows_new_output_unless_scrolled_up():
    app = IdleApp()
    async with app.run_test(size=(120, 40)) as pilot:
        main = await show(app, pilot, "main")
        log = main.query_one("#log", FollowLog)
        for n in range(200):
            main.deliver(CommandStarted("gpu-1", f"cmd {n}"))
        await pilot.pause(0.3)
        assert log.max_scroll_y > 0 and log.scroll_y == log.max_scroll_y  # the newest line shows
        log.focus()
        await pilot.press("pageup")  # the operator reads back
        await pilot.pause(0.1)
        held = log.scroll_y
        assert held < log.max_scroll_y
        for n in range(50):
            main.deliver(CommandStarted("gpu-1", f"more {n}"))
        await pilot.pause(0.3)
        assert log.scroll_y == held  # not yanked to the end while reading
        await pilot.press("end")  # follow again
        for n in range(50):
            main.deliver(CommandStarted("gpu-1", f"again {n}"))
        await pilot.pause(0.3)
        assert log.scroll_y == log.max_scroll_y


async def test_pagedown_scrolls_a_dialogs_diff_from_any_focus():
    long = "".join(f"+line {n}\n" for n in range(200))
    decision = labels_review(other_nodes=0)
    decision = Decision(**{**decision.__dict__, "diffs": (
        type(decision.diffs[0])("x", "a long ConfigMap", long, True),)})  # fmt: skip
    app = IdleApp()
    async with app.run_test(size=(100, 30)) as pilot:
        await app.push_screen(ReviewScreen(decision))
        await wait_for(pilot, lambda: app.screen.is_mounted and app.screen.query("#diffs"))
        diffs = app.screen.query_one("#diffs")
        # The diffs have the focus (Enter decides nothing); from a button too, pagedown
        # scrolls the diff.
        app.screen.query(Button).first().focus()
        await pilot.pause(0.05)
        assert isinstance(app.focused, Button)
        await pilot.press("pagedown")
        await pilot.pause(0.1)
        assert diffs.scroll_y > 0


async def test_dialogs_show_their_own_keys_in_their_footer():
    app = IdleApp()
    async with app.run_test(size=(120, 40)) as pilot:
        await show(app, pilot, "review")
        keys = keys_of(app)
        assert keys["a"] == "answer('proceed')" and keys["s"] == "answer('skip')"
        assert "l" not in keys and "n" not in keys  # not the main screen's keys
        assert app.screen.query("Footer")


async def test_step_and_run_elapsed_times_are_shown():
    app = IdleApp()
    async with app.run_test(size=(120, 40)) as pilot:
        main = await show(app, pilot, "main")
        now = [1000.0]
        main.clock = lambda: now[0]
        main.wall = lambda: "23:04:05"
        main._run_started = 900.0
        main.deliver(StepStarted("preflight.host", "gpu-1", "Host preflight"))
        await pilot.pause(0.1)
        now[0] = 1012.5
        main._tick()
        assert (
            str(main.query_one("#elapsed").content) == "preflight.host on gpu-1: 12.5s · run 1:52"
        )
        main.deliver(StepFinished("preflight.host", "gpu-1", StepState.DONE))
        await pilot.pause(0.1)
        # Every log line says when (a log read later, or copied into a ticket, needs it).
        assert main.transcript[-1] == "23:04:05 gpu-1: preflight.host: done (12.5s)"
        # A reboot: how far into the step's own limit (first: it is cut last), gone when
        # the step ends.
        main.deliver(StepStarted("operate.reboot", "gpu-1", "Reboot"))
        main.deliver(Waiting("operate.reboot", "gpu-1", "waiting for gpu-1 to come back", 900.0))
        await pilot.pause(0.1)
        now[0] = 1072.5
        main._tick()
        assert str(main.query_one("#elapsed").content) == (
            "⧗ 1:00 of 15:00: waiting for gpu-1 to come back · operate.reboot on gpu-1: 1:00"
            " · run 2:52"
        )
        main.deliver(StepFinished("operate.reboot", "gpu-1", StepState.DONE))
        await pilot.pause(0.1)
        main._tick()
        assert "waiting" not in str(main.query_one("#elapsed").content)
        now[0] = 1100.0
        main.run_ended()
        assert str(main.query_one("#elapsed").content) == "the run took 3:20"


async def test_rollback_dialog_names_the_failing_check_with_its_evidence():
    app = IdleApp()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await show(app, pilot, "rollback")
        text = str(screen.query_one("#failing", Static).content)
        assert "T08.qos-identical: ens5f1np1 has PFC off on priority 3" in text
        assert "$ dcb pfc show dev ens5f1np1" in text and "prio-pfc 3:off" in text


async def test_maintenance_gate_shows_the_ordered_actions_and_no_rollback_for_a_reboot():
    base = maintenance_decision()
    actions = ("kubectl cordon gpu-b300-01", "systemctl reboot", "kubectl uncordon gpu-b300-01")
    reboot = Decision(**{**base.__dict__, "actions": actions, "reversible": False,
                         "rollback": "A reboot cannot be undone."})  # fmt: skip
    app = IdleApp()
    async with app.run_test(size=(120, 40)) as pilot:
        await app.push_screen(MaintenanceScreen(reboot))
        await wait_for(pilot, lambda: app.screen.is_mounted and app.screen.query("#actions"))
        shown = str(app.screen.query_one("#actions", Static).content)
        assert shown.splitlines() == [
            " 1. kubectl cordon gpu-b300-01", " 2. systemctl reboot", " 3. kubectl uncordon gpu-b300-01",
        ]  # fmt: skip
        assert "cannot be undone" in str(app.screen.query_one("#no-rollback", Static).content)
        assert "Rollback plan" not in " ".join(
            str(label.content) for label in app.screen.query(".diff-title")
        )


async def test_problems_only_lists_failures_first_and_f_again_shows_all():
    app = IdleApp()
    async with app.run_test(size=(120, 40)) as pilot:
        main = await show(app, pilot, "main")
        findings = (
            Finding("T00.os", "T00", Severity.PASS, "RHEL 10.2"),
            Finding("T00.kernel", "T00", Severity.WARN, "kernel differs"),
            Finding("T00.gpu-count", "T00", Severity.FAIL, "7 GPUs, expected 8"),
            Finding("qos.apply.skipped", "T08", Severity.SKIP, "skipped by the operator"),
            Finding("T02.not-configured", "T02", Severity.SKIP, "nothing to check"),
        )
        main.deliver(StepFinished("preflight.host", "gpu-1", StepState.FAILED, "", findings))
        await pilot.pause(0.1)
        table = main.query_one("#findings")

        def checks():
            return [str(table.get_row_at(i)[2]) for i in range(table.row_count)]

        assert len(checks()) == 5
        await pilot.press("F")
        await pilot.pause(0.1)
        assert checks() == ["T00.gpu-count", "T00.kernel", "qos.apply.skipped"]
        await pilot.press("F")
        await pilot.pause(0.1)
        assert len(checks()) == 5


async def test_the_live_log_stays_at_the_end_when_the_panes_above_it_grow():
    app = IdleApp()
    async with app.run_test(size=(100, 30)) as pilot:
        main = await show(app, pilot, "main")
        log = main.query_one("#log", FollowLog)
        for n in range(100):
            main.deliver(CommandStarted("gpu-1", f"cmd {n}"))
        await wait_for(pilot, lambda: log.max_scroll_y > 0 and log.scroll_y == log.max_scroll_y, 5)
        evidence = tuple(Evidence(f"probe {n}", "line\nline") for n in range(4))
        big = Finding("T00.iommu", "T00", Severity.WARN, "translated", "passthrough", evidence)
        small = Finding("T00.gpu-count", "T00", Severity.FAIL, "7 GPUs")
        main.deliver(StepFinished("preflight.gpus", "gpu-1", StepState.FAILED, "", (big, small)))
        await wait_for(pilot, lambda: log.scroll_y == log.max_scroll_y, 5)
        height = log.size.height
        table = main.query_one("#findings")
        table.move_cursor(row=0)  # the big detail: the log shrinks, and nothing is written
        await wait_for(pilot, lambda: log.size.height < height, 5)
        await pilot.pause(0.2)
        assert log.scroll_y == log.max_scroll_y


async def test_the_report_opens_with_the_first_gates_findings_shown():
    """It said "no findings for this gate yet" under T00's nine findings: the table's first
    highlight comes before its rows, with no key (seen in the tmux walk)."""
    findings = [
        ("preflight.host", "gpu-1", Finding("T00.os", "T00", Severity.PASS, "RHEL 10.2")),
        ("preflight.host", "gpu-1", Finding("T00.kernel", "T00", Severity.WARN, "kernel differs")),
    ]
    app = IdleApp()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = ReportScreen(ReportData.of_run(SITE, PLAN, {}, findings), None)
        await app.push_screen(screen)
        await wait_for(pilot, lambda: screen.is_mounted, 5)
        await pilot.pause(0.1)
        detail = str(screen.query_one("#gate-detail", Static).content)
        assert "T00.kernel: kernel differs" in detail and "T00.os" in detail
        await pilot.press("down")  # T01: nothing yet
        await pilot.pause(0.1)
        assert "no findings for this gate yet" in str(screen.query_one("#gate-detail").content)


async def test_a_gate_of_many_passes_says_they_pass_and_of_many_findings_shows_the_problems():
    many = [("s", "gpu-1", Finding(f"T02.c{n}", "T02", Severity.PASS, "fine")) for n in range(9)]
    warn = ("s", "gpu-1", Finding("T10.lacp", "T10", Severity.WARN, "slow LACP"))
    tens = [("s", "gpu-1", Finding(f"T10.c{n}", "T10", Severity.PASS, "ok")) for n in range(9)]
    app = IdleApp()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = ReportScreen(ReportData.of_run(SITE, PLAN, {}, [*many, *tens, warn]), None)
        await app.push_screen(screen)
        await wait_for(pilot, lambda: screen.is_mounted, 5)
        screen.show_gate("T02")
        detail = str(screen.query_one("#gate-detail").content)
        assert "all 9 pass" in detail and "T02.c0" in detail
        assert "no findings" not in detail  # it said so, under nine passes
        screen.show_gate("T10")
        detail = str(screen.query_one("#gate-detail").content)
        assert "T10.lacp: slow LACP" in detail and "and 9 more that pass" in detail
