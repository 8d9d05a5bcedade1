"""The differential tier: the same wizard runs against both control planes and must come to
the same results. A divergence is fixed in the embedded server (simulator/kubeapi.py) or
written down in the README's "The real control plane" where it cannot be matched."""

from __future__ import annotations

import io
import re
import subprocess
import sys

from frontend.headless import HeadlessFrontEnd
from frontend.runner import run_checks
from simulator.lab import Lab
from steps import build_plan
from tests.conftest import REPO
from tests.real_tier import require_real
from wizard.site import load_site


async def _check(tmp_path, control_plane: str):
    folder = tmp_path / control_plane
    async with Lab(folder / "lab", control_plane=control_plane, slow_seconds=0.1) as lab:
        site = load_site(lab.site_path)
        outcome = await run_checks(
            site, build_plan(), folder / "state", HeadlessFrontEnd(out=io.StringIO())
        )
    findings = sorted((t, f.check, f.severity.value) for _, t, f in outcome.findings)
    return outcome.exit_code, findings


async def test_check_finds_the_same_on_both_control_planes(tmp_path):
    require_real()
    embedded = await _check(tmp_path, "embedded")
    real = await _check(tmp_path, "real")
    assert embedded[0] == 0
    assert real == embedded


def _gates(output: str) -> list[tuple[str, str]]:
    return re.findall(r"^(T\d\d)\s+(\w+|-)\s", output, re.M)


def test_the_headless_demo_ends_with_the_same_gates_on_both_control_planes():
    require_real()
    runs = {}
    for control_plane in ("embedded", "real"):
        result = subprocess.run(
            [sys.executable, "-m", "frontend.cli", "demo", "--headless",
             "--control-plane", control_plane],
            capture_output=True, text=True, cwd=REPO, timeout=1200,
        )  # fmt: skip
        runs[control_plane] = result
        assert result.returncode == 0, (
            f"{control_plane}:\n{result.stdout[-4000:]}\n{result.stderr[-2000:]}"
        )
    assert _gates(runs["real"].stdout) == _gates(runs["embedded"].stdout)
    assert len(_gates(runs["real"].stdout)) == 18
    assert "control plane: real" in runs["real"].stdout
