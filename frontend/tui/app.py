"""The Textual application: the engine runs on its own loop in a thread; screens present and
decide.

Two loops. The UI loop (Textual's) renders, reads keys and shows the modals; nothing on it
waits for a host, the cluster or the disk. The engine's loop runs in a thread worker
(``conductor``): it opens the session (the embedded lab in the demo, the transports, the
Kubernetes client and its credential plugin), holds the checkpoint (every write and fsync)
and runs the engine. The engine reports through ``TuiFrontEnd.emit``, which queues the
event in the main screen's inbox (thread-safe; it never blocks), and asks through
``TuiFrontEnd.decide``, which shows the modal on the UI loop and awaits the answer from the
engine's loop (frontend/tui/bridge.py). Screens never reach SSH or Kubernetes.

A run that ended with steps left failed keeps the session (the demo's lab) open: the
palette's retry or waiver runs the engine again over it, from the checkpoint
(``WizardApp.rerun``).

Any exit sets the worker's ``cancelled_event``: the engine's thread cancels the run (and a
pending decision with it), the checkpoint closes through its ``with``, the session closes,
and the app waits for that (bounded) before it is gone. Quitting while a maintenance change
is applied asks first. An unexpected exception ends on ``InternalErrorScreen`` (the step,
the exception, the journal) and the exit code 70.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.theme import Theme
from textual.widgets import Footer, Header, Label, Static
from textual.worker import Worker, WorkerState, get_current_worker

from frontend.session import Session
from frontend.tui.bridge import UiBridge
from frontend.tui.commands import palette_commands
from frontend.tui.failed import FailedStepScreen
from frontend.tui.main import MainScreen
from frontend.tui.modals import (
    HelpScreen,
    MaintenanceScreen,
    ManualScreen,
    QuitScreen,
    ReviewScreen,
    RollbackScreen,
)
from frontend.tui.preferences import remembered_theme, save_preference
from frontend.tui.report import ReportData, ReportScreen
from frontend.tui.start import StartScreen
from steps import build_plan
from wizard.checkpoint import Checkpoint, site_state_dir
from wizard.engine import Engine, RunSummary
from wizard.errors import EXIT_INTERNAL, EXIT_OK, WizardError
from wizard.events import (
    Answer,
    Decision,
    DecisionKind,
    Event,
    Reply,
    StepFinished,
    StepStarted,
)
from wizard.fleet import targets_text
from wizard.runview import RunView, fold
from wizard.status import load_status

# Called (and awaited) on the engine's loop; the session it returns is closed there.
SessionOpener = Callable[[], Awaitable[Session]]

DECISION_SCREENS = {
    DecisionKind.CONFIRM_APPLY: ReviewScreen,
    DecisionKind.MAINTENANCE_WINDOW: MaintenanceScreen,
    # A typed confirmation too: the peer's name (what loads it is in the actions).
    DecisionKind.STORAGE_LOAD: MaintenanceScreen,
    # And a change outside the new nodes: its name (gpu-operator-upgrade...) typed.
    DecisionKind.CLUSTER_CHANGE: MaintenanceScreen,
    # And a pod with no controller a drain would delete for good: its namespace/name typed.
    DecisionKind.DELETE_BARE_POD: MaintenanceScreen,
    DecisionKind.MANUAL_DONE: ManualScreen,
    DecisionKind.RETRY_FAILED: FailedStepScreen,
    DecisionKind.ROLLBACK: RollbackScreen,
}
CANCEL_POLL_S = 0.05  # how soon the engine's thread notices that the app is going away
ENGINE_STOP_S = 30.0  # how long the closing app waits for the engine's thread at most
CORDON_POLL_S = 2.0  # how often the main screen reads the checkpoint for cordoned nodes
IN_FLIGHT_ASK_S = 2.0  # how long quitting waits for the engine to say what is in flight


@dataclass(frozen=True)
class Failure:
    """An unexpected exception in the engine or the conductor: a bug, not a site condition."""

    error: BaseException | None
    where: str | None  # the step (and its targets) it happened in, if known
    journal: Path | None
    trace: str
    given_headline: str = ""  # a failure the engine recorded (its finding says what)

    @classmethod
    def of(cls, error: BaseException, where: str | None, journal: Path | None) -> Failure:
        trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        return cls(error, where, journal, trace)

    @property
    def headline(self) -> str:
        if self.given_headline:
            return self.given_headline
        return f"{type(self.error).__name__}: {self.error}"

    @classmethod
    def recorded(cls, summary: RunSummary, journal: Path | None) -> Failure | None:
        """A step's bug that the engine caught and recorded as an internal-error finding
        (it fails only that step's targets; the journal holds the traceback)."""
        found = [
            (step, target, finding)
            for (step, target), findings in summary.findings.items()
            for finding in findings
            if finding.check.endswith(".internal-error")
        ]
        if not found:
            return None
        step, _, finding = found[0]
        targets = ", ".join(t for s, t, _ in found if s == step)
        headline = finding.message.split(": ", 1)[1] if ": " in finding.message else finding.message
        return cls(None, f"step {step} on {targets}", journal,
                   "(the traceback is in the journal)", headline)  # fmt: skip

    def summary(self) -> str:
        """What the error screen and the terminal after exit say (the traceback apart)."""
        return "\n".join(
            [
                f"internal error{f' in {self.where}' if self.where else ''}: {self.headline}",
                journal_line(self.journal),
                "This is a bug in the wizard, not a problem of the site: the checkpoint is "
                "closed and keeps every result so far; run again to resume.",
            ]
        )


def journal_line(journal: Path | None) -> str:
    if journal is None:
        return "journal: none (the session did not open)"
    return f"journal: {journal}"


class TuiFrontEnd:
    """The engine's front end inside the TUI; called on the engine's loop."""

    wants_output_lines = True  # the live log shows them
    offers_retry = True  # a failed step asks: retry, waive (checks), or leave it failed

    def __init__(self, main: MainScreen, bridge: UiBridge, decisions: list[Decision]) -> None:
        self.main = main
        self.bridge = bridge
        self.decisions = decisions
        # Which steps run on which targets now (for an error screen that names the step).
        self.running: dict[str, list[str]] = {}
        self.last_step: str | None = None
        self.deciding = 0  # questions pending: while one waits, nothing runs
        # Failed steps the operator left failed in this run, (step, target) -> its question:
        # once the run has ended the palette offers to retry or waive them (WizardApp.rerun).
        self.left_failed: dict[tuple[str, str], Decision] = {}

    def emit(self, event: Event) -> None:
        if isinstance(event, StepStarted):
            self.running.setdefault(event.step, []).append(event.target)
            self.last_step = event.step
        elif isinstance(event, StepFinished) and event.target in self.running.get(event.step, []):
            self.running[event.step].remove(event.target)
            if not self.running[event.step]:
                del self.running[event.step]
        self.main.deliver(event)

    def where(self) -> str | None:
        if self.running:
            return "; ".join(
                f"step {step} on {targets_text(targets)}" for step, targets in self.running.items()
            )
        return f"step {self.last_step} (after its targets finished)" if self.last_step else None

    async def decide(self, decision: Decision) -> Reply:
        screen = DECISION_SCREENS[decision.kind]
        self.decisions.append(decision)
        make = partial(screen, decision)
        if decision.kind is DecisionKind.RETRY_FAILED:  # the same failure again after a retry
            attempt = sum(
                1 for d in self.decisions
                if d.kind is decision.kind and (d.step, d.target) == (decision.step, decision.target)
            )  # fmt: skip
            make = partial(FailedStepScreen, decision, attempt=attempt)
        # A fresh dialog each time it is shown: Esc sets it aside, `d` shows it again.
        self.deciding += 1
        try:
            reply = await self.bridge.ask(make)
        finally:
            self.deciding -= 1
        if decision.kind is DecisionKind.RETRY_FAILED and reply.answer is Answer.SKIP:
            self.left_failed[(decision.step, decision.target)] = decision
        return reply

    def steps_running(self) -> dict[str, str]:
        """target -> the step running there now; empty while a question waits (nothing
        runs then: quitting is as safe as between steps)."""
        if self.deciding:
            return {}
        try:  # filled on the engine's thread
            return {t: f"{step} is running" for step, ts in list(self.running.items()) for t in ts}
        except RuntimeError:  # changed while read: do not guess that nothing runs
            return {"(unknown)": "a step may be running"}


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


class InternalErrorScreen(Screen[None]):
    """An unexpected exception: where it happened, what it was, where the journal is."""

    BINDINGS = [Binding("q,escape", "app.quit", "Quit")]

    def __init__(self, failure: Failure) -> None:
        super().__init__()
        self.failure = failure

    def compose(self):
        yield Header(show_clock=False)
        yield Label("The wizard stopped on an internal error", classes="dialog-title danger")
        yield Static(self.failure.summary(), id="error-message")
        with VerticalScroll(id="error-trace"):
            yield Static(self.failure.trace, markup=False)
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
        self.failure: Failure | None = None
        self.finished = False
        self.decisions: list[Decision] = []
        self.exit_message = ""  # what the terminal says once the TUI is gone
        self.frontend: TuiFrontEnd | None = None
        self._bridge: UiBridge | None = None
        self._engine_loop: asyncio.AbstractEventLoop | None = None
        self._engine_thread_id: int | None = None
        self._engine_done = threading.Event()
        self._engine_done.set()  # no engine thread yet
        # Once a run ended with steps left failed, the engine's thread waits here for the
        # operator's retry or waiver from the palette (the waivers to record, maybe none).
        self._reruns: asyncio.Queue[dict[str, str]] | None = None

    @property
    def engine_running(self) -> bool:
        """Whether the engine's thread is still there (opening, running, or closing)."""
        return not self._engine_done.is_set()

    @property
    def journal_path(self) -> Path | None:
        if self.session is None:
            return None
        return site_state_dir(self.session.state_dir, self.session.site) / "journal.jsonl"

    def on_mount(self) -> None:
        theme = remembered_theme(self.available_themes)
        if theme is not None:
            self.theme = theme
        self.theme_changed_signal.subscribe(self, self._remember_theme)
        self._bridge = UiBridge(self)
        self._bridge.on_waiting = self._waiting_changed
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
        frontend: TuiFrontEnd | None = None
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
            # A resume shows what the checkpoint settled from the first frame, not only once
            # an interrupted change is finished and the plan replays it (screen-r3 B6).
            settled = None
            if choice != "restart":
                settled = await asyncio.to_thread(_checkpoint_view, session, self.plan)
            main = await ui.call(self._show_main, session, settled)
            frontend = self.frontend = TuiFrontEnd(main, ui, self.decisions)
            self._reruns = asyncio.Queue()
            waivers: dict[str, str] = {}
            while True:
                with Checkpoint.open(session.state_dir, session.site) as checkpoint:
                    if choice == "restart":
                        checkpoint.reset_all()
                        choice = "resume"
                    engine = Engine(session.site, self.plan, checkpoint, frontend,
                                    session.services, waivers=waivers)  # fmt: skip
                    self.engine = engine
                    try:
                        summary = await engine.run()
                    except Exception as exc:
                        if not isinstance(exc, WizardError):
                            _journal_failure(checkpoint, Failure.of(exc, frontend.where(), None))
                        raise
                    finally:
                        self.engine = None
                if Failure.recorded(summary, None) is not None:
                    session.keep_state()  # the error screen names its journal
                    main.deliver(partial(self._run_ended, summary))
                    break
                main.deliver(partial(self._run_ended, summary))
                if not frontend.left_failed:
                    break
                # The session (the demo's lab) stays open while a retry is possible.
                waivers = await self._reruns.get()
                frontend.left_failed.clear()
                main.deliver(self._run_again)
        except WizardError as exc:
            await ui.call(self._show_error, str(exc))
        except Exception as exc:
            if worker.cancelled_event.is_set():
                return  # the app is going away; nobody is left to tell
            where = frontend.where() if frontend is not None else None
            if session is not None:
                session.keep_state()  # the demo's temporary state would go with the lab
            await ui.call(self._show_failure, Failure.of(exc, where, self.journal_path))
        finally:
            if session is not None:
                await session.close()

    # -- on the UI loop -------------------------------------------------------------------

    async def _show_main(self, session: Session, settled: RunView | None = None) -> MainScreen:
        self.main_screen = MainScreen(session.site, self.plan)
        await self.push_screen(self.main_screen)
        if settled is not None:
            self.main_screen.seed(settled)
        _freeze_startup_objects()
        self.set_interval(CORDON_POLL_S, self._watch_cordons)
        self.call_later(self._watch_cordons)
        return self.main_screen

    async def _watch_cordons(self) -> None:
        """Which nodes a failed maintenance change left cordoned, read from the checkpoint
        (off the UI loop): the main screen names them until the engine uncordons them."""
        session, main = self.session, self.main_screen
        if session is None or main is None:
            return
        cordons = await asyncio.to_thread(_cordons, session, self.plan)
        if main.is_mounted:
            main.show_cordons(cordons)

    def _run_ended(self, summary: RunSummary) -> None:
        self.summary = summary
        self.finished = True
        if self.main_screen is not None:
            self.main_screen.run_ended()
        recorded = Failure.recorded(summary, self.journal_path)
        if recorded is not None:
            self.run_worker(self._show_failure(recorded))
            return
        if summary.stopped:
            assert self.main_screen is not None
            self.main_screen.show_stopped(summary.stopped)
            self.notify(f"The run stopped: {summary.stopped}", severity="error", timeout=10)
        else:
            self.run_worker(self.action_report())

    def rerun(self, waivers: dict[str, str] | None = None) -> bool:
        """Run again from the checkpoint (the steps left failed first), recording
        ``waivers`` (check -> reason) as ``--waive`` does: the palette's retry and waive
        once a run ended with steps left failed. False when no run waits for that."""
        loop, reruns, frontend = self._engine_loop, self._reruns, self.frontend
        if not (self.finished and frontend and frontend.left_failed and reruns and loop):
            return False
        loop.call_soon_threadsafe(reruns.put_nowait, dict(waivers or {}))
        self.finished = False  # one rerun per request: a second press finds none to start
        return True

    def ask_left_failed(self, decision: Decision) -> None:
        """The failed-step dialog again for a step left failed: retry, or waive its checks
        with a typed reason; either runs again from the checkpoint."""

        def answered(reply: Reply | None) -> None:
            if reply is None or reply.answer not in (Answer.PROCEED, Answer.WAIVE):
                return  # Esc, leave failed, abort: nothing changes
            checks = sorted({f.check for f in decision.findings})
            waive = reply.answer is Answer.WAIVE
            self.rerun({check: reply.reason.strip() for check in checks} if waive else {})

        self.push_screen(FailedStepScreen(decision), callback=answered)

    def _run_again(self) -> None:
        self.summary = None
        self.finished = False
        if self.main_screen is not None:
            self.main_screen.run_again()
        self.notify("running again from the checkpoint", timeout=4)

    async def _show_error(self, message: str) -> None:
        await self.push_screen(ErrorScreen(message))

    async def _show_failure(self, failure: Failure) -> None:
        self.failure = failure
        await self.push_screen(InternalErrorScreen(failure))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The conductor catches what the engine raises; this is for a bug of its own."""
        worker = event.worker
        if worker.group == "conductor" and event.state is WorkerState.ERROR and not self.failure:
            assert worker.error is not None
            self.run_worker(self._show_failure(Failure.of(worker.error, None, self.journal_path)))

    async def _report(self) -> ReportScreen:
        """report.md's report of the checkpoint (read off the UI loop), refreshed while it is
        open; before a session (or a checkpoint) exists, the report of what the run showed."""
        stopped = self.summary.stopped if self.summary else None
        session = self.session
        load = None
        if session is not None:

            async def load() -> ReportData | None:
                return await asyncio.to_thread(_report_data, session, self.plan)

        data = await load() if load is not None else None
        if data is None:
            main = self.main_screen
            site = main.site if main is not None else (session.site if session else None)
            if site is None:
                data = ReportData({"gates": [], "site": "", "skipped_steps": []}, [])
            else:
                view = main.view if main is not None else RunView(self.plan, site)
                data = ReportData.of_view(view)
        return ReportScreen(data, stopped, load)

    # -- quitting ---------------------------------------------------------------------------

    async def action_quit(self) -> None:
        """Leave; while a maintenance change is applied, say which node is where first."""
        if isinstance(self.screen, QuitScreen):
            return
        in_flight = await self.maintenance_in_flight()
        running = self.frontend.steps_running() if self.frontend and not self.finished else {}
        if in_flight:
            self.push_screen(QuitScreen(in_flight), callback=self._quit_answered)
        elif running:  # `q` mid-step asks too, as ctrl+c does
            self.push_screen(QuitScreen(running, maintenance=False), callback=self._quit_answered)
        else:
            self.leave()

    def _quit_answered(self, leave: bool | None) -> None:
        if leave:
            self.leave()

    def leave(self) -> None:
        if self.failure is not None:
            self.exit(EXIT_INTERNAL, return_code=EXIT_INTERNAL, message=self.failure.summary())
            return
        code, self.exit_message = self.exit_summary()
        self.exit(code, message=self.exit_message or None)

    def exit_summary(self) -> tuple[int, str]:
        """The exit code and what the terminal says after the TUI is gone: as a headless
        run's (1 after a stopped, aborted or failed run), with the report's verdict line."""
        session, summary = self.session, self.summary
        if session is None or self.main_screen is None:
            return EXIT_OK, ""
        if summary is None:
            # A node a failed change left cordoned is said here too: nothing else is on the
            # terminal once the TUI is gone (the report's verdict line names it otherwise).
            # So is a node a change in flight holds cordoned and half changed (E1).
            return EXIT_OK, (
                "gpu-node-wizard: left during the run; the checkpoint keeps every result so "
                f"far: run again to resume{_out_of_service(session, self.plan)}"
            )
        from frontend.runner import Outcome
        from wizard.report import verdict_line

        view = _checkpoint_view(session, self.plan)
        code = Outcome(session.site, summary, self.plan, view).exit_code
        data = None if view is None else ReportData.of_view(view)
        verdict = verdict_line(data.report).replace("**", "") if data is not None else ""
        said = f"the run stopped: {summary.stopped}" if summary.stopped else "the run ended"
        cordons = "".join(
            f"\n  to uncordon {c.node}: {c.remedy}" for c in (view.cordoned() if view else [])
        )
        return code, f"gpu-node-wizard: {said}\n{verdict}{cordons}".rstrip()

    async def maintenance_in_flight(self) -> dict[str, str]:
        """target -> the state a maintenance change left it in, asked on the engine's loop
        (the engine's own state is never read from another thread)."""
        engine = self.engine
        probe = getattr(engine, "maintenance_in_flight", None)
        if probe is None:
            return {}
        loop = self._engine_loop
        if loop is None or not loop.is_running():
            return dict(probe())  # no engine thread (a test's engine)

        async def ask() -> dict[str, str]:
            return dict(probe())

        try:
            future = asyncio.run_coroutine_threadsafe(ask(), loop)
            return await asyncio.wait_for(asyncio.wrap_future(future), IN_FLIGHT_ASK_S)
        except (TimeoutError, RuntimeError):
            # The engine is busy or gone: do not guess that nothing is in flight.
            return {"(unknown)": "the engine did not say in time whether a change is in flight"}

    # -- actions and commands ----------------------------------------------------------------

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def _waiting_changed(self) -> None:
        waiting = self._bridge.waiting if self._bridge is not None else None
        if self.main_screen is not None and self.main_screen.is_mounted:
            self.main_screen.show_waiting(waiting[0] if waiting else None)

    def action_decide(self) -> None:
        """``d``: the question set aside with Esc, again."""
        if self._bridge is None or not self._bridge.reopen():
            self.notify("no question waits for you", timeout=3)

    async def action_report(self) -> None:
        await self.push_screen(await self._report())

    async def action_measurements(self) -> None:
        from frontend.tui.measurements import MeasurementsScreen

        session = self.session
        measurements: list = []
        if session is not None:  # read the checkpoint's file off the UI loop
            measurements = await asyncio.to_thread(_measurements, session, self.plan)
        self.push_screen(MeasurementsScreen(measurements))

    def get_system_commands(self, screen: Screen[Any]):
        """Every action by name (frontend/tui/commands.py), then Textual's own: the theme (which
        is remembered), the keys panel, a screenshot."""
        yield from palette_commands(self, screen)
        for command in super().get_system_commands(screen):
            if command.title != "Quit":
                yield command
        yield SystemCommand("Quit", "Leave; the checkpoint keeps the progress", self.action_quit)

    def _remember_theme(self, theme: Theme) -> None:
        """The chosen theme is the next run's too (written off the UI loop)."""
        self.run_worker(partial(save_preference, "theme", theme.name), thread=True,
                        group="preferences")  # fmt: skip


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
    from wizard.report import checkpoint_report

    report = checkpoint_report(session.state_dir, session.site, plan)
    return report["measurements"] if report else []


def _checkpoint_view(session: Session, plan: Any) -> RunView | None:
    """The fold of the site's checkpoint as it is on disk (None: there is none yet)."""
    from wizard.checkpoint import load_run

    run = load_run(site_state_dir(session.state_dir, session.site))
    return None if run is None else fold(run, plan, session.site)


def _cordons(session: Session, plan: Any) -> list:
    view = _checkpoint_view(session, plan)
    return view.cordoned() if view is not None else []


def _out_of_service(session: Session, plan: Any) -> str:
    """The lines an exit prints for the nodes the run leaves out of service: each change in
    flight (its stage, and the command that finishes or rolls it back), then each cordon."""
    lines = [f"\n{line}" for line in _in_flight_lines(session)]
    lines += [f"\n{c.text()}\n  to uncordon: {c.remedy}" for c in _cordons(session, plan)]
    return "".join(lines)


def _in_flight_lines(session: Session) -> list[str]:
    from wizard.checkpoint import finish_command, load_run, out_of_service

    run = load_run(site_state_dir(session.state_dir, session.site))
    if run is None or not run.in_flight():
        return []
    mid = [line for line in out_of_service(run, session.site) if "mid-change" in line]
    return [*mid, f"  finish or roll back: {finish_command(session.site, session.state_dir)}"]


def _report_data(session: Session, plan: Any) -> ReportData | None:
    view = _checkpoint_view(session, plan)
    return None if view is None else ReportData.of_view(view)


def _journal_failure(checkpoint: Checkpoint, failure: Failure) -> None:
    """The traceback goes into the journal too, so that the journal alone makes a bug report."""
    with contextlib.suppress(OSError, ValueError):
        checkpoint.journal(
            {
                "event": "internal-error",
                "where": failure.where,
                "error": failure.headline,
                "traceback": failure.trace,
            }
        )


def run_tui(opener: SessionOpener) -> int:
    app = WizardApp(opener)
    return tui_exit_code(app, app.run())


def tui_exit_code(app: WizardApp, result: object) -> int:
    """The process's exit code once ``app`` has ended with ``result``."""
    if app.failure is not None:
        return EXIT_INTERNAL  # the error screen's summary was printed on exit
    if app.return_code:
        # Textual ended the app on an exception in a screen or a handler and printed the
        # traceback. Its own return code (1) would read as "a check failed".
        print(
            f"gpu-node-wizard: internal error in the TUI (traceback above); "
            f"{journal_line(app.journal_path)}",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
    return result if isinstance(result, int) else 0
