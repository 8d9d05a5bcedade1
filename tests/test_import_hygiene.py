"""The engine, steps and facts never import Textual (screens are the only front end that does)."""

from __future__ import annotations

import subprocess
import sys

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
