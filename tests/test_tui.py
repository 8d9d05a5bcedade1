"""The TUI with Textual's Pilot over the lab: start/resume, review with a diff, skip and
apply, the maintenance modal, the error panel, snapshots, and a tmux smoke test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
from textual.app import App
from textual.widgets import Button, Input, Static

from frontend.lab_session import open_lab
from frontend.session import open_site
from frontend.tui.app import WizardApp
from frontend.tui.modals import MaintenanceScreen, ReviewScreen
from tests.conftest import REPO
from wizard.checkpoint import Checkpoint
from wizard.events import Answer, ArtifactDiff, Decision, DecisionKind
from wizard.model import Severity, StepState

SIZE = (140, 45)


async def wait_for(pilot, condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await pilot.pause(0.05)
        if condition():
            return
    app = pilot.app
    raise AssertionError(
        f"timed out waiting for the TUI (on {type(app.screen).__name__}; "
        f"last notices: {[str(n.message)[:120] for n in list(app._notifications)[-3:]]})"
    )


async def run_to_end(pilot, app, timeout: float = 30.0) -> list:
    """Wait for the run to end, leaving each failed step failed (ctrl+l at its dialog), as an
    operator who reads the findings afterwards would. Returns the failed-step decisions."""
    asked = []
    deadline = time.monotonic() + timeout
    while not app.finished:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for the run to end (on {screen_name(app)})")
        if screen_name(app) == "FailedStepScreen" and all(
            d is not app.screen.decision for d in asked
        ):
            asked.append(app.screen.decision)
            await pilot.press("ctrl+l")
        await pilot.pause(0.05)
    return asked


def screen_name(app) -> str:
    """The active screen's class name, once it is mounted (its widgets composed).

    `app.screen` changes as soon as a screen is pushed, before its widgets exist; a
    test that queries a widget right after seeing the name would race the mount.
    """
    screen = app.screen
    return type(screen).__name__ if screen.is_mounted else "(mounting)"


async def test_start_review_skip_then_apply_on_resume(tmp_path):
    state = tmp_path / "state"
    holder = {}

    async def opener():
        holder["session"] = await open_lab(("irdma-not-loaded",), 1, state)
        return holder["session"]

    app = WizardApp(opener)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: screen_name(app) == "StartScreen")
        assert "No checkpoint yet" in str(
            app.screen.query_one("#checkpoint-summary", Static).content
        )
        await pilot.press("enter")
        await wait_for(pilot, lambda: screen_name(app) == "ReviewScreen")
        review = app.screen
        assert review.decision.step == "irdma.enable"
        diffs = "".join(d.diff for d in review.decision.diffs)
        assert "+irdma" in diffs and "+options irdma roce_ena=1" in diffs
        assert app.focused is review.query_one("#diffs")  # no button: Enter decides nothing
        lab_host = holder["session"].lab.hosts["gpu-b300-01"]
        assert "irdma" not in lab_host.state.modules
        await pilot.press("s")  # skip: irdma.verify builds on it, so it asks first
        await wait_for(pilot, lambda: screen_name(app) == "ConfirmSkipScreen")
        await pilot.press("y")
        asked = await run_to_end(pilot, app)
        assert [d.step for d in asked] == ["irdma.verify"]  # offered a retry, left failed
        assert "irdma" not in lab_host.state.modules
        assert app.summary.stopped  # irdma.verify then failed: the run stops at phase 5
    with Checkpoint.open(state, holder["session"].site) as checkpoint:
        assert checkpoint.step_state("irdma.enable", "gpu-b300-01") is StepState.SKIPPED


async def test_apply_changes_the_host_and_the_run_continues(tmp_path):
    holder = {}

    async def opener():
        # greenfield: the join is the operator's manual Kubespray run (no checkout named)
        holder["session"] = await open_lab(
            ("greenfield", "irdma-not-loaded"), 1, tmp_path / "state"
        )
        return holder["session"]

    app = WizardApp(opener, auto_start=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: screen_name(app) == "ReviewScreen")
        await pilot.press("a")
        await wait_for(pilot, lambda: screen_name(app) == "ManualScreen")  # the Kubespray join
        # The files the operator merges are shown whole, not only named.
        files = {f.path: f for f in app.screen.decision.files}
        assert "cluster/kubespray/hosts-fragment.yaml" in files
        assert "gpu-b300-01" in files["cluster/kubespray/hosts-fragment.yaml"].content
        shown = " ".join(str(s.content) for s in app.screen.query(".file"))
        assert files["cluster/kubespray/hosts-fragment.yaml"].content.strip() in shown
        host = holder["session"].lab.hosts["gpu-b300-01"]
        assert "irdma" in host.state.modules
        assert "roce_ena=1" in host.files["/etc/modprobe.d/irdma.conf"]
        phases = app.main_screen.query_one("#phases")
        assert phases.get_cell("irdma", "gpu-b300-01") == "✔"


async def test_fleet_view_shows_each_node_per_phase_and_the_one_that_failed(tmp_path):
    holder = {}

    async def opener():
        holder["session"] = await open_lab((), 8, tmp_path / "state")
        holder["session"].lab.hosts["gpu-b300-03"].state.gpu_count = 7  # one node lost a GPU
        return holder["session"]

    app = WizardApp(opener, auto_start=True)
    async with app.run_test(size=SIZE) as pilot:
        asked = await run_to_end(pilot, app, timeout=60)
        assert [d.target for d in asked] == ["gpu-b300-03"]  # one dialog, only the failed node
        assert "phase 1" in app.summary.stopped
        sidebar = app.main_screen.query_one("#phases")
        assert sidebar.get_cell("preflight", "fleet") == "✔7 ✖1"
        # The findings table lists what needs attention; every pass stays in the data.
        findings = app.main_screen.query_one("#findings")
        problems = [f for _, _, f in app.main_screen.findings if f.severity is not Severity.PASS]
        assert findings.row_count == len(problems) >= 1
        assert len(app.main_screen.findings) > 8 * findings.row_count
        await pilot.press("n")
        await wait_for(pilot, lambda: screen_name(app) == "FleetScreen")
        table = app.screen.query_one("#fleet")
        assert table.row_count == 8
        assert table.get_cell("gpu-b300-03", "preflight") == "✖"
        assert "T00.gpu-count" in table.get_cell("gpu-b300-03", "problem")
        assert table.get_cell("gpu-b300-01", "preflight") == "✔"
        assert table.get_cell("gpu-b300-01", "problem") == ""
        summary = str(app.screen.query_one("#fleet-summary").content)
        assert "8 nodes" in summary and "1 ✖ with a problem" in summary
        await pilot.press("p")  # problems only
        await wait_for(pilot, lambda: table.row_count == 1)
        table.move_cursor(row=0)
        await pilot.pause()
        detail = str(app.screen.query_one("#node-detail").content)
        assert "gpu-b300-03" in detail and "T00.gpu-count" in detail
        await pilot.press("escape")
        await wait_for(pilot, lambda: screen_name(app) == "MainScreen")


async def test_resume_shows_the_interruption_and_does_not_redo_done_steps(tmp_path):
    state = tmp_path / "state"
    holder = {}

    async def opener():  # on the engine's loop, which then owns (and closes) the lab
        # greenfield: its first manual step is the Kubespray join the test waits for
        session = holder["session"] = await open_lab(("greenfield",), 1, state)
        with Checkpoint.open(state, session.site) as checkpoint:
            for step in ("preflight.host", "preflight.containerd"):
                checkpoint.set_step(step, "gpu-b300-01", StepState.DONE, message="ok")
            checkpoint.set_step("preflight.gpus", "gpu-b300-01", StepState.RUNNING)
        return session

    app = WizardApp(opener)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: screen_name(app) == "StartScreen")
        summary = str(app.screen.query_one("#checkpoint-summary", Static).content)
        assert "Interrupted (verified first on resume): preflight.gpus on gpu-b300-01" in summary
        assert app.screen.query_one("#resume", Button).label.plain == "Resume"
        await pilot.press("enter")
        await wait_for(pilot, lambda: screen_name(app) == "ManualScreen")
        transcript = "\n".join(app.main_screen.transcript)
        assert "preflight.host: done - already done (checkpoint)" in transcript
        assert "preflight.gpus was interrupted on gpu-b300-01; verifying first" in transcript
    host = holder["session"].lab.hosts["gpu-b300-01"]
    assert "cat /etc/os-release" not in host.commands[:1]  # done steps were not run again


class ModalHost(App[object]):
    def __init__(self, screen) -> None:
        super().__init__()
        self.modal = screen

    def on_mount(self) -> None:
        self.push_screen(self.modal, callback=self.exit)


def maintenance_decision() -> Decision:
    return Decision(
        DecisionKind.MAINTENANCE_WINDOW,
        "qos.apply",
        "RoCE QoS on both bond ports (maintenance window)",
        "gpu-b300-01",
        "RoCE QoS on both bond ports disrupts traffic on gpu-b300-01.",
        diffs=(ArtifactDiff("x", "dcb on ens5f0np0", "--- a\n+++ b\n+dscp-prio 24:3\n", True),),
        rollback="dcb app del dev ens5f0np0 dscp-prio 24:3",
        confirm_text="gpu-b300-01",
    )


async def test_maintenance_modal_refuses_a_wrong_node_name():
    app = ModalHost(MaintenanceScreen(maintenance_decision()))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        modal = app.screen
        # The name box has the focus: typing goes there, and Enter on nothing is no answer.
        assert app.focused is modal.query_one("#node-name", Input)
        confirm = modal.query_one("#confirm", Button)
        assert confirm.disabled
        await pilot.press("enter")
        assert app.screen is modal  # an empty name is not an answer (it was Cancel's Enter)
        await pilot.press(*"gpu-b300-02")
        assert confirm.disabled
        await pilot.press("enter")
        assert app.screen is modal  # not dismissed
        assert "not gpu-b300-01" in str(modal.query_one("#mismatch", Static).content)
        for _ in range(2):
            await pilot.press("backspace")
        await pilot.press(*"01")
        assert not confirm.disabled
        await pilot.press("enter")
    assert app.return_value.answer is Answer.PROCEED
    assert app.return_value.typed == "gpu-b300-01"


def labels_review(other_nodes: int) -> Decision:
    return Decision(
        DecisionKind.CONFIRM_APPLY, "join.labels", "Node labels and taint", "gpu-b300-02",
        "1 change(s) on gpu-b300-02",
        diffs=(ArtifactDiff("x", "Node gpu-b300-02 labels", "+  accelerator: nvidia-b300\n", True),),
        other_nodes=other_nodes,
    )  # fmt: skip


@pytest.mark.parametrize("how", ["key", "button"])
async def test_review_offers_the_same_change_on_other_nodes(how):
    app = ModalHost(ReviewScreen(labels_review(other_nodes=6)))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        button = app.screen.query_one("#proceed_same", Button)
        assert "Apply + 6 alike" in str(button.label)
        assert app.focused is app.screen.query_one("#diffs")  # still no button by default
        if how == "key":
            await pilot.press("A")
        else:
            await pilot.click("#proceed_same")
    assert app.return_value.answer is Answer.PROCEED_SAME


async def test_review_of_the_last_node_has_no_same_change_choice():
    app = ModalHost(ReviewScreen(labels_review(other_nodes=0)))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert not app.screen.query("#proceed_same")
        assert "A" not in app.active_bindings  # nor in the footer (it did nothing there)
        await pilot.press("A")  # nothing later to cover: ignored
        await pilot.pause()
        assert isinstance(app.screen, ReviewScreen)
        await pilot.press("a")
    assert app.return_value.answer is Answer.PROCEED


async def test_maintenance_cancel_skips():
    app = ModalHost(MaintenanceScreen(maintenance_decision()))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.click("#cancel")  # Cancel (a button, never Esc) skips the window
        await pilot.pause()
    assert app.return_value.answer is Answer.SKIP


async def test_error_panel_for_an_unreachable_host(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(
        "name: gone\nssh: {connect_timeout: 2, known_hosts: kh, config: none}\n"
        "cluster: {kubeconfig: nope}\nnodes:\n  - name: gpu-1\n    host: 127.0.0.1\n"
        "    ssh: {port: 1}\n    bond: {ports: [p0, p1]}\n    rdma_ip: 192.168.50.1\n"
    )
    app = WizardApp(lambda: open_site(site, tmp_path / "state"), auto_start=True)
    async with app.run_test(size=SIZE) as pilot:
        asked = await run_to_end(pilot, app)
        assert asked and not asked[0].waivable  # an unreachable host is not waived away
        panel = app.main_screen.query_one("#error-panel", Static)
        assert panel.display
        text = str(panel.content)
        assert "Cannot use gpu-1" in text and "cannot reach root@127.0.0.1:1" in text
        assert "What to do" in text


async def test_bad_site_file_shows_a_plain_error(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("name: x\nnodes: []\n")
    app = WizardApp(lambda: open_site(site, tmp_path / "state"))
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: screen_name(app) == "ErrorScreen")
        assert "nodes" in str(app.screen.query_one("#error-message", Static).content)


# -- snapshots (syrupy directly: pytest-textual-snapshot 1.1.0 needs pytest < 9) ---------------


async def test_review_screen_snapshot(snapshot):
    decision = Decision(
        DecisionKind.CONFIRM_APPLY,
        "irdma.enable",
        "irdma loaded at boot, in RoCEv2 mode",
        "gpu-b300-01",
        "2 change(s) on gpu-b300-01",
        diffs=(
            ArtifactDiff(
                "p", "/etc/modprobe.d/irdma.conf on gpu-b300-01",
                "--- live: /etc/modprobe.d/irdma.conf on gpu-b300-01 (absent)\n"
                "+++ desired: /etc/modprobe.d/irdma.conf on gpu-b300-01\n@@ -0,0 +1 @@\n"
                "+options irdma roce_ena=1\n",
                True,
            ),
        ),
    )  # fmt: skip
    app = ModalHost(ReviewScreen(decision))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert app.export_screenshot() == snapshot


async def test_maintenance_screen_snapshot(snapshot):
    app = ModalHost(MaintenanceScreen(maintenance_decision()))
    async with app.run_test(size=(100, 34)) as pilot:
        await pilot.pause()
        assert app.export_screenshot() == snapshot


# -- a person at a terminal ----------------------------------------------------------------------


def settled(screen, ready, timeout: float = 30.0) -> str:
    """The pane once ``ready`` holds for two captures in a row with the same text."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        shown = screen()
        if ready(shown) and shown == last:
            return shown
        last = shown
        time.sleep(0.3)
    return screen()


