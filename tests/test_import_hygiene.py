"""Packages by role: the core (wizard, steps), the application (frontend) and the simulator.

The static form of these rules is the import-linter contracts in pyproject.toml (lint-imports);
these tests check what actually loads at run time, where a lazy import inside a function (which
lint-imports also sees) or a plugin lookup would show.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib

from tests.conftest import REPO


def _loaded_after(imports: str, prefixes: tuple[str, ...], extra: str = "") -> list[str]:
    code = (
        f"import sys, {imports}\n{extra}"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {prefixes!r})\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    return [m for m in result.stdout.strip().split(",") if m]


def test_the_core_and_the_command_line_load_neither_textual_nor_the_simulator():
    loaded = _loaded_after(
        "frontend.cli, frontend.headless, wizard.engine, wizard.export, wizard.facts, steps",
        ("textual", "simulator"),
        extra="steps.build_plan()\n",
    )
    assert loaded == []


def test_the_tui_application_does_not_load_the_simulator():
    """The issue's audit found importing the TUI loaded 28 simulator modules: a site run in
    the TUI carries the lab's code for nothing. Only the demo's session loads it."""
    assert _loaded_after("frontend.tui.app", ("simulator",)) == []
    assert "simulator.lab" in _loaded_after("frontend.lab_session", ("simulator",))


def test_every_top_level_package_has_a_role_in_the_import_contracts():
    """A new top-level package lands in lint-imports' root packages, or nothing checks it."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    packages = {
        p.name
        for p in REPO.iterdir()
        if (p / "__init__.py").exists() and p.name not in {"tests", "benchmarks", "templates"}
    }
    assert packages == set(config["root_packages"])
    contracts = {c["id"]: c for c in config["contracts"]}
    assert set(contracts["core-no-simulator-no-frontend"]["source_modules"]) == {"wizard", "steps"}


def _imported_modules(path) -> set[str]:
    """Every module a file imports, at the top, inside a function or under TYPE_CHECKING."""
    import ast

    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_plan_and_the_steps_never_import_the_engine():
    """The issue's audit found an import circle of eight files through wizard/plan.py, whose
    StepContext reached into the engine. A step sees the StepContext protocol; the engine's
    StepRuntime implements it; nothing on the plan's side names the engine, not even for
    type checking (lint-imports' contract "plan-no-engine" says the same, indirectly too)."""
    files = [REPO / "wizard" / "plan.py", *sorted((REPO / "steps").rglob("*.py"))]
    offenders = {
        str(path.relative_to(REPO)): sorted(
            m for m in _imported_modules(path) if m.startswith("wizard.engine")
        )
        for path in files
    }
    assert {path: found for path, found in offenders.items() if found} == {}
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    contract = {c["id"]: c for c in config["contracts"]}["plan-no-engine"]
    assert set(contract["source_modules"]) == {"wizard.plan", "steps"}
    assert contract["forbidden_modules"] == ["wizard.engine"]


def test_the_engine_runtime_implements_what_a_step_sees():
    """Every member of the StepContext protocol is the runtime's (a step reaching for one the
    engine does not implement fails here, not in a run)."""
    from wizard.engine.runtime import StepRuntime
    from wizard.plan import StepContext

    members = {name for name in vars(StepContext) if not name.startswith("_")}
    members |= set(StepContext.__annotations__)
    dataclass_fields = set(StepRuntime.__dataclass_fields__)
    missing = sorted(
        m for m in members if not hasattr(StepRuntime, m) and m not in dataclass_fields
    )
    assert missing == []
