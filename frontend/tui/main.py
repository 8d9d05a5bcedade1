"""The main screen: phases with per-node state, the current step's findings with their
evidence, an error panel for hosts that cannot be used, and the live command log.

The screen composes widgets (frontend/tui/widgets/, one a file with its own CSS): it folds
the engine's events into its ``RunView`` (``self.view``, wizard/runview.py) and feeds each
widget that fold, or the part it shows (a phase's states, the findings just found, the
cordons the checkpoint's fold names); no widget reads the events or the checkpoint."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Header, Input, Label, ProgressBar

from frontend.tui import findings as findings_view
from frontend.tui import layout
from frontend.tui.logview import FollowLog, LogScreen
from frontend.tui.widgets.cordon_panel import CordonPanel
from frontend.tui.widgets.finding_detail import FindingDetail
from frontend.tui.widgets.findings_filter import FindingsFilter
from frontend.tui.widgets.findings_table import FindingsTable
from frontend.tui.widgets.host_error_panel import HostErrorPanel
from frontend.tui.widgets.phase_table import PhaseTable
from frontend.tui.widgets.waiting_line import WaitingLine
from wizard.events import (
    CommandFinished,
    CommandStarted,
    Event,
    Notice,
    OutputLine,
    PhaseStarted,
    StepFinished,
    StepStarted,
    WaitEnded,
    Waiting,
)
from wizard.fleet import is_fleet
from wizard.model import Finding, Severity, StepState, worst
from wizard.plan import Plan
from wizard.runview import Cordon, RunView
from wizard.site import Site


class EngineEvents(Message):
    """Engine events wait in the screen's inbox (the engine never touches widgets)."""


# At most this many inbox items per message: a burst (a fleet's check output) is shown in
# slices, so that keys and repaints get their turn in between.
DRAIN_SLICE = 500

# How often a main screen under a modal takes its events in.
COVERED_DRAIN_S = 0.25

Delivery = Event | Callable[[], object]