def test_demo_in_tmux_walks_to_the_report():
    tmux = shutil.which("tmux")
    if tmux is None:
        if os.environ.get("CI"):
            pytest.fail("tmux is missing: .ci/run installs it")
        pytest.skip("tmux not installed")
    session = f"gnw-smoke-{os.getpid()}"
    command = f"{sys.executable} -m frontend.cli demo; sleep 5"

    def screen() -> str:
        return subprocess.run(
            [tmux, "capture-pane", "-t", session, "-p"], capture_output=True, text=True, check=False
        ).stdout

    def wait(text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            shown = screen()
            if text in shown:
                return shown
            time.sleep(0.3)
        raise AssertionError(f"never saw {text!r}; screen:\n{screen()}")

    # An xdist worker has COLUMNS=80 and LINES=24 in its environment; the demo would read
    # them (shutil.get_terminal_size prefers them to the pane) and lay out 80x24 in a
    # 140x45 pane: the report's rows past T05 were never on the screen.
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    subprocess.run([tmux, "new-session", "-d", "-s", session, "-x", "140", "-y", "45", command],
                   check=True, cwd=REPO, env=env)  # fmt: skip
    try:
        wait("Start")
        wait("No checkpoint yet")
        subprocess.run([tmux, "send-keys", "-t", session, "Enter"], check=True)
        seen = []
        # A hang guard: the default demo also runs two real ansible-playbook runs (the join).
        deadline = time.monotonic() + 240
        shown = ""

        def act(marker: str, *keys: list[str], settle: float = 0.5) -> None:
            seen.append(marker)
            # Let the dialog finish mounting (it sets its own focus): its whole frame is on
            # the pane, unchanged for two captures, and then a moment more.
            settled(screen, lambda text: marker in text, timeout=15)
            time.sleep(settle)
            for key in keys:
                subprocess.run([tmux, "send-keys", "-t", session, *key], check=True)
                time.sleep(0.2)  # one key at a time, as a person types
            gone = time.monotonic() + 15  # one answer per dialog: wait until it is gone
            while marker in screen() and time.monotonic() < gone:
                time.sleep(0.1)

        while time.monotonic() < deadline:
            shown = screen()
            if "T00-T17 report" in shown:
                break
            if "Maintenance window:" in shown:  # type the node name into the box, confirm
                # The name box has the focus: a person types the name and presses Enter
                # (after ctrl+u: a second try starts from an empty box).
                act("Maintenance window:", ["C-u"], ["-l", "gpu-b300-01"], ["Enter"], settle=1.5)
            elif "Review:" in shown:  # a change to approve: read it, then apply
                act("Review:", ["a"])
            elif "Your turn:" in shown:  # a manual step: done, verify it
                act("Your turn:", ["Enter"])
            time.sleep(0.2)
        assert "T00-T17 report" in shown, shown
        assert {"Review:", "Your turn:", "Maintenance window:"} <= set(seen)
        # The first capture with the title can hold half a frame: tmux had read part of
        # what the app wrote (seen under load: the rows up to T16, no footer). Judge the
        # screen once the footer, drawn last, is there and two captures agree.
        shown = settled(screen, lambda text: "m Measurements" in text and "T17" in text)
        for gate in ("T00", "T01", "T02", "T03", "T04", "T08", "T10", "T17"):
            assert f"{gate}   pass" in shown, shown
        assert "no findings for this gate yet" not in shown  # T00's findings are shown
        subprocess.run([tmux, "send-keys", "-t", session, "q"], check=True)
    finally:
        subprocess.run([tmux, "kill-session", "-t", session], check=False)


async def test_measurements_view_after_a_run(tmp_path):
    app = WizardApp(lambda: open_lab((), 1, tmp_path / "state"), auto_start=True)
    async with app.run_test(size=SIZE) as pilot:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not app.finished:
            name = screen_name(app)
            # A pushed screen may not have composed its widgets yet: act once they are there.
            if name == "ReviewScreen":
                await pilot.press("a")
            elif name == "ManualScreen" and app.screen.query("#proceed"):
                await pilot.click("#proceed")
            elif name == "MaintenanceScreen" and app.screen.query("#node-name"):
                app.screen.query_one("#node-name", Input).value = app.screen.decision.confirm_text
                await pilot.click("#confirm")
            await pilot.pause(0.1)
        assert app.finished
        # The reboot step said what it waited for, and for how long at most (a countdown).
        transcript = "\n".join(app.main_screen.transcript)
        assert (
            "waiting for gpu-b300-01 to come back with a new boot id (at most 15:00)" in transcript
        )
        await wait_for(pilot, lambda: screen_name(app) == "ReportScreen")
        await pilot.press("m")
        await wait_for(pilot, lambda: screen_name(app) == "MeasurementsScreen")
        # The charts are drawn from what the run recorded, as the report reads it.
        from frontend.tui.charts import charts
        from frontend.tui.measurements import ChartPlot
        from wizard.checkpoint import load_run, site_state_dir
        from wizard.report import build_report

        run = load_run(site_state_dir(tmp_path / "state", app.session.site))
        recorded = build_report(run, app.session.site, app.plan)["measurements"]
        bandwidth, sweep, nccl = charts(recorded, "gpu-b300-01")
        assert [s.label for s in bandwidth.series] == ["baseline", "with QoS"]
        assert [s.label for s in sweep.series] == ["baseline", "with QoS"]
        assert [s.label for s in nccl.series] == ["NVLink, one node"]
        plots = {p.id: p for p in app.screen.query(ChartPlot)}
        assert plots["plot-bandwidth"].chart == bandwidth and plots["plot-bandwidth"].display
        assert plots["plot-qp-sweep"].chart == sweep and plots["plot-nccl"].chart == nccl
        assert app.screen.query_one("#measurements").row_count > 20


async def test_a_fleet_gets_a_count_column(tmp_path):
    holder = {}

    async def opener():
        holder["session"] = await open_lab((), 8, tmp_path / "state")
        return holder["session"]

    app = WizardApp(opener, auto_start=True)
    async with app.run_test(size=(160, 45)) as pilot:
        # An 8-node lab whose hosts run every command in a real shell: a hang guard, not a
        # speed target (2 shared cores under -n auto).
        await wait_for(
            pilot,
            lambda: screen_name(app) == "ReviewScreen" or screen_name(app) == "ManualScreen",
            150,
        )
        phases = app.main_screen.query_one("#phases")
        # One count column instead of a column per node, so the phase titles stay in view.
        assert [str(c.key.value) for c in phases.columns.values()] == ["cluster", "fleet", "phase"]
        assert phases.get_cell("preflight", "fleet") == "✔8"
        assert "Preflight" in str(phases.get_cell("preflight", "phase"))
