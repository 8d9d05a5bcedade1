"""The layout at a jump host's 80x24 and larger: snapshots of the main, fleet, review,
maintenance and report screens at 80x24, 100x30 and 160x48, and the properties a snapshot
alone would not hold: the maintenance gate's diff keeps a height at 80x24 (it had zero:
the operator confirmed a disruptive change blind), the buttons and the footer fit."""

from __future__ import annotations

import pytest
from textual.widgets import Input

from frontend.tui.failed import FailedStepScreen
from frontend.tui.fleet import FleetScreen
from frontend.tui.modals import MaintenanceScreen, ReviewScreen
from frontend.tui.report import ReportData, ReportScreen
from frontend.tui.widgets.findings_table import MESSAGE_MIN
from tests.test_tui import maintenance_decision, wait_for
from tests.test_tui_keys import PLAN, SITE, IdleApp, failed_decision, show
from wizard.events import (
    ArtifactDiff,
    Decision,
    DecisionKind,
    OutputLine,
    StepFinished,
    StepStarted,
)
from wizard.model import Finding, Severity, StepState

SIZES = [(80, 24), (100, 30), (160, 48)]


def gate_decision() -> Decision:
    base = maintenance_decision()
    actions = (
        "kubectl cordon gpu-b300-01",
        "kubectl drain gpu-b300-01 --ignore-daemonsets --delete-emptydir-data",
        "leave bond1 through its manager (NetworkManager / networkd / ip)",
        "ethtool --set-priv-flags ens5f0np0 fw-lldp-agent off",
        "dcb app add dev ens5f0np0 dscp-prio 24:3",
        "dcb pfc set dev ens5f0np0 prio-pfc 3:on",
        "rejoin bond1; wait (at most 90 s) for LACP and the RDMA device",
        "kubectl uncordon gpu-b300-01   (only once verified)",
    )
    return Decision(**{**base.__dict__, "actions": actions})


def review_decision() -> Decision:
    diff = (
        "--- live: ConfigMap kube-system/rdma-devices\n+++ desired: ConfigMap kube-system/rdma-devices\n"
        '@@ -8,7 +8,7 @@\n         {\n           "resourceName": "e810",\n'
        '-          "rdmaHcaMax": 32,\n+          "rdmaHcaMax": 64,\n'
    )
    return Decision(
        DecisionKind.CONFIRM_APPLY, "rdma-plugin.install", "The RDMA shared device plugin", "cluster",
        "1 change(s) on cluster",
        diffs=(ArtifactDiff("x", "ConfigMap kube-system/rdma-devices", diff, True),),
        actions=("kubectl -n kube-system apply -f rdma-devices-configmap.yaml -f rdma-plugin-daemonset.yaml",),
    )  # fmt: skip


FINDINGS = [
    Finding("T00.os", "T00", Severity.PASS, "RHEL 10.2 as expected"),
    Finding("T00.containerd-version", "T00", Severity.PASS, "containerd 2.1.4 (>= 2.0)"),
    Finding("T00.kernel", "T00", Severity.WARN, "kernel differs from the CPU workers: 6.12.0-124 vs 6.12.0-55",
            "align the kernels before the join"),
    Finding("qos.apply.skipped", "T08", Severity.SKIP,
            "qos.apply on gpu-1: skipped by the operator: the maintenance window was not confirmed"),
]  # fmt: skip


async def fill(app: IdleApp, pilot) -> None:
    """A main screen some way into a run, on a fixed clock."""
    main = app.main()
    main.clock = lambda: 100.0
    main.wall = lambda: "12:00:00"
    main._run_started = 100.0
    main.deliver(StepStarted("preflight.host", "gpu-1", "Host preflight"))
    for n in range(30):
        main.deliver(OutputLine("gpu-1", f"output line {n}"))
    main.deliver(StepFinished("preflight.host", "gpu-1", StepState.DONE, "", tuple(FINDINGS[:3])))
    main.deliver(StepStarted("preflight.containerd", "gpu-1", "containerd >= 2.0"))
    await wait_for(pilot, lambda: not main._inbox and not main._inbox_posted, 5)
    main.query_one("#findings").focus()  # one focus, whatever the mount order did
    main._tick()
    log = main.query_one("#log")
    # The log follows after a refresh: on a loaded machine that can be a while.
    await wait_for(pilot, lambda: log.max_scroll_y > 0 and log.scroll_y == log.max_scroll_y, 10)
    await pilot.pause(0.2)
    await pilot.wait_for_scheduled_animations()


