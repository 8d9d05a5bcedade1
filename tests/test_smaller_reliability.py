"""Issue #27, point 12's smaller items: a relative --state-dir (the demo looked for helm
at a doubled path and failed T00), and `run --step X` exiting 0 when X is blocked."""

from __future__ import annotations

import asyncio
import json
import os

from frontend.runner import Outcome
from simulator.lab import Lab
from tests.conftest import with_nodes
from tests.engine_world import ScriptedFrontEnd, World, WorldApply, WorldCheck
from wizard.checkpoint import Checkpoint
from wizard.engine import Engine
from wizard.errors import EXIT_CHECK_FAILED
from wizard.model import StepState
from wizard.plan import Phase, Plan
from wizard.site import load_site


async def test_a_lab_in_a_relative_folder_writes_paths_its_site_file_can_use(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    async with Lab(tmp_path.relative_to(tmp_path) / "state" / "lab") as lab:
        site = load_site(lab.site_path)
        helm = site.resolve_path(site.cluster.helm)
        assert helm.is_file() and os.access(helm, os.X_OK), helm
        assert site.resolve_path(site.cluster.kubeconfig).is_file()


def test_run_step_exits_non_zero_when_the_step_is_blocked(tmp_path):
    site_path = tmp_path / "site.yaml"
    site_path.write_text(with_nodes(1))
    world = World(tmp_path / "world.json")
    plan = Plan(
        (
            Phase("one", 1, "First", "checks", (WorldCheck("one.check", world),)),
            Phase("two", 2, "Second", "applies",
                  (WorldApply("two.apply", world, requires=("one.check",)),)),
        )
    )  # fmt: skip
    site = load_site(site_path)
    with Checkpoint.open(tmp_path / "state", site) as checkpoint:
        summary = asyncio.run(
            Engine(site, plan, checkpoint, ScriptedFrontEnd()).run(step="two.apply")
        )
    assert summary.results[("two.apply", "gpu-1")] is StepState.BLOCKED
    assert Outcome(site, summary).exit_code == EXIT_CHECK_FAILED


def test_a_killed_labs_temporary_folders_and_socket_are_swept_by_the_next(tmp_path):
    import signal
    import subprocess
    import sys

    from simulator.scratch import OWNER, sweep
    from tests.conftest import REPO
    from wizard.transports.children import start_time

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    lab = subprocess.Popen(
        [sys.executable, "-m", "frontend.cli", "lab", "--write-site", str(tmp_path / "l" / "site.yaml")],
        cwd=REPO, env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    for line in lab.stdout:
        if line.startswith("try:"):
            break
    left = sorted(tmp_path.glob("gnw-sh-*"))
    assert left and (left[0] / "host.sock").exists()
    os.kill(lab.pid, signal.SIGKILL)
    lab.wait()
    assert left[0].exists(), "a kill runs no cleanup"
    foreign = tmp_path / "gnw-sh-not-ours"
    foreign.mkdir()  # no owner marker: never touched
    live = tmp_path / "gnw-sh-live"
    live.mkdir()
    # A live owner as scratch_dir records it: pid and start time (a marker without a start
    # time cannot tell a reused pid from its owner, so it counts as gone).
    (live / OWNER).write_text(json.dumps({"pid": os.getpid(), "started": start_time(os.getpid())}))
    assert sweep("gnw-sh-", tmp_path) == left
    assert not left[0].exists() and foreign.exists() and live.exists()
