"""The main screen: phases with per-node state, the current step's findings with their
evidence, an error panel for hosts that cannot be used, and the live command log."""

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
from textual.widgets import DataTable, Footer, Header, Input, Label, ProgressBar, Static
from textual.widgets.data_table import ColumnKey

from screens import findings as findings_view
from screens import layout
from screens.logview import FollowLog, LogScreen
from wizard.events import (
    CommandFinished,
    CommandStarted,
    Event,
    Notice,
    OutputLine,
    PhaseStarted,
    StepFinished,
    StepStarted,
    Waiting,
)
from wizard.fleet import is_fleet
from wizard.model import Finding, Severity, StepState, worst
from wizard.plan import Plan
from wizard.site import Site
from wizard.status import Cordon

GLYPHS = {
    StepState.PENDING: "·",
    StepState.RUNNING: "…",
    StepState.WAITING: "⧗",
    StepState.DONE: "✔",
    StepState.FAILED: "✖",
    StepState.SKIPPED: "↷",
    StepState.BLOCKED: "⊘",
}
SEVERITY_STYLE = {
    Severity.PASS: "$text-success",
    Severity.WARN: "$text-warning",
    Severity.FAIL: "bold $text-error",
    Severity.SKIP: "$text-muted",
}


class EngineEvents(Message):
    """Engine events wait in the screen's inbox (the engine never touches widgets)."""


# At most this many inbox items per message: a burst (a fleet's check output) is shown in
# slices, so that keys and repaints get their turn in between.
DRAIN_SLICE = 500

