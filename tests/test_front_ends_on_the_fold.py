"""Every front end shows the run as the one fold has it (issue #23, point 4).

The TUI's main screen, its nodes view, the headless lines, the run's summary and its exit
code read a ``wizard.runview.RunView``: none derives step states, findings or verdicts on
its own. Two ways to hold them to it:

1. a deliberate divergence in the fold (every record it takes in says "blocked", every
   finding is a failure whose message starts with ``DIVERGED``) shows up in each front end alike: one that
   read the engine's events, or its summary, instead would show the truth;
2. the boundary by import and syntax: a widget (``frontend/tui/widgets/``, one a file, each
   with its own CSS) imports neither the checkpoint, the engine, the events nor the verdict
   functions; no front-end module imports ``judge_run``/``judge_gates`` (the fold calls
   them) or reads a state, message or findings out of a ``StepFinished`` event.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import io
from dataclasses import replace
from pathlib import Path

import pytest
from textual.widget import Widget

from frontend.headless import HeadlessFrontEnd
from frontend.runner import Outcome
from frontend.tui.fleet import FleetScreen
from frontend.tui.widgets.findings_table import FindingsTable
from frontend.tui.widgets.fleet_table import FleetTable
from frontend.tui.widgets.phase_table import GLYPHS, PhaseTable
from tests.test_tui import wait_for
from tests.test_tui_keys import PLAN, SITE, IdleApp, show
from wizard.engine import RunSummary
from wizard.errors import EXIT_CHECK_FAILED
from wizard.events import StepCompleted, StepFinished, StepStarted
from wizard.model import Finding, Severity, StepState
from wizard.runview import RunView

ROOT = Path(__file__).resolve().parent.parent
DIVERGED = "diverged in the fold: "
STEP, NODE = "preflight.host", "gpu-1"
WARNING = Finding("T00.kernel", "T00", Severity.WARN, "kernel differs", "align the kernels")
EVENTS = [
    StepStarted(STEP, NODE, "Host preflight"),
    StepFinished(STEP, NODE, StepState.DONE, "", (WARNING,)),
]


@pytest.fixture
def diverged(monkeypatch):
    """The fold turns every record it takes in to blocked, its findings to failures."""
    real = RunView.put

    def put(self, step, target, record):
        findings = tuple(
            replace(f, severity=Severity.FAIL, message=DIVERGED + f.message)
            for f in record.findings
        )
        real(self, step, target, replace(record, state=StepState.BLOCKED, findings=findings))

    monkeypatch.setattr(RunView, "put", put)


def test_the_headless_lines_say_what_the_fold_holds(diverged):
    out = io.StringIO()
    frontend = HeadlessFrontEnd(out=out)
    for event in EVENTS:
        frontend.emit(event)
    assert f"{NODE}: {STEP}: blocked" in out.getvalue()
    assert f"[fail] T00 T00.kernel: {DIVERGED}kernel differs" in out.getvalue()
    # A fleet's one line per step, too.
    compact = io.StringIO()
    frontend = HeadlessFrontEnd(out=compact, compact=True)
    for event in [*EVENTS, StepCompleted(STEP, ((NODE, StepState.DONE),))]:
        frontend.emit(event)
    assert f"{STEP}: blocked on {NODE}" in compact.getvalue()


def test_the_run_summary_and_its_exit_code_are_the_folds(diverged):
    summary = RunSummary(results={(STEP, NODE): StepState.DONE}, findings={(STEP, NODE): [WARNING]})
    outcome = Outcome(SITE, summary, PLAN)
    assert outcome.exit_code == EXIT_CHECK_FAILED
    assert f"[FAIL] T00.kernel: {DIVERGED}kernel differs" in outcome.format()
    assert outcome.to_json()["results"][0]["state"] == "blocked"
    assert outcome.gate_verdicts()["T00"].value == "fail"


async def test_the_main_screen_and_the_nodes_view_show_what_the_fold_holds(diverged):
    app = IdleApp()
    async with app.run_test(size=(160, 48)) as pilot:
        main = await show(app, pilot, "main")
        for event in EVENTS:
            main.deliver(event)
        await wait_for(pilot, lambda: not main._inbox and not main._inbox_posted, 5)
        phase = PLAN.phase_of(STEP).id
        assert main.query_one(PhaseTable).get_cell(phase, NODE) == GLYPHS[StepState.BLOCKED]
        table = main.query_one(FindingsTable)
        assert any(DIVERGED in str(table.get_row(key)[3]) for key in table.rows)
        assert f"{NODE}: {STEP}: blocked" in main.transcript[-1]
        fleet = FleetScreen(main)
        await app.push_screen(fleet)
        await wait_for(pilot, lambda: fleet.is_mounted, 5)
        row = fleet.query_one(FleetTable).get_row(NODE)
        assert row[1 + fleet.phases.index(PLAN.phase_of(STEP))] == GLYPHS[StepState.BLOCKED]
        assert row[-1] == f"T00.kernel: {DIVERGED}kernel differs"


async def test_the_nodes_view_redraws_when_the_fold_changes():
    app = IdleApp()
    async with app.run_test(size=(160, 48)) as pilot:
        main = await show(app, pilot, "main")
        fleet = FleetScreen(main)
        await app.push_screen(fleet)
        await wait_for(pilot, lambda: fleet.is_mounted, 5)
        table = fleet.query_one(FleetTable)
        assert not table.show(main.cordons)  # nothing changed since it was drawn
        before = main.view.revision
        main.view.apply(EVENTS[1])
        assert main.view.revision > before
        assert table.show(main.cordons)
        assert table.get_row(NODE)[-1] == ""  # done with a warning: no problem
        assert not table.show(main.cordons)


# -- the boundary, by import and syntax ----------------------------------------------------

WIDGETS = ROOT / "frontend" / "tui" / "widgets"
WIDGET_MAY_NOT_IMPORT = (
    "wizard.checkpoint",
    "wizard.engine",
    "wizard.events",
    "wizard.verdict",
    "simulator",
    "frontend.session",
    "frontend.runner",
    "frontend.tui.app",
    "frontend.tui.bridge",
)
FRONT_ENDS = [
    ROOT / "frontend" / "headless.py",
    ROOT / "frontend" / "runner.py",
    *sorted((ROOT / "frontend" / "tui").rglob("*.py")),
]


def widget_files() -> list[Path]:
    return sorted(p for p in WIDGETS.glob("*.py") if p.name != "__init__.py")


def imported(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return names


def test_no_widget_reads_the_checkpoint_the_engine_or_the_verdict():
    assert len(widget_files()) >= 8
    found = {
        path.name: sorted(
            name
            for name in imported(ast.parse(path.read_text()))
            if name.startswith(WIDGET_MAY_NOT_IMPORT)
        )
        for path in widget_files()
    }
    assert {name: names for name, names in found.items() if names} == {}


def test_each_widget_file_holds_one_widget_with_its_own_css():
    problems = []
    for path in widget_files():
        module = importlib.import_module(f"frontend.tui.widgets.{path.stem}")
        widgets = [
            obj
            for obj in vars(module).values()
            if inspect.isclass(obj)
            and issubclass(obj, Widget)
            and obj.__module__ == module.__name__
        ]
        if len(widgets) != 1:
            problems.append(f"{path.name}: {len(widgets)} widgets")
        elif "DEFAULT_CSS" not in vars(widgets[0]):
            problems.append(f"{path.name}: {widgets[0].__name__} has no CSS of its own")
    assert problems == []


def derivations(source: str) -> list[str]:
    """A front end's own derivation of what the fold holds: the verdict functions imported,
    or a step's state, message or findings read out of a StepFinished event."""
    tree = ast.parse(source)
    found = [
        f"imports {name}"
        for name in imported(tree)
        if name in ("wizard.verdict.judge_run", "wizard.verdict.judge_gates")
    ]
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.MatchClass)
            and isinstance(node.cls, ast.Name)
            and node.cls.id == "StepFinished"
        ):
            read = {"state", "message", "findings"} & set(node.kwd_attrs)
            if read:
                found.append(f"line {node.lineno}: reads {sorted(read)} out of StepFinished")
    return found


def test_no_front_end_derives_the_run_on_its_own():
    problems = {
        str(path.relative_to(ROOT)): found
        for path in FRONT_ENDS
        if (found := derivations(path.read_text()))
    }
    assert problems == {}


@pytest.mark.parametrize(
    "source",
    [
        "from wizard.verdict import judge_run\n",
        "match e:\n    case StepFinished(step=s, state=state):\n        pass\n",
        "match e:\n    case StepFinished(findings=fs):\n        pass\n",
    ],
)
def test_the_scan_flags_a_derivation(source):
    assert derivations(source)
