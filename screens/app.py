"""The Textual application: a conductor worker walks the engine; screens present and decide.

The engine runs in one async worker on the UI loop. It reports through ``TuiFrontEnd.emit``
(posted as messages to the main screen) and asks for decisions through
``TuiFrontEnd.decide``, which pushes a modal and waits for its answer. Screens never reach
SSH or Kubernetes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Header, Label, Static

from screens.main import EngineEvent, MainScreen
from screens.modals import HelpScreen, MaintenanceScreen, ManualScreen, ReviewScreen, RollbackScreen
from screens.report import ReportScreen
from screens.start import StartScreen
from steps import build_plan
from wizard.checkpoint import Checkpoint
from wizard.engine import Engine, RunSummary
from wizard.errors import WizardError
from wizard.events import Decision, DecisionKind, Event, Reply
from wizard.session import Session
from wizard.status import load_status

SessionOpener = Callable[[], Awaitable[Session]]


class TuiFrontEnd:
    """The engine's front end inside the TUI."""

    wants_output_lines = True  # the live log shows them

    def __init__(self, app: WizardApp, main: MainScreen) -> None:
        self.app = app
        self.main = main

    def emit(self, event: Event) -> None:
        self.main.post_message(EngineEvent(event))

    async def decide(self, decision: Decision) -> Reply:
        screens = {
            DecisionKind.CONFIRM_APPLY: ReviewScreen,
            DecisionKind.MAINTENANCE_WINDOW: MaintenanceScreen,
            DecisionKind.MANUAL_DONE: ManualScreen,
            DecisionKind.RETRY_FAILED: ReviewScreen,
            DecisionKind.ROLLBACK: RollbackScreen,
        }
        self.app.decisions.append(decision)
        return await self.app.push_screen_wait(screens[decision.kind](decision))


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
    CSS_PATH = "wizard.tcss"
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
        self.session: Session | None = None
        self.main_screen: MainScreen | None = None
        self.summary: RunSummary | None = None
        self.decisions: list[Decision] = []
        self.finished = False

    def on_mount(self) -> None:
        self.conductor()

    @work(exclusive=True, group="conductor", exit_on_error=False)
    async def conductor(self) -> None:
        try:
            self.session = await self.opener()
        except WizardError as exc:
            await self.push_screen(ErrorScreen(str(exc)))
            return
        session = self.session
        try:
            status = load_status(session.state_dir, session.site, self.plan)
            choice = (
                "resume"
                if self.auto_start
                else await self.push_screen_wait(StartScreen(session.site, status))
            )
            if choice == "quit":
                self.exit(0)
                return
            self.main_screen = MainScreen(session.site, self.plan)
            await self.push_screen(self.main_screen)
            with Checkpoint.open(session.state_dir, session.site) as checkpoint:
                if choice == "restart":
                    checkpoint.reset_all()
                engine = Engine(
                    session.site,
                    self.plan,
                    checkpoint,
                    TuiFrontEnd(self, self.main_screen),
                    session.services,
                )
                self.summary = await engine.run()
            self.finished = True
            if self.summary.stopped:
                self.main_screen.show_stopped(self.summary.stopped)
                self.notify(
                    f"The run stopped: {self.summary.stopped}", severity="error", timeout=10
                )
            else:
                await self.push_screen(self._report())
        except WizardError as exc:
            await self.push_screen(ErrorScreen(str(exc)))
        finally:
            await session.close()

    def _report(self) -> ReportScreen:
        findings = self.main_screen.findings if self.main_screen else []
        stopped = self.summary.stopped if self.summary else None
        return ReportScreen(list(findings), stopped)

    # -- actions and commands ----------------------------------------------------------------

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_report(self) -> None:
        self.push_screen(self._report())

    def action_measurements(self) -> None:
        from screens.measurements import MeasurementsScreen
        from wizard.checkpoint import read_state, site_state_dir
        from wizard.report import build_report

        measurements: list = []
        if self.session is not None:
            state = read_state(site_state_dir(self.session.state_dir, self.session.site))
            measurements = build_report(state, self.session.site, self.plan)["measurements"]
        self.push_screen(MeasurementsScreen(measurements))

    def get_system_commands(self, screen: Screen[Any]):
        yield SystemCommand("Report", "The T00-T17 verdicts so far", self.action_report)
        yield SystemCommand("Measurements", "Numbers and bandwidth bars", self.action_measurements)
        yield SystemCommand("Help", "Key bindings", self.action_help)
        yield SystemCommand("Quit", "Leave; the checkpoint keeps the progress", self.exit)


def run_tui(opener: SessionOpener) -> int:
    app = WizardApp(opener)
    result = app.run()
    return result if isinstance(result, int) else 0
