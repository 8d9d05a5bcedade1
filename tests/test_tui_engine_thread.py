"""The TUI runs the engine on its own loop in a thread: what runs where, quitting while the
engine waits for an answer, unexpected exceptions, and quitting during a maintenance change."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time

import pytest
from textual.binding import Binding
from textual.widgets import Static

import steps.preflight
from frontend.lab_session import open_lab
from frontend.tui.app import InternalErrorScreen, WizardApp, tui_exit_code
from frontend.tui.modals import QuitScreen
from tests.test_tui import SIZE, ModalHost, run_to_end, screen_name, wait_for
from wizard.checkpoint import Checkpoint, site_state_dir
from wizard.errors import EXIT_INTERNAL
from wizard.model import StepState


def lab_opener(holder: dict, state, faults=("irdma-not-loaded",), nodes=1):
    async def opener():
        session = holder["session"] = await open_lab(faults, nodes, state)
        holder["opened_on"] = threading.get_ident()
        close = session.close

        async def closing():
            holder["closed_on"] = threading.get_ident()
            await close()

        session.close = closing
        return session

    return opener


async def test_session_checkpoint_and_kubernetes_client_stay_off_the_ui_thread(
    tmp_path, monkeypatch
):
    """The lab, every checkpoint write and the Kubernetes client are made on the engine's
    thread; the UI thread only gets the events and the modal."""
    seen: dict[str, set[int]] = {"save": set(), "journal": set(), "kube": set()}

    def spy(name, original):
        def wrapper(self, *args, **kwargs):
            seen[name].add(threading.get_ident())
            return original(self, *args, **kwargs)

        return wrapper

    monkeypatch.setattr(Checkpoint, "save", spy("save", Checkpoint.save))
    monkeypatch.setattr(Checkpoint, "journal", spy("journal", Checkpoint.journal))
    import wizard.transports.kube as kube

    monkeypatch.setattr(kube.KubeClient, "__init__", spy("kube", kube.KubeClient.__init__))
    holder: dict = {}
    app = WizardApp(lab_opener(holder, tmp_path / "state"), auto_start=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: screen_name(app) == "ReviewScreen")
        ui = threading.get_ident()
        engine = holder["opened_on"]
        assert engine != ui
        assert seen["save"] == {engine} and seen["journal"] == {engine}
        assert seen["kube"] == {engine}  # preflight.cluster built it
        assert app.main_screen.transcript  # the events arrived on the UI side
        await pilot.press("s")
        await wait_for(pilot, lambda: screen_name(app) == "ConfirmSkipScreen")
        await pilot.press("y")  # irdma.verify builds on irdma.enable: skip anyway
        await run_to_end(pilot, app)
    assert threading.get_ident() not in seen["save"] | seen["journal"]


async def test_quitting_at_a_pending_decision_stops_the_engine_and_closes_the_checkpoint(
    tmp_path,
):
    holder: dict = {}
    state = tmp_path / "state"
    app = WizardApp(lab_opener(holder, state), auto_start=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: screen_name(app) == "ReviewScreen")
        started = time.monotonic()
        await pilot.press("ctrl+q")  # over the modal (q is the modal's); nothing in flight
        await wait_for(pilot, lambda: app.return_code is not None, timeout=5)
    assert time.monotonic() - started < 10
    assert not app.engine_running  # the engine's thread ended: nothing left hanging
    assert app.return_code == 0
    assert holder["closed_on"] == holder["opened_on"]  # the lab closed on its own loop
    session = holder["session"]
    # The lock is free (the checkpoint was closed) and the review's step was not recorded
    # as answered: the next run asks again.
    with Checkpoint.open(state, session.site) as checkpoint:
        assert checkpoint.step_state("irdma.enable", "gpu-b300-01") is StepState.PENDING
        assert checkpoint.step_state("preflight.host", "gpu-b300-01") is StepState.DONE


async def test_an_unexpected_exception_in_a_step_ends_on_the_error_screen_with_code_70(
    tmp_path, monkeypatch
):
    async def boom(self, ctx):
        raise RuntimeError("boom: a bug in a step")

    monkeypatch.setattr(steps.preflight.Containerd, "verify", boom)
    holder: dict = {}
    state = tmp_path / "state"
    app = WizardApp(lab_opener(holder, state, faults=()), auto_start=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: screen_name(app) == "InternalErrorScreen")
        assert isinstance(app.screen, InternalErrorScreen)
        text = str(app.screen.query_one("#error-message", Static).content)
        journal = site_state_dir(state, holder["session"].site) / "journal.jsonl"
        assert "in step preflight.containerd on gpu-b300-01" in text
        assert "RuntimeError: boom: a bug in a step" in text
        assert f"journal: {journal}" in text
        assert app.failure.where == "step preflight.containerd on gpu-b300-01"
        await pilot.press("q")
    assert app.return_code == EXIT_INTERNAL
    assert tui_exit_code(app, app.return_value) == EXIT_INTERNAL
    # The checkpoint was closed cleanly and the journal holds the traceback.
    entries = [json.loads(line) for line in journal.read_text().splitlines()]
    [entry] = [e for e in entries if e.get("event") == "internal-error"]
    assert entry["where"] == "step preflight.containerd on gpu-b300-01"
    assert "RuntimeError: boom" in entry["traceback"]
    with Checkpoint.open(state, holder["session"].site) as checkpoint:
        assert checkpoint.step_state("preflight.host", "gpu-b300-01") is StepState.DONE


async def test_the_demo_keeps_its_temporary_state_after_an_internal_error(monkeypatch):
    """The demo's state lives in a temporary folder removed with the lab: the journal the
    error screen names must still be there."""

    async def boom(self, ctx):
        raise RuntimeError("boom")

    monkeypatch.setattr(steps.preflight.Containerd, "verify", boom)
    holder: dict = {}

    async def opener():
        holder["session"] = await open_lab((), 1, None)  # state in the lab's temporary folder
        return holder["session"]

    app = WizardApp(opener, auto_start=True)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: screen_name(app) == "InternalErrorScreen")
        await pilot.press("q")
    journal = app.failure.journal
    try:
        assert journal.exists() and "internal-error" in journal.read_text()
        assert not (holder["session"]._tmp / "lab").exists()  # the lab itself is gone
    finally:
        shutil.rmtree(holder["session"]._tmp, ignore_errors=True)


class Crashing(WizardApp):
    BINDINGS = [*WizardApp.BINDINGS, Binding("x", "crash", "Crash", priority=True)]

    def action_crash(self) -> None:
        raise ZeroDivisionError("a bug in a key handler")


async def test_an_exception_in_a_key_handler_exits_non_zero_naming_the_journal(tmp_path, capsys):
    holder: dict = {}
    state = tmp_path / "state"
    app = Crashing(lab_opener(holder, state), auto_start=True)
    with pytest.raises(ZeroDivisionError):  # run_test re-raises what Textual caught
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: screen_name(app) == "ReviewScreen")
            await pilot.press("x")
            await pilot.pause()
    assert app.return_code == 1  # Textual's own code, which would read as "a check failed"
    assert not app.engine_running
    assert tui_exit_code(app, app.return_value) == EXIT_INTERNAL
    journal = site_state_dir(state, holder["session"].site) / "journal.jsonl"
    assert f"journal: {journal}" in capsys.readouterr().err


# -- quitting during a maintenance change -----------------------------------------------------


class FakeEngine:
    def __init__(self, in_flight: dict[str, str]) -> None:
        self.in_flight = in_flight
        self.asked_on: set[int] = set()

    def maintenance_in_flight(self) -> dict[str, str]:
        self.asked_on.add(threading.get_ident())
        return dict(self.in_flight)


def waiting_app() -> WizardApp:
    """A WizardApp whose engine thread waits (a session that never opens) while a test
    plays the engine."""

    async def opener():
        await asyncio.Event().wait()

    return WizardApp(opener, auto_start=True)


async def engine_thread_up(pilot, app) -> None:
    await wait_for(pilot, lambda: app._engine_thread_id is not None)


async def test_quit_during_a_maintenance_change_says_which_node_is_where_first():
    app = waiting_app()
    async with app.run_test(size=SIZE) as pilot:
        await engine_thread_up(pilot, app)
        engine = app.engine = FakeEngine(
            {"gpu-b300-02": "cordoned, ports out of bond1, QoS half applied"}
        )
        await pilot.press("q")
        await wait_for(pilot, lambda: screen_name(app) == "QuitScreen")
        text = str(app.screen.query_one("#in-flight-nodes", Static).content)
        assert "gpu-b300-02: cordoned, ports out of bond1, QoS half applied" in text
        assert app.focused is app.screen.query_one("#stay")  # staying is the default
        assert engine.asked_on == {app._engine_thread_id}  # asked on the engine's own loop
        await pilot.press("enter")  # Stay
        await wait_for(pilot, lambda: not isinstance(app.screen, QuitScreen))
        assert not app.return_code is not None
        await pilot.press("q")
        await wait_for(pilot, lambda: screen_name(app) == "QuitScreen")
        await pilot.click("#quit")
        await wait_for(pilot, lambda: app.return_code is not None, timeout=5)
    assert app.return_code == 0
    assert not app.engine_running


async def test_the_palette_quit_asks_too():
    app = waiting_app()
    async with app.run_test(size=SIZE) as pilot:
        app.engine = FakeEngine({"gpu-b300-01": "drained, QoS applied, not verified yet"})
        await pilot.press("ctrl+p")
        await pilot.press(*"Quit")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await wait_for(pilot, lambda: screen_name(app) == "QuitScreen")
        await pilot.press("y")
        await wait_for(pilot, lambda: app.return_code is not None, timeout=5)


@pytest.mark.parametrize("engine", [None, FakeEngine({}), object()], ids=["none", "idle", "old"])
async def test_quit_without_a_maintenance_in_flight_is_immediate(engine):
    app = waiting_app()
    async with app.run_test(size=SIZE) as pilot:
        app.engine = engine  # object(): an engine without maintenance_in_flight()
        await pilot.press("q")
        await wait_for(pilot, lambda: app.return_code is not None, timeout=5)
        assert not isinstance(app.screen, QuitScreen)
    assert app.return_code == 0


async def test_quit_screen_snapshot(snapshot):
    in_flight = {
        "gpu-b300-01": "cordoned, ports out of bond1, QoS half applied",
        "gpu-b300-02": "drained, QoS applied, not verified yet",
    }
    app = ModalHost(QuitScreen(in_flight))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert app.export_screenshot() == snapshot
