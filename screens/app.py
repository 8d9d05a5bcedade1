"""The Textual application: the engine runs on its own loop in a thread; screens present and
decide.

Two loops. The UI loop (Textual's) renders, reads keys and shows the modals; nothing on it
waits for a host, the cluster or the disk. The engine's loop runs in a thread worker
(``conductor``): it opens the session (the embedded lab in the demo, the transports, the
Kubernetes client and its credential plugin), holds the checkpoint (every write and fsync)
and runs the engine. The engine reports through ``TuiFrontEnd.emit``, which queues the
event in the main screen's inbox (thread-safe; it never blocks), and asks through
``TuiFrontEnd.decide``, which shows the modal on the UI loop and awaits the answer from the
engine's loop (screens/bridge.py). Screens never reach SSH or Kubernetes.

Any exit sets the worker's ``cancelled_event``: the engine's thread cancels the run (and a
pending decision with it), the checkpoint closes through its ``with``, the session closes,
and the app waits for that (bounded) before it is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Header, Label, Static
from textual.worker import Worker, get_current_worker

from screens.bridge import UiBridge
from screens.main import MainScreen
from screens.modals import (
    HelpScreen,
    MaintenanceScreen,
    ManualScreen,
    ReviewScreen,
    RollbackScreen,
)
from screens.report import ReportScreen
from screens.start import StartScreen
from steps import build_plan
from wizard.checkpoint import Checkpoint, site_state_dir
from wizard.engine import Engine, RunSummary
from wizard.errors import WizardError
from wizard.events import Decision, DecisionKind, Event, Reply
from wizard.session import Session
from wizard.status import load_status

# Called (and awaited) on the engine's loop; the session it returns is closed there.
SessionOpener = Callable[[], Awaitable[Session]]

DECISION_SCREENS = {
    DecisionKind.CONFIRM_APPLY: ReviewScreen,
    DecisionKind.MAINTENANCE_WINDOW: MaintenanceScreen,
    DecisionKind.MANUAL_DONE: ManualScreen,
    DecisionKind.RETRY_FAILED: ReviewScreen,
    DecisionKind.ROLLBACK: RollbackScreen,
}
CANCEL_POLL_S = 0.05  # how soon the engine's thread notices that the app is going away
ENGINE_STOP_S = 30.0  # how long the closing app waits for the engine's thread at most


class TuiFrontEnd:
    """The engine's front end inside the TUI; called on the engine's loop."""

    wants_output_lines = True  # the live log shows them

    def __init__(self, main: MainScreen, bridge: UiBridge, decisions: list[Decision]) -> None:
        self.main = main
        self.bridge = bridge
        self.decisions = decisions

    def emit(self, event: Event) -> None:
        self.main.deliver(event)

    async def decide(self, decision: Decision) -> Reply:
        screen = DECISION_SCREENS[decision.kind]

        def make() -> Screen[Reply]:
            self.decisions.append(decision)
            return screen(decision)

        return await self.bridge.ask(make)


class ErrorScreen(Screen[None]):
    """An expected failure (bad site file, unreachable cluster) shown plainly, no traceback."""

    BINDINGS = [Binding("q,escape", "app.quit", "Quit")]

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def compose(self):
        yield Header(show_clock=False)
        yield Label("The wizard cannot continue", classes="dialog-title danger")
        yield Static(self.message, id="error-message")
        yield Footer()


class WizardApp(App[int]):
    CSS_PATH = Path(__file__).with_name(
        "wizard.tcss"
    )  # absolute: a subclass elsewhere finds it too
    TITLE = "gpu-node-wizard"
    BINDINGS = [
        Binding("question_mark", "help", "Help"),
        Binding("m", "measurements", "Measurements"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, opener: SessionOpener, *, auto_start: bool = False) -> None:
        super().__init__()
        self.opener = opener
        self.auto_start = auto_start
        self.plan = build_plan()
        # Set on the engine's thread: the session once open, the engine while it runs.
        self.session: Session | None = None
        self.engine: Any = None
        # Set on the UI loop, after the events that came before them.
        self.main_screen: MainScreen | None = None
        self.summary: RunSummary | None = None
        self.finished = False
        self.decisions: list[Decision] = []
        self._bridge: UiBridge | None = None
        self._engine_loop: asyncio.AbstractEventLoop | None = None
        self._engine_thread_id: int | None = None
        self._engine_done = threading.Event()
        self._engine_done.set()  # no engine thread yet

    @property
    def engine_running(self) -> bool:
        """Whether the engine's thread is still there (opening, running, or closing)."""
        return not self._engine_done.is_set()

    def on_mount(self) -> None:
        self._bridge = UiBridge(self)
        self._engine_done.clear()
        self.conductor()

    async def on_unmount(self) -> None:
        # The exit has cancelled the conductor's worker (its cancelled_event is set): the
        # engine's thread is closing the checkpoint and the session. Let it finish.
        deadline = time.monotonic() + ENGINE_STOP_S
        while not self._engine_done.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(CANCEL_POLL_S)

    # -- the engine's thread --------------------------------------------------------------

    @work(thread=True, exclusive=True, group="conductor", exit_on_error=False)
    def conductor(self) -> None:
        try:
            asyncio.run(self._engine_thread(get_current_worker()))
        finally:
            self._engine_done.set()

    async def _engine_thread(self, worker: Worker[None]) -> None:
        """Run the conductor on this thread's loop until it ends or the app goes away."""
        self._engine_loop = asyncio.get_running_loop()
        self._engine_thread_id = threading.get_ident()
        run = asyncio.create_task(self._conduct(worker))
        while not run.done():
            if worker.cancelled_event.is_set():
                run.cancel()
                break
            await asyncio.wait({run}, timeout=CANCEL_POLL_S)
        with contextlib.suppress(asyncio.CancelledError):
            await run

    async def _conduct(self, worker: Worker[None]) -> None:
        ui = self._bridge
        assert ui is not None
        session: Session | None = None
        try:
            session = self.session = await self.opener()
            status = load_status(session.state_dir, session.site, self.plan)
            choice = (
                "resume"
                if self.auto_start
                else await ui.ask(partial(StartScreen, session.site, status))
            )
            if choice == "quit":
                await ui.call(self.exit, 0)
                return
            main = await ui.call(self._show_main, session)
            frontend = TuiFrontEnd(main, ui, self.decisions)
            with Checkpoint.open(session.state_dir, session.site) as checkpoint:
                if choice == "restart":
                    checkpoint.reset_all()
                engine = Engine(session.site, self.plan, checkpoint, frontend, session.services)
                self.engine = engine
                try:
                    summary = await engine.run()
                finally:
                    self.engine = None
            main.deliver(partial(self._run_ended, summary))
        except WizardError as exc:
            await ui.call(self._show_error, str(exc))
        finally:
            if session is not None:
                await session.close()

    # -- on the UI loop -------------------------------------------------------------------

    async def _show_main(self, session: Session) -> MainScreen:
        self.main_screen = MainScreen(session.site, self.plan)
        await self.push_screen(self.main_screen)
        _freeze_startup_objects()
        return self.main_screen

    def _run_ended(self, summary: RunSummary) -> None:
        self.summary = summary
        self.finished = True
        if summary.stopped:
            assert self.main_screen is not None
            self.main_screen.show_stopped(summary.stopped)
            self.notify(f"The run stopped: {summary.stopped}", severity="error", timeout=10)
        else:
            self.push_screen(self._report())

    async def _show_error(self, message: str) -> None:
        await self.push_screen(ErrorScreen(message))

    def _report(self) -> ReportScreen:
        findings = self.main_screen.findings if self.main_screen else []
        stopped = self.summary.stopped if self.summary else None
        return ReportScreen(list(findings), stopped)

    # -- actions and commands ----------------------------------------------------------------

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_report(self) -> None:
        self.push_screen(self._report())

    async def action_measurements(self) -> None:
        from screens.measurements import MeasurementsScreen

        session = self.session
        measurements: list = []
        if session is not None:  # read the checkpoint's file off the UI loop
            measurements = await asyncio.to_thread(_measurements, session, self.plan)
        self.push_screen(MeasurementsScreen(measurements))

    def get_system_commands(self, screen: Screen[Any]):
        yield SystemCommand("Report", "The T00-T17 verdicts so far", self.action_report)
        yield SystemCommand("Measurements", "Numbers and bandwidth bars", self.action_measurements)
        yield SystemCommand("Help", "Key bindings", self.action_help)
        yield SystemCommand("Quit", "Leave; the checkpoint keeps the progress", self.exit)


_frozen = False


def _freeze_startup_objects() -> None:
    """Leave what exists once the session is open and the main screen is up (modules, the
    app, the site, the lab, the transports) out of every later garbage collection.

    A full collection stops both threads while it walks every tracked object; over a
    lab of eight nodes that was up to 180 ms at a time, the longest stalls the UI had. Once
    per process: later apps (tests) would freeze their predecessors' garbage.
    """
    global _frozen
    if not _frozen:
        _frozen = True
        gc.freeze()


def _measurements(session: Session, plan: Any) -> list[dict[str, Any]]:
    from wizard.checkpoint import read_state
    from wizard.report import build_report

    state = read_state(site_state_dir(session.state_dir, session.site))
    return build_report(state, session.site, plan)["measurements"]


def run_tui(opener: SessionOpener) -> int:
    app = WizardApp(opener)
    result = app.run()
    return result if isinstance(result, int) else 0
