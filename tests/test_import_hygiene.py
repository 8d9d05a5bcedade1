"""The engine, steps and facts never import Textual (screens are the only front end that does).

The static form of these rules is the import-linter contracts in pyproject.toml (lint-imports).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib

from tests.conftest import REPO


def test_engine_steps_and_facts_do_not_import_textual():
    code = (
        "import sys, wizard.cli, wizard.engine, wizard.export, wizard.facts, wizard.headless, steps\n"
        "steps.build_plan()\n"
        "bad = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.') or m == 'screens')\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert result.stdout.strip() == ""


# The wizard modules that may reach the lab: the lab itself and its front-end wrappers.
LAB_SIDE = {"wizard.lab", "wizard.session", "wizard.demo", "wizard.cli"}


def test_every_wizard_module_is_core_or_lab_side():
    """A new wizard module lands in the core contract of pyproject.toml or, deliberately, on
    the lab side: nothing escapes `lint-imports` by being left out of its source list."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (core,) = [c for c in config["contracts"] if c["id"] == "core-no-lab-no-tui"]
    listed = set(core["source_modules"])
    modules = {
        f"wizard.{p.stem if p.suffix == '.py' else p.name}"
        for p in (REPO / "wizard").iterdir()
        if p.name != "__init__.py" and ((p.suffix == ".py") or (p / "__init__.py").exists())
    }
    assert modules - listed - LAB_SIDE == set(), "classify these in pyproject.toml"
    assert listed & LAB_SIDE == set()
    assert "steps" in listed
