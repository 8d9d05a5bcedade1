"""The real tier's shared parts: a lab served on the real control plane in its own
process, and the rule that CI runs this tier (a missing build fails there)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from wizard.lab.controlplane import build

START_S = 300


def require_real() -> None:
    reason = build.missing_reason()
    if reason is None:
        return
    if os.environ.get("CI") or os.environ.get("GNW_REQUIRE_REAL_CONTROL_PLANE"):
        pytest.fail(f"CI runs the real tier: {reason}")
    pytest.skip(reason)


class ServedLab:
    """`gpu-node-wizard lab --control-plane real --write-site SITE` in its own process."""

    def __init__(self, folder: Path, *extra: str) -> None:
        self.folder = folder
        self.site = folder / "site.yaml"
        argv = [sys.executable, "-m", "wizard.cli", "lab", "--control-plane", "real",
                "--write-site", str(self.site), *extra]  # fmt: skip
        self.process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO
        )
        self.output: list[str] = []
        deadline = time.monotonic() + START_S
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            if line.startswith("try:") or time.monotonic() > deadline:
                break
        if not any(line.startswith("try:") for line in self.output):
            self.process.kill()
            _, err = self.process.communicate(timeout=30)
            raise AssertionError(f"the real lab did not start:\n{''.join(self.output)}\n{err}")
        self.kubeconfig = folder / "kubeconfig"
        self.helm = folder / "bin" / "helm"

    def children(self) -> list[int]:
        """The control plane's processes (the lab's process group of its children)."""
        out = subprocess.run(["ps", "-o", "pid=,ppid=", "-e"], capture_output=True, text=True)
        return [int(p) for p, pp in (line.split() for line in out.stdout.splitlines())
                if int(pp) == self.process.pid]  # fmt: skip

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


@pytest.fixture(scope="module")
def real_lab(tmp_path_factory):
    """One lab on the real control plane for a test module (it takes a while to start)."""
    require_real()
    lab = ServedLab(tmp_path_factory.mktemp("real-lab"))
    yield lab
    lab.stop()