# The findings table's columns (MainScreen._fit_findings): an id is cut only past this.
ID_WIDTH_MAX = 40
MESSAGE_MIN = 12

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
        self.findings: list[tuple[str, str, Finding]] = []
        self.states: dict[tuple[str, str], StepState] = {}
        self.transcript: list[str] = []
        self.node_names = [n.name for n in site.nodes]
        self.fleet = is_fleet(len(self.node_names))
        self.problems_only = False  # F: the findings table lists only what needs attention
        self.sort = "found"  # o: the findings table's order (screens/findings.SORTS)
        self.filter_text = ""  # /: only the findings whose node, gate or check match
        # An ordered table is filled anew once per drain, not once per finding (a fleet's
        # check brings thousands); the finding to show then, if one needs attention.
        self._refill_due = False
        self._reported: set[tuple[str, str]] = set()  # (step, target) that brought findings
        self._select_due: int | None = None
        # The longest check name and node shown so far: their columns are never narrower.
        self._longest = {"check": 0, "target": max(len("cluster"), *map(len, self.node_names))}
        # A fleet gets one count column instead of a column per node, so that the phase
        # titles stay in view; the fleet view (n) has a row per node.
        self.node_columns = [] if self.fleet else self.node_names
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
        # What steps wait for (a node's reboot) and until when: a countdown each second.
        self._waiting: dict[tuple[str, str], tuple[str, float]] = {}
        self._run_ended = False
        # Nodes a failed maintenance change left cordoned (from the checkpoint, see
        # WizardApp._watch_cordons): named in the header and a panel until uncordoned.
        self.cordons: list[Cordon] = []

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with Horizontal():
            with Vertical(id="sidebar"):
                yield Label("Phases", classes="pane-title")
                yield DataTable(id="phases", cursor_type="row", zebra_stripes=False)
            with Vertical(id="main"):
                yield Label("Starting...", id="step-title")
                yield Static("", id="waiting")
                with Horizontal(id="progress-line"):
                    yield ProgressBar(total=self.total, id="progress", show_eta=False)
                    yield Label("", id="elapsed")
                yield Static("", id="error-panel")
                yield Static("", id="cordon-panel")
                yield Input(placeholder="filter the findings: node, gate, check or severity "
                            "(Esc clears)", id="findings-filter")  # fmt: skip
                yield DataTable(id="findings", cursor_type="row", zebra_stripes=True)
                yield Static("Select a finding to see its remediation and evidence.", id="detail")
                yield Label("Live log", classes="pane-title")
                yield FollowLog(id="log", max_lines=20_000)
        # Compact, without the palette hint: every key fits in 80 columns.
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.title = "gpu-node-wizard"
        self.sub_title = f"site {self.site.name}"
        phases = self.query_one("#phases", DataTable)
        # State columns first (narrow), so a long phase title never hides them.
        phases.add_column("cl", key="cluster", width=2)
        for name in self.node_columns:
            phases.add_column(_short(name), key=name, width=max(2, len(_short(name))))
        if self.fleet:  # more nodes than columns: a per-phase count over all of them
            phases.add_column(f"all {len(self.node_names)}", key="fleet", width=12)
        phases.add_column("phase", key="phase")
        for phase in self.plan.phases:
            has_cluster = any(s.scope.value == "cluster" for s in phase.steps)
            cells = [GLYPHS[StepState.PENDING] if has_cluster else ""]
            has_node = any(s.scope.value == "node" for s in phase.steps)
            cells += [GLYPHS[StepState.PENDING] if has_node else ""] * len(self.node_columns)
            if self.fleet:
                cells.append(GLYPHS[StepState.PENDING] if has_node else "")
            cells.append(f"{phase.number:>2} {phase.title}")
            phases.add_row(*cells, key=phase.id)
        findings = self.query_one("#findings", DataTable)
        findings.add_column("sev", key="sev", width=6)
        findings.add_column("target", key="target", width=12)
        findings.add_column("check", key="check", width=26)
        findings.add_column("message", key="message")
        self._fit_findings()
        self.query_one("#error-panel", Static).display = False
        self.query_one("#waiting", Static).display = False
        self.query_one("#cordon-panel", Static).display = False
        self.query_one("#findings-filter", Input).display = False
        self.set_interval(1.0, self._tick)

    def on_resize(self) -> None:
        self._fit_findings()

    def _fit_findings(self) -> None:
        """Columns by priority (as k9s does): the check name and the node are ids the
        operator types (`--waive CHECK=...`, `--redo STEP@NODE`), so they keep their full
        width; the message takes what is left and shrinks first (the detail below shows it
        whole). Only past ``ID_WIDTH_MAX`` is an id cut, and then the message keeps
        ``MESSAGE_MIN``."""
        table = self.query_one("#findings", DataTable)
        width = table.size.width or self.size.width
        pad = 2 * table.cell_padding
        check = min(max(self._longest["check"], 8), ID_WIDTH_MAX)
        target = min(max(self._longest["target"], 6), ID_WIDTH_MAX)
        room = width - pad * 4 - 6 - 2  # sev, the scrollbar
        if room - check - target < MESSAGE_MIN:  # too narrow for every id: ids still first
            check = max(8, min(check, room - target - MESSAGE_MIN))
        message = max(MESSAGE_MIN, room - check - target)
        columns = table.columns
        for key, value in (("target", target), ("check", check), ("message", message)):
            column = columns.get(ColumnKey(key))
            if column is not None and (column.width != value or column.auto_width):
                column.width = value
                column.auto_width = False  # the message too: it takes the rest, no more
                table._require_update_dimensions = True
        table.refresh()

    def _tick(self) -> None:
        """Once a second: the running step's elapsed time and the run's. In a label of
        this screen, not the header's sub-title: the header re-renders a changed title
        from a callback that can race the screen's teardown when the app quits."""
        now = self.clock()
        if self._run_ended:
            return
        parts = [f"run {elapsed(now - self._run_started)}"]
        for message, until in self._waiting.values():
            parts.insert(0, f"⧗ {message}: at most {elapsed(max(0.0, until - now))} left")
        if self._current is not None:
            _title, step, target = self._current
            since = self._started.get((step, target))
            if since is not None:
                parts.insert(0, f"{step} on {target}: {elapsed(now - since)}")
        self.query_one("#elapsed", Label).update(" · ".join(parts))

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
            self._refill_if_due()
        if more:
            self.post_message(EngineEvents())

    def engine_event(self, event: Event) -> None:
        match event:
            case PhaseStarted(title=title):
                self._log(f"== {title}")
            case StepStarted(step=step, target=target, title=title):
                self.states[(step, target)] = StepState.RUNNING
                self._started[(step, target)] = self.clock()
                self._current = (title, step, target)
                self.query_one("#step-title", Label).update(f"{title}  ({step} on {target})")
                self._refresh_phase(step)
            case StepFinished(step=step, target=target, state=state, message=msg, findings=fs):
                self.states[(step, target)] = state
                self._refresh_phase(step)
                self.query_one("#progress", ProgressBar).advance(1)
                self._waiting.pop((step, target), None)
                since = self._started.pop((step, target), None)
                took = f" ({elapsed(self.clock() - since)})" if since is not None else ""
                self._log(f"{target}: {step}: {state.value}{f' - {msg}' if msg else ''}{took}")
                if self._current is not None and self._current[1:] == (step, target):
                    self._current = None
                if (step, target) in self._reported:
                    # A retry's result replaces the one before it (the checkpoint keeps only
                    # the latest too): a superseded failure must not stand beside its waiver.
                    self.findings = [r for r in self.findings if r[:2] != (step, target)]
                    self._refill_due = True
                self._reported.add((step, target))
                for finding in fs:
                    self._add_finding(step, target, finding)
            case Waiting(step=step, target=target, message=text, timeout_s=timeout):
                self._waiting[(step, target)] = (text, self.clock() + timeout)
                self._log(f"{target}: {step}: {text} (at most {elapsed(timeout)})")
                self._tick()
            case CommandStarted(target=target, command=command):
                self._log(f"{target}$ {command}")
            case OutputLine(target=target, line=line):
                self._log(f"{target}| {line}")
            case CommandFinished(target=target, exit_status=status) if status not in (0, None):
                self._log(f"{target}: exit status {status}")
            case Notice(message=text, target=target):
                self._log(f"note{f' ({target})' if target else ''}: {text}")
                if not (self.fleet and target):  # not a toast per node on a fleet: the log has it
                    self.notify(text, timeout=6)

    def _log(self, line: str) -> None:
        line = f"{self.wall()} {line}"  # when it happened: a log read later needs it
        self.transcript.append(line)
        self._pending_lines.append(line)

    def _flush_log(self) -> None:
        """One write for the lines of a drain, not one refresh per line."""
        if self._pending_lines:
            self.query_one("#log", FollowLog).write_lines(self._pending_lines)
            self._pending_lines = []

    def _refresh_phase(self, step_id: str) -> None:
        phase = self.plan.phase_of(step_id)
        table = self.query_one("#phases", DataTable)
        for target in ["cluster", *self.node_columns]:
            states = [
                self.states.get((s.id, target))
                for s in phase.steps
                if target in self.plan.targets(s, self.site)
            ]
            if states:
                table.update_cell(phase.id, target, phase_glyph(states))
        if self.fleet and any(s.scope.value == "node" for s in phase.steps):
            glyphs = [
                phase_glyph(
                    [self.states.get((s.id, n)) for s in phase.steps if s.scope.value == "node"]
                )
                for n in self.node_names
            ]
            counts = " ".join(
                f"{g}{glyphs.count(g)}" for g in ("✔", "↷", "✖", "…", "⊘") if glyphs.count(g)
            )
            table.update_cell(phase.id, "fleet", counts or GLYPHS[StepState.PENDING])

    def _add_finding(self, step: str, target: str, finding: Finding) -> None:
        self.findings.append((step, target, finding))
        index = len(self.findings) - 1
        if self._shows(finding, index):
            if self._ordered() or self._refill_due:
                self._refill_due = True  # the new one takes its place at the drain's end
                if finding.severity is not Severity.PASS:
                    self._select_due = index
            else:
                self._add_row(index)
                if finding.severity is not Severity.PASS:
                    self._select(index)
        if finding.check.endswith((".reachable", ".timeout")) and finding.severity is Severity.FAIL:
            panel = self.query_one("#error-panel", Static)
            panel.update(
                Content.assemble(
                    ("Cannot use ", "bold"),
                    (target, "bold"),
                    "\n",
                    Content(finding.message),
                    "\n",
                    ("What to do: ", "bold"),
                    Content(finding.remediation),
                )
            )
            panel.display = True

    def _shows(self, finding: Finding, index: int | None = None) -> bool:
        filtered = self.filter_text and index is not None
        if filtered and not findings_view.matches(self.findings[index], self.filter_text):
            return False
        return findings_view.shows(finding, fleet=self.fleet, problems_only=self.problems_only)

    def _ordered(self) -> bool:
        return self.problems_only or self.sort != "found" or bool(self.filter_text)

    def _select(self, index: int) -> None:
        table = self.query_one("#findings", DataTable)
        table.move_cursor(row=table.get_row_index(str(index)))
        self._show_detail(index)

    def _refill_if_due(self) -> None:
        if not self._refill_due:
            return
        self._refill_due = False
        self._fill_findings()
        select, self._select_due = self._select_due, None
        if select is not None:
            self._select(select)

    def _add_row(self, index: int) -> None:
        _step, target, finding = self.findings[index]
        if len(finding.check) > self._longest["check"] or len(target) > self._longest["target"]:
            self._longest["check"] = max(self._longest["check"], len(finding.check))
            self._longest["target"] = max(self._longest["target"], len(target))
            self._fit_findings()
        severity = findings_view.shown_severity(finding)
        label = "waived" if finding.waived else severity.value
        self.query_one("#findings", DataTable).add_row(
            Content.styled(label, SEVERITY_STYLE[severity]),
            target,
            finding.check,
            finding.message,
            key=str(index),
        )

    def _fill_findings(self) -> None:
        """The table anew: every finding it shows, in the chosen order (failures first
        with problems only)."""
        table = self.query_one("#findings", DataTable)
        table.clear()
        shown = [i for i, (_, _, f) in enumerate(self.findings) if self._shows(f, i)]
        for index in findings_view.ordered(self.findings, shown, self.sort, self.problems_only):
            self._add_row(index)

    def action_problems_only(self) -> None:
        """Only failures, warnings, waivers and skipped steps, failures first (F again: all)."""
        self.problems_only = not self.problems_only
        self._fill_findings()
        self.notify(
            "findings: problems only, failures first" if self.problems_only else "findings: all",
            timeout=3,
        )

    def action_sort_findings(self) -> None:
        """The next order: as found, failures first, by gate, by node."""
        self.sort = findings_view.next_sort(self.sort)
        self._fill_findings()
        self.notify(f"findings: {findings_view.SORT_TITLES[self.sort]}", timeout=3)

    def action_filter_findings(self) -> None:
        """Show the filter box over the findings and put the cursor there."""
        box = self.query_one("#findings-filter", Input)
        box.display = True
        box.focus()

    @on(Input.Changed, "#findings-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value.strip()
        self._fill_findings()

    @on(Input.Submitted, "#findings-filter")
    def _filter_submitted(self) -> None:
        self.query_one("#findings", DataTable).focus()  # the filter stays; Esc there clears it

    def action_clear_filter(self) -> None:
        """Esc: no filter (the box goes away); nothing happens without one."""
        box = self.query_one("#findings-filter", Input)
        box.value = ""
        box.display = False
        self.filter_text = ""
        self._fill_findings()
        self.query_one("#findings", DataTable).focus()

    def action_copy_finding(self) -> None:
        """The highlighted finding in full (check, message, fix, evidence) to the clipboard."""
        table = self.query_one("#findings", DataTable)
        if not table.row_count:
            self.notify("no finding to copy yet", timeout=3)
            return
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        if key is None:
            return
        self.app.copy_to_clipboard(findings_view.detail_text(self.findings[int(key)]))
        self.notify("finding copied to the clipboard (OSC 52)", timeout=3)

    @on(DataTable.RowHighlighted, "#findings")
    def highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None:
            self._show_detail(int(event.row_key.value))

    def _show_detail(self, index: int) -> None:
        text = findings_view.detail_text(self.findings[index])
        self.query_one("#detail", Static).update(Content(text))

    def action_show_log(self) -> None:
        """Every command and its output, full screen, with a search."""
        self.app.push_screen(LogScreen(self.transcript))

    def action_toggle_phases(self) -> None:
        """Show or hide the phases sidebar (hidden by default below 100 columns)."""
        self.toggle_class("-phases-shown" if self.has_class("-narrow") else "-phases-hidden")

    def action_focus_findings(self) -> None:
        self.query_one("#findings", DataTable).focus()

    def action_nodes(self) -> None:
        """The fleet view: every node's state per phase (the sidebar shows six)."""
        from screens.fleet import FleetScreen

        self.app.push_screen(FleetScreen(self))

    def show_cordons(self, cordons: list[Cordon]) -> None:
        """Name every node left cordoned, why, and how to uncordon it (header and panel)."""
        if cordons == self.cordons:
            return
        self.cordons = list(cordons)
        nodes = ", ".join(c.node for c in cordons)
        self.sub_title = f"site {self.site.name}" + (f" · CORDONED: {nodes}" if nodes else "")
        panel = next(self.query("#cordon-panel").results(Static), None)
        if panel is None:
            return
        panel.display = bool(cordons)
        parts: list[Content | str] = []
        for cordon in cordons:
            if parts:
                parts.append("\n")
            parts += [("CORDONED ", "bold $text-error"), Content(cordon.text()), "\n",
                      ("To uncordon: ", "bold"), Content(cordon.remedy)]  # fmt: skip
        panel.update(Content.assemble(*parts))

    def show_waiting(self, title: str | None) -> None:
        """A question set aside with Esc waits: say which, and that ``d`` answers it."""
        lines = self.query("#waiting").results(Static)
        line = next(lines, None)
        if line is None:  # the screen is being taken down (the app is quitting)
            return
        line.display = title is not None
        if title is not None:
            line.update(
                Content.assemble(("Waiting for you: ", "bold $text-warning"), title,
                                 ("  (d: answer it)", "bold"))
            )  # fmt: skip

    def show_stopped(self, reason: str) -> None:
        """The run ended early: say why, and stay here so the operator can read the findings."""
        self.query_one("#step-title", Label).update(
            Content.assemble(("Stopped: ", "bold $text-error"), reason, "  (r: report, q: quit)")
        )

    def worst_severity(self) -> Severity:
        return worst([f for _, _, f in self.findings])


def elapsed(seconds: float) -> str:
    """``4.2s``, ``3:07``, ``1:02:03``: short enough for a title line."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _short(name: str) -> str:
    """A node's column label: the last part of its name (``gpu-b300-01`` -> ``01``)."""
    return name.rsplit("-", 1)[-1][:4]


def phase_glyph(states: list[StepState | None]) -> str:
    known = [s for s in states if s is not None]
    if not known:
        return GLYPHS[StepState.PENDING]
    for state in (StepState.FAILED, StepState.BLOCKED, StepState.RUNNING, StepState.WAITING):
        if state in known:
            return GLYPHS[state]
    if len(known) < len(states):
        return GLYPHS[StepState.RUNNING]
    if StepState.SKIPPED in known:
        # A phase with a skipped step is not done: its change (or its proof) is missing.
        return GLYPHS[StepState.SKIPPED]
    return GLYPHS[StepState.DONE]