SCREENS = {
    "main": None,
    "fleet": lambda app: FleetScreen(app.main()),
    "review": lambda app: ReviewScreen(review_decision()),
    "maintenance": lambda app: MaintenanceScreen(gate_decision()),
    "report": lambda app: ReportScreen(
        ReportData.of_run(SITE, PLAN, {}, [("preflight.host", "gpu-1", f) for f in FINDINGS]), None
    ),
    "failed": lambda app: FailedStepScreen(failed_decision()),
}


async def shown(app: IdleApp, pilot, name: str):
    await show(app, pilot, "main")
    await fill(app, pilot)
    if SCREENS[name] is not None:
        screen = SCREENS[name](app)
        await app.push_screen(screen)
        await pilot.pause(0.3)
    # A focused Input's cursor blinks (Textual's default): the snapshot would depend on when
    # it is taken (the maintenance gate's name box flaked so on a loaded machine).
    for box in app.screen.query(Input):
        box.cursor_blink = False
    await pilot.pause()
    return app.screen


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", list(SCREENS))
async def test_screen_snapshot(name, size, snapshot):
    app = IdleApp()
    async with app.run_test(size=size) as pilot:
        await shown(app, pilot, name)
        assert app.export_screenshot() == snapshot


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_maintenance_gate_keeps_its_diff_and_buttons_in_view(size):
    app = IdleApp()
    async with app.run_test(size=size) as pilot:
        screen = await shown(app, pilot, "maintenance")
        width, height = size
        diffs = screen.query_one("#diffs")
        assert diffs.region.height >= 8  # never a zero-height diff and rollback area
        for button in ("#cancel", "#confirm"):
            region = screen.query_one(button).region
            assert region.bottom <= height - 1 and region.right <= width  # above the footer
        assert screen.query_one("#node-name").region.height == 3


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_failed_step_dialog_keeps_its_evidence_reason_and_buttons_in_view(size):
    app = IdleApp()
    async with app.run_test(size=size) as pilot:
        screen = await shown(app, pilot, "failed")
        width, height = size
        assert screen.query_one("#diffs").region.height >= 3  # the failing checks
        assert screen.query_one("#reason").region.height == 3
        for button in ("#proceed", "#waive", "#skip", "#abort"):
            region = screen.query_one(button).region
            assert region.height and region.bottom <= height - 1 and region.right <= width, button


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_main_screen_footer_and_findings_fit(size):
    app = IdleApp()
    async with app.run_test(size=size) as pilot:
        main = await shown(app, pilot, "main")
        width, _ = size
        footer = main.query_one("Footer")
        keys = [k for k in footer.query("FooterKey") if k.display]
        assert keys and max(k.region.right for k in keys) <= width  # no key cut off
        assert {k.key for k in keys} >= {"l", "f", "r", "m", "n", "question_mark", "q"}
        table = main.query_one("#findings")
        message = table.columns[next(k for k in table.columns if k.value == "message")]
        used = sum(c.get_render_width(table) for c in table.columns.values() if c is not message)
        assert table.size.width - used >= MESSAGE_MIN  # the message keeps some room
        sidebar = main.query_one("#sidebar")
        assert sidebar.display is (width >= 100)  # collapses below 100 columns


async def test_the_sidebar_comes_back_on_p_when_narrow():
    app = IdleApp()
    async with app.run_test(size=(80, 24)) as pilot:
        main = await shown(app, pilot, "main")
        assert not main.query_one("#sidebar").display
        await pilot.press("p")
        await pilot.pause()
        assert main.query_one("#sidebar").display


