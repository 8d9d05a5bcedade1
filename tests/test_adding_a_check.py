"""Adding a preflight check with a new command touches three files (issue #23; README, "How
it is built", "Adding a check"): the step, the parser with its command and samples, the
lab's tool. tests/adding_a_check/ holds exactly those three as test-local modules; this
test registers them, runs the check through the real engine's preflight phase against the
lab (over the lab's real shell), renders the runbook, and shows that nothing else in the
project had to know about the command.
"""

from __future__ import annotations

import importlib
import io
import sys
from dataclasses import replace

import pytest

from tests.conftest import REPO
from wizard.model import Severity, StepState

MODULES = (
    "tests.adding_a_check.timesync_parser",
    "tests.adding_a_check.clock_step",
    "tests.adding_a_check.timesync_lab_tool",
)


@pytest.fixture
def check():
    """The three modules, imported for one test and forgotten after (the parser and the
    tool register themselves; other tests in this process must not see them)."""
    from simulator.host.dispatch import forget_lab_tool
    from wizard.facts import unregister

    parser, step, tool = (importlib.import_module(name) for name in MODULES)
    try:
        yield parser, step, tool
    finally:
        forget_lab_tool(parser.TIMESYNC)
        unregister(parser.KIND)
        for name in MODULES:
            sys.modules.pop(name, None)


def _plan_with(step):
    """The product's plan, with the new check in its preflight phase (where a real one is
    listed in steps/preflight.py's PHASE)."""
    from steps import build_plan
    from wizard.plan import Plan

    plan = build_plan()
    phases = tuple(
        replace(p, steps=(*p.steps, step)) if p.id == "preflight" else p for p in plan.phases
    )
    return Plan(phases, plan.extra_artifacts)


async def _run(tmp_path, plan, synced: bool):
    from frontend.headless import HeadlessFrontEnd
    from frontend.runner import run_engine
    from simulator.lab import Lab
    from wizard.site import load_site

    lab = Lab(tmp_path / "lab")
    await lab.start()
    try:
        host = lab.hosts["gpu-b300-01"]
        if synced:
            host.files["/run/systemd/timesync/synchronized"] = ""
        frontend = HeadlessFrontEnd(yes=True, out=io.StringIO())
        outcome = await run_engine(
            load_site(lab.site_path), plan, tmp_path / "state", frontend, only=["preflight.clock"]
        )
    finally:
        await lab.stop()
    return outcome, host


def test_the_parser_reads_its_samples(check):
    from wizard.facts import ParseError

    parser, _, _ = check
    for text, expected in parser.SAMPLES:
        if isinstance(expected, str):
            with pytest.raises(ParseError, match=expected):
                parser.TIMESYNC.parse(text)
        else:
            assert parser.TIMESYNC.parse(text).to_json() == expected


@pytest.mark.parametrize("synced", [True, False])
async def test_the_new_check_runs_in_preflight_against_the_lab(check, tmp_path, synced):
    parser, step, _ = check
    outcome, host = await _run(tmp_path, _plan_with(step.ClockSynced()), synced)
    key = ("preflight.clock", "gpu-b300-01")
    assert outcome.summary.results[key] is (StepState.DONE if synced else StepState.FAILED)
    [finding] = outcome.summary.findings[key]
    assert finding.check == "T00.clock"
    assert finding.severity is (Severity.PASS if synced else Severity.FAIL)
    assert finding.evidence[0].command == parser.TIMESYNC.text
    assert parser.TIMESYNC.text in host.commands[-1]  # the lab answered the Command itself


def test_the_runbook_prints_the_command(check, tmp_path):
    from tests.conftest import with_nodes
    from wizard.export import collect, runbook
    from wizard.site import load_site

    _, step, _ = check
    (tmp_path / "site.yaml").write_text(with_nodes(1))
    site = load_site(tmp_path / "site.yaml")
    plan = _plan_with(step.ClockSynced())
    _, blocks = collect(site, plan)
    assert "timedatectl show --property=NTPSynchronized" in runbook(site, plan, blocks)


def test_the_facts_contract_takes_the_new_kind_as_written(check):
    """No entry in wizard/facts/contract.py: the parser's docstring is its reason, and
    docs/FACTS.md is regenerated from the parser (``--write``), never edited."""
    from wizard.facts.contract import render, undeclared_differences

    assert undeclared_differences() == []
    text = render()
    assert "## timedatectl-ntp" in text
    assert "`timedatectl show --property=NTPSynchronized` -> `TimeSync`" in text
    assert "a kind FACTS.md does not name: Whether systemd says the clock" in text


def test_no_other_file_of_the_project_knows_the_command():
    """The three files are all it took: the command, its parser, its kind and its tool
    are named nowhere else (no registry, dispatch table or list to update)."""
    folder = REPO / "tests" / "adding_a_check"
    assert sorted(p.name for p in folder.glob("*.py")) == [
        "clock_step.py",
        "timesync_lab_tool.py",
        "timesync_parser.py",
    ]
    here = REPO / "tests" / "test_adding_a_check.py"
    hits = [
        str(path.relative_to(REPO))
        for root in ("wizard", "steps", "simulator", "frontend", "docs", "templates", "tests")
        for path in (REPO / root).rglob("*")
        if path.is_file()
        and path.suffix in (".py", ".md", ".j2", ".yaml", ".json", ".txt")
        and folder not in path.parents
        and path != here
        and ("timedatectl" in (text := path.read_text(errors="replace")) or "NTPSynch" in text)
    ]
    assert hits == []
