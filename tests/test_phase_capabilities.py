"""What is special about a phase is an attribute of it (``Phase.read_only``,
``joins_cluster``, ``measures``), not its id compared in the engine, the runners or the
report; gate ids are ``Gate`` values (issue #23, typed contracts)."""

from __future__ import annotations

import re

import pytest

from steps import build_plan
from tests.conftest import REPO
from wizard.model import Gate, StepKind, gate_id
from wizard.probe import Report


def test_check_runs_the_checks_of_the_read_only_phases():
    plan = build_plan()
    read_only = [p for p in plan.phases if p.read_only]
    assert [p.id for p in read_only] == ["preflight", "e810", "bond", "irdma"]
    steps = plan.read_only_steps()
    assert steps and all(plan.step(s).kind is StepKind.CHECK for s in steps)
    assert {plan.phase_of(s).id for s in steps} == {p.id for p in read_only}
    assert "packages.install" not in steps and "preflight.containerd" in steps


def test_the_join_phase_and_what_comes_after_it():
    plan = build_plan()
    join = plan.join_phase()
    assert join is not None and join.id == "join"
    assert [p.id for p in plan.phases if p.joins_cluster] == ["join"]
    assert not plan.after_join(plan.phase("irdma"))
    assert plan.after_join(join) and plan.after_join(plan.phase("gpu-operator"))


def test_measuring_phases_are_known_by_their_steps():
    plan = build_plan()
    assert plan.phase("nccl").measures and not plan.phase("preflight").measures


def test_no_phase_id_is_compared_outside_the_plan():
    """The engine and the runners ask the phase (its capabilities), never its id."""
    pattern = re.compile(r"""\.id\s*(==|in)\s*\(?["'](preflight|e810|bond|irdma|join)["']""")
    files = [*(REPO / "wizard" / "engine").glob("*.py"), REPO / "frontend" / "runner.py"]
    offenders = [
        f"{path.relative_to(REPO)}:{n}"
        for path in files
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line) or "READ_ONLY_PHASES" in line
    ]
    assert offenders == []


def test_every_step_names_real_gates():
    for step in build_plan().steps():
        for gate in step.gates:
            assert Gate(gate).value == gate, (step.id, gate)


def test_a_misspelt_gate_is_refused_not_a_gate_of_its_own():
    with pytest.raises(ValueError, match="'T18' is no gate"):
        Report("T18")
    report = Report("T08")
    with pytest.raises(ValueError, match="'t08' is no gate"):
        report.ok("x", "fine", gate="t08")
    assert gate_id(Gate.T08) == "T08" and type(gate_id(Gate.T08)) is str


def test_every_fault_the_simulator_compares_is_a_known_fault():
    """A fault name compared in the lab's models (``"x" in host.faults``) is a ``Fault``:
    a misspelt one would never fire and the failure path it models would go untested."""
    from simulator.faults import FAULTS, Fault

    assert set(Fault) == set(FAULTS)
    compared = re.compile(r"""["']([a-z0-9.-]+)["']\s+(?:not\s+)?in\s+[\w.]*faults\b""")
    names = {
        (name, str(path.relative_to(REPO)))
        for path in (REPO / "simulator").rglob("*.py")
        for name in compared.findall(path.read_text())
    }
    assert len(names) > 30
    assert [pair for pair in sorted(names) if pair[0] not in set(Fault)] == []