async def test_the_report_shows_every_gate_t00_to_t17_at_140x45():
    app = IdleApp()
    async with app.run_test(size=(140, 45)) as pilot:
        screen = await shown(app, pilot, "report")
        table = screen.query_one("#gates")
        assert table.row_count == 18
        assert table.region.height >= 19 and table.max_scroll_y == 0  # T17 in view, no scrolling


# -- issue #28, point 7: what matters is never cut ------------------------------------------


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_check_names_and_node_names_are_never_cut_the_message_shrinks(size):
    """At 100x30 check names were cut to 14 characters: the names `--waive` needs."""
    app = IdleApp()
    async with app.run_test(size=size) as pilot:
        main = await shown(app, pilot, "main")
        table = main.query_one("#findings")
        widths = {c.key.value: c.get_render_width(table) - 2 * table.cell_padding
                  for c in table.columns.values()}  # fmt: skip
        longest_check = max(len(f.check) for f in FINDINGS[:3])
        assert widths["check"] >= longest_check, widths
        assert widths["target"] >= len("gpu-1"), widths
        assert widths["message"] >= 10, widths  # the message shrinks, and stays readable
        used = sum(c.get_render_width(table) for c in table.columns.values())
        assert used <= table.size.width, (used, table.size.width)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_help_starts_in_view_and_scrolls_to_its_end(size):
    """At 160x48 the help's first lines were above the screen and could not be reached."""
    from frontend.tui.modals import HelpScreen

    app = IdleApp()
    async with app.run_test(size=size) as pilot:
        await show(app, pilot, "main")
        screen = HelpScreen()
        await app.push_screen(screen)
        await pilot.pause(0.3)
        _, height = size
        title = screen.query_one(".dialog-title")
        assert title.region.y >= 0 and title.region.height == 1
        scroll = screen.query_one("#help-scroll")
        assert scroll.region.y >= 0 and scroll.region.bottom <= height
        await pilot.press("end")
        await pilot.wait_for_scheduled_animations()
        await pilot.pause(0.3)
        assert scroll.scroll_y == scroll.max_scroll_y
        close = screen.query_one("#close")
        assert close.region.height and close.region.bottom <= height


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_nodes_view_shows_node_rows(size):
    """At 80x24 the nodes view showed no node row at all."""
    app = IdleApp()
    async with app.run_test(size=size) as pilot:
        main = await show(app, pilot, "main")
        await fill(app, pilot)
        many = tuple(Finding(f"T02.check-{n}", "T02", Severity.FAIL, f"problem {n} " * 6)
                     for n in range(12))  # fmt: skip
        main.deliver(StepFinished("irdma.verify", "gpu-1", StepState.FAILED, "", many))
        await pilot.pause(0.3)
        screen = FleetScreen(main)
        await app.push_screen(screen)
        await pilot.pause(0.3)
        table = screen.query_one("#fleet")
        table.move_cursor(row=0)
        await pilot.pause(0.2)
        assert table.region.height >= 3, table.region  # the header and rows
        assert table.row_count >= 1
        footer = screen.query_one("Footer")
        assert table.region.bottom <= footer.region.y


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("name", ["review", "maintenance", "failed"])
async def test_toasts_never_cover_a_dialogs_buttons(name, size):
    app = IdleApp()
    async with app.run_test(size=size, notifications=True) as pilot:
        screen = await shown(app, pilot, name)
        app.notify("copied to the clipboard (OSC 52)", timeout=10)
        app.notify("a second, longer notice about something that happened on gpu-1", timeout=10)
        await pilot.pause(0.5)
        toasts = [t.region for t in app.screen.query("Toast")]
        assert toasts
        for button in screen.query("Button"):
            if not button.display or not button.region.height:
                continue
            for toast in toasts:
                assert not toast.overlaps(button.region), (button.id, toast, button.region)