class MainScreen(Screen[None]):
    HORIZONTAL_BREAKPOINTS = layout.HORIZONTAL
    VERTICAL_BREAKPOINTS = layout.VERTICAL

    BINDINGS = [
        # Named actions of this screen: a bare `focus('log')` resolved to the screen's own
        # `focus` method with "log" as a CSS query, and the app crashed on the first press.
        Binding("l", "show_log", "Log"),
        Binding("f", "focus_findings", "Findings"),
        Binding("F", "problems_only", "Problems", show=False),
        Binding("o", "sort_findings", "Sort", show=False),
        Binding("c", "copy_finding", "Copy", show=False),
        Binding("slash", "filter_findings", "Filter", show=False),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("r", "app.report", "Report"),
        Binding("m", "app.measurements", "Measure"),
        Binding("n", "nodes", "Nodes"),
        Binding("d", "app.decide", "Decide", show=False),
        Binding("p", "toggle_phases", "Phases"),
        Binding("question_mark", "app.help", "Help"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self, site: Site, plan: Plan) -> None:
        super().__init__()
        self.site = site
        self.plan = plan
        # The run as the engine records it (wizard/runview.py): each step's state and
        # findings, a retry's result in the place of the one it retried.
        self.view = RunView(plan, site)
        self.transcript: list[str] = []
        self.node_names = [n.name for n in site.nodes]
        self.fleet = is_fleet(len(self.node_names))
        self.total = sum(len(plan.targets(s, site)) for s in plan.steps())
        # Filled from the engine's thread, emptied on the UI loop: one EngineEvents message
        # is in flight while the inbox holds anything.
        self._inbox: deque[Delivery] = deque()
        self._inbox_lock = threading.Lock()
        self._inbox_posted = False
        self._pending_lines: list[str] = []
        self._covered_drain: Timer | None = None
        # Elapsed times: the run's, and each step's on each target since it started.
        self.clock = time.monotonic  # a snapshot test sets a fixed clock
        self.wall = lambda: time.strftime("%H:%M:%S")  # the log's time of day (fixed there too)
        self._run_started = self.clock()
        self._started: dict[tuple[str, str], float] = {}
        self._current: tuple[str, str, str] | None = None  # title, step, target shown now
        # What steps wait for (a node's reboot), since when and for how long at most: the
        # progress each second. A wait polls: each of its repeated commands is logged once
        # (a wait may poll two in turn: the RDMA device, and the kernel log for a refusal).
        self._waiting: dict[tuple[str, str], tuple[str, float, float]] = {}
        # target -> (the commands its wait polled, or its last one; how often they ran again)
        self._polls: dict[str, tuple[set[str], int]] = {}
        self._quiet: set[str] = set()  # targets whose repeated poll is running now
        self._run_ended = False
        # Nodes a failed maintenance change left cordoned (from the checkpoint, see
        # WizardApp._watch_cordons): named in the header and a panel until uncordoned.
        self.cordons: list[Cordon] = []

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with Horizontal():
            with Vertical(id="sidebar"):
                yield Label("Phases", classes="pane-title")
                yield PhaseTable(self.plan, self.site, fleet=self.fleet, id="phases")
            with Vertical(id="main"):
                yield Label("Starting...", id="step-title")
                yield WaitingLine(id="waiting")
                with Horizontal(id="progress-line"):
                    yield ProgressBar(total=self.total, id="progress", show_eta=False)
                    yield Label("", id="elapsed")
                yield HostErrorPanel(id="error-panel")
                yield CordonPanel(id="cordon-panel")
                yield FindingsFilter(id="findings-filter")
                yield FindingsTable(self.view, fleet=self.fleet, id="findings")
                yield FindingDetail(id="detail")
                yield Label("Live log", classes="pane-title")
                yield FollowLog(id="log", max_lines=20_000)
        # Compact, without the palette hint: every key fits in 80 columns.
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.title = "gpu-node-wizard"
        self.sub_title = f"site {self.site.name}"
        self.set_interval(1.0, self._tick)

    def on_resize(self) -> None:
        self.query_one(FindingsTable).fit()

    def _tick(self) -> None:
        """Once a second: the running step's elapsed time and the run's. In a label of
        this screen, not the header's sub-title: the header re-renders a changed title
        from a callback that can race the screen's teardown when the app quits."""
        now = self.clock()
        if self._run_ended:
            return
        parts = [f"run {elapsed(now - self._run_started)}"]
        if self._current is not None:
            _title, step, target = self._current
            since = self._started.get((step, target))
            if since is not None:
                parts.insert(0, f"{step} on {target}: {elapsed(now - since)}")
        # A wait first, its count before its text: on a narrow screen (80 or 100 columns)
        # the line is cut at the right, and how far the wait is must survive the cut.
        for message, since, timeout in self._waiting.values():
            parts.insert(0, f"⧗ {wait_progress(now - since, timeout)}: {message}")
        self.query_one("#elapsed", Label).update(" · ".join(parts))

    def run_again(self) -> None:
        """A retry from the palette after the run ended: the run's time starts again."""
        self._run_ended = False
        self._run_started = self.clock()
        self.query_one("#step-title", Label).update("Running again from the checkpoint")

    def run_ended(self) -> None:
        """The run is over: the run's time stops."""
        self._run_ended = True
        took = elapsed(self.clock() - self._run_started)
        self.query_one("#elapsed", Label).update(f"the run took {took}")

    # -- engine events --------------------------------------------------------------------------

    def deliver(self, item: Delivery) -> None:
        """Queue an engine event, or a call to make after the events before it; from any thread."""
        with self._inbox_lock:
            self._inbox.append(item)
            if self._inbox_posted:
                return
            self._inbox_posted = True
        self.post_message(EngineEvents())  # thread-safe

    @on(EngineEvents)
    def _inbox_ready(self) -> None:
        if self.is_active:  # the top screen
            self.drain()
        elif self._covered_drain is None:
            # Under a modal every change here is painted again through the modal's dimmed
            # background: take the events in a few times a second, not as they come.
            self._covered_drain = self.set_timer(COVERED_DRAIN_S, self._drain_covered)

    def _drain_covered(self) -> None:
        self._covered_drain = None
        self.drain(limit=None)

    def on_screen_resume(self) -> None:
        if self._covered_drain is not None:  # uncovered: show what waited at once
            self._covered_drain.stop()
            self._drain_covered()

    def drain(self, limit: int | None = DRAIN_SLICE) -> None:
        """Show what the inbox holds, in order (at most ``limit`` items now, the rest next)."""
        with self._inbox_lock:
            count = len(self._inbox) if limit is None else min(len(self._inbox), limit)
            items = [self._inbox.popleft() for _ in range(count)]
            more = bool(self._inbox)
            self._inbox_posted = more
        try:
            for item in items:
                if isinstance(item, Event):
                    self.engine_event(item)
                else:
                    self._flush_log()  # a call after the events sees them on screen
                    item()
        finally:
            self._flush_log()
            self.query_one(FindingsTable).refill_if_due()
        if more:
            self.post_message(EngineEvents())

    def engine_event(self, event: Event) -> None:
        match event:
            case PhaseStarted(title=title):
                self._log(f"== {title}")
            case StepStarted(step=step, target=target, title=title):
                self.view.apply(event)
                self._started[(step, target)] = self.clock()
                self._current = (title, step, target)
                self.query_one("#step-title", Label).update(f"{title}  ({step} on {target})")
                self.query_one(PhaseTable).show_step(self.view, step)
            case StepFinished(step=step, target=target):
                replaces = bool(self.view.record(step, target).findings)
                self.view.apply(event)
                record = self.view.record(step, target)  # what the fold made of it
                self.query_one(PhaseTable).show_step(self.view, step)
                self.query_one("#progress", ProgressBar).advance(1)
                self._wait_over(step, target)
                since = self._started.pop((step, target), None)
                took = f" ({elapsed(self.clock() - since)})" if since is not None else ""
                msg = record.message
                self._log(
                    f"{target}: {step}: {record.state.value}{f' - {msg}' if msg else ''}{took}"
                )
                if self._current is not None and self._current[1:] == (step, target):
                    self._current = None
                # The findings it replaced (a retry's) leave the table.
                count = len(record.findings)
                self.query_one(FindingsTable).found(count, replaced=replaces)
                self.query_one(HostErrorPanel).found(self.findings[len(self.findings) - count :])
            case Waiting(step=step, target=target, message=text, timeout_s=timeout):
                self._waiting[(step, target)] = (text, self.clock(), timeout)
                self._log(f"{target}: {step}: {text} (at most {elapsed(timeout)})")
                self._tick()
            case WaitEnded(step=step, target=target):
                self._wait_over(step, target)
                self._tick()
            case CommandStarted(target=target, command=command):
                seen, repeats = self._polls.get(target, (set(), 0))
                waiting = any(t == target for _, t in self._waiting)
                if command in seen and waiting:
                    self._polls[target] = (seen, repeats + 1)  # one of the wait's polls, again
                    self._quiet.add(target)
                    return
                self._polls[target] = ({*seen, command}, repeats) if waiting else ({command}, 0)
                self._quiet.discard(target)
                self._log(f"{target}$ {command}")
            case OutputLine(target=target) | CommandFinished(target=target) if (
                target in self._quiet
            ):
                pass  # the repeated poll's output: the first one's is in the log
            case OutputLine(target=target, line=line):
                self._log(f"{target}| {line}")
            case CommandFinished(target=target, exit_status=status, expected=meaning) if (
                status not in (0, None)
            ):
                # An exit the command's definition expects is no error: say what it means.
                self._log(f"{target}: exit {status}, as expected: {meaning}" if meaning
                          else f"{target}: exit status {status}")  # fmt: skip
            case Notice(message=text, target=target):
                self._log(f"note{f' ({target})' if target else ''}: {text}")
                if not (self.fleet and target):  # not a toast per node on a fleet: the log has it
                    self.notify(text, timeout=6)

    def _wait_over(self, step: str, target: str) -> None:
        """A wait ended (or its step did): say how long it took and how often it polled."""
        wait = self._waiting.pop((step, target), None)
        self._quiet.discard(target)
        if wait is None:
            return
        message, since, _ = wait
        seen, repeats = self._polls.pop(target, (set(), 0))
        runs = repeats + len(seen)  # each command the wait polled was shown once
        if not repeats:
            again = ""
        elif len(seen) < 2:
            again = f"; its command ran {runs} times, shown once"
        else:
            again = f"; its {len(seen)} commands ran {runs} times, each shown once"
        self._log(f"{target}: {step}: done {message} after {elapsed(self.clock() - since)}{again}")

    def _log(self, line: str) -> None:
        line = f"{self.wall()} {line}"  # when it happened: a log read later needs it
        self.transcript.append(line)
        self._pending_lines.append(line)

    def _flush_log(self) -> None:
        """One write for the lines of a drain, not one refresh per line."""
        if self._pending_lines:
            self.query_one("#log", FollowLog).write_lines(self._pending_lines)
            self._pending_lines = []

    def seed(self, settled: RunView) -> None:
        """The checkpoint's records before the engine's first event (a resume): the phases
        show what is settled while an interrupted change is finished first; the engine's
        events replace each record as it replays the plan."""
        for key, record in settled.records.items():
            self.view.put(*key, record)
        self.view.cordons = settled.cordons
        table = self.query_one(PhaseTable)
        for phase in self.plan.phases:
            if phase.steps:
                table.show_step(self.view, phase.steps[0].id)

    @property
    def findings(self) -> list[tuple[str, str, Finding]]:
        """(step, target, finding) as found, each record's latest (the fold's)."""
        return self.view.findings

    @property
    def states(self) -> dict[tuple[str, str], StepState]:
        return self.view.states

    def action_problems_only(self) -> None:
        """Only failures, warnings, waivers and skipped steps, failures first (F again: all)."""
        table = self.query_one(FindingsTable)
        table.toggle_problems_only()
        self.notify(
            "findings: problems only, failures first" if table.problems_only else "findings: all",
            timeout=3,
        )

    def action_sort_findings(self) -> None:
        """The next order: as found, failures first, by gate, by node."""
        table = self.query_one(FindingsTable)
        table.next_sort()
        self.notify(f"findings: {findings_view.SORT_TITLES[table.sort]}", timeout=3)

    def action_filter_findings(self) -> None:
        """Show the filter box over the findings and put the cursor there."""
        box = self.query_one(FindingsFilter)
        box.display = True
        box.focus()

    @on(Input.Changed, "#findings-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.query_one(FindingsTable).filter_by(event.value)

    @on(Input.Submitted, "#findings-filter")
    def _filter_submitted(self) -> None:
        self.query_one(FindingsTable).focus()  # the filter stays; Esc there clears it

    def action_clear_filter(self) -> None:
        """Esc: no filter (the box goes away); nothing happens without one."""
        box = self.query_one(FindingsFilter)
        box.value = ""
        box.display = False
        table = self.query_one(FindingsTable)
        table.filter_by("")
        table.focus()

    def action_copy_finding(self) -> None:
        """The highlighted finding in full (check, message, fix, evidence) to the clipboard."""
        table = self.query_one(FindingsTable)
        if not table.row_count:
            self.notify("no finding to copy yet", timeout=3)
            return
        row = table.highlighted_finding()
        if row is None:
            return
        self.app.copy_to_clipboard(findings_view.detail_text(row))
        self.notify("finding copied to the clipboard (OSC 52)", timeout=3)

    @on(FindingsTable.FindingShown)
    def _finding_shown(self, event: FindingsTable.FindingShown) -> None:
        self.query_one(FindingDetail).show(event.row)

    def action_show_log(self) -> None:
        """Every command and its output, full screen, with a search."""
        self.app.push_screen(LogScreen(self.transcript))

    def action_toggle_phases(self) -> None:
        """Show or hide the phases sidebar (hidden by default below 100 columns)."""
        self.toggle_class("-phases-shown" if self.has_class("-narrow") else "-phases-hidden")

    def action_focus_findings(self) -> None:
        self.query_one(FindingsTable).focus()

    def action_nodes(self) -> None:
        """The fleet view: every node's state per phase (the sidebar shows six)."""
        from frontend.tui.fleet import FleetScreen

        self.app.push_screen(FleetScreen(self))

    def show_cordons(self, cordons: list[Cordon]) -> None:
        """Name every node left cordoned, why, and how to uncordon it (header and panel)."""
        if cordons == self.cordons:
            return
        self.cordons = list(cordons)
        nodes = ", ".join(c.node for c in cordons)
        self.sub_title = f"site {self.site.name}" + (f" · CORDONED: {nodes}" if nodes else "")
        panel = next(self.query(CordonPanel).results(), None)
        if panel is not None:  # None: the screen is being taken down (the app is quitting)
            panel.show(cordons)

    def show_waiting(self, title: str | None) -> None:
        """A question set aside with Esc waits: say which, and that ``d`` answers it."""
        line = next(self.query(WaitingLine).results(), None)
        if line is not None:  # None: the screen is being taken down (the app is quitting)
            line.show(title)

    def show_stopped(self, reason: str) -> None:
        """The run ended early: say why, and stay here so the operator can read the findings."""
        self.query_one("#step-title", Label).update(
            Content.assemble(("Stopped: ", "bold $text-error"), reason, "  (r: report, q: quit)")
        )

    def worst_severity(self) -> Severity:
        return worst([f for _, _, f in self.findings])


def wait_progress(waited: float, timeout: float) -> str:
    """``24 of 60 s``, ``3:07 of 15:00``: how far a wait is into its longest time."""
    waited = min(max(0.0, waited), timeout)
    if timeout <= 60:
        return f"{int(waited)} of {int(timeout)} s"
    return f"{int(waited) // 60}:{int(waited) % 60:02d} of {elapsed(timeout)}"


def elapsed(seconds: float) -> str:
    """``4.2s``, ``3:07``, ``1:02:03``: short enough for a title line."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
