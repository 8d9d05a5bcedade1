"""Child processes that change things die with the wizard, or the resume waits for them
(issue #27, point 1): before, a killed wizard's ansible-playbook ran on (parent 1) and the
resume started a second scale.yml beside it.

The "join" here is a real child process started the way ansible-playbook and helm are
(wizard/transports/children.py); the wizard is a real process killed by a real signal.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, with_nodes
from tests.engine_world import ScriptedFrontEnd, World, WorldApply
from wizard import journal
from wizard.checkpoint import Checkpoint, read_journal
from wizard.engine import Engine
from wizard.engine import core as engine_core
from wizard.engine.results import ChildStillRunningError
from wizard.model import StepState
from wizard.plan import Phase, Plan, Scope
from wizard.site import load_site
from wizard.transports import children

# The join: says it started, takes its time, says it ended. STUBBORN ignores SIGTERM (a
# process that outlives the wizard whatever it is told: the resume must wait for it).
JOIN = """
import signal, sys, time
if sys.argv[2] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(sys.argv[1], "a") as f:
    f.write("start\\n")
time.sleep(float(sys.argv[3]))
with open(sys.argv[1], "a") as f:
    f.write("end\\n")
"""


class Join(WorldApply):
    scope = Scope.CLUSTER

    async def apply(self, ctx, changes):
        marker = self.world.path.parent / "joins.log"
        mode, seconds = self.world.load().get("join", ["obedient", "30"])
        argv = [sys.executable, "-c", JOIN, str(marker), mode, seconds]
        intent = journal.begin({"target": "jump host", "command": "scale.yml"})
        process = await children.spawn(argv, intent)
        status = await process.wait()
        journal.end(intent, {"exit": status})
        await super().apply(ctx, changes)


def plan(world: World) -> Plan:
    return Plan((Phase("join", 1, "Join", "the join", (Join("join.scale", world),)),))


def main(site_path: str, state_dir: str, world_path: str) -> None:
    """The wizard, in its own process (killed by the tests)."""
    site = load_site(site_path)
    world = World(Path(world_path))
    with Checkpoint.open(Path(state_dir), site) as checkpoint:
        asyncio.run(Engine(site, plan(world), checkpoint, ScriptedFrontEnd()).run())


def _starts(tmp_path: Path) -> list[str]:
    marker = tmp_path / "joins.log"
    return marker.read_text().split() if marker.exists() else []


def _wizard_killed_in_the_join(tmp_path: Path, sig: int, mode: str) -> int:
    site = tmp_path / "site.yaml"
    site.write_text(with_nodes(1))
    world = World(tmp_path / "world.json")
    world.update(join=[mode, "30"])
    code = f"from tests.test_children import main; main({str(site)!r}, {str(tmp_path / 'state')!r}, {str(world.path)!r})"
    wizard = subprocess.Popen([sys.executable, "-c", code], cwd=REPO)
    deadline = time.monotonic() + 60
    while "start" not in _starts(tmp_path):
        assert time.monotonic() < deadline and wizard.poll() is None, "the join never started"
        time.sleep(0.05)
    os.kill(wizard.pid, sig)
    wizard.wait(timeout=30)
    (child,) = [
        e for e in read_journal(tmp_path / "state" / "lab")[0] if isinstance(e.get("child"), str)
    ]
    assert child["pid"] > 0 and child["started"] > 0, child
    return child["pid"]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGHUP], ids=str)
def test_the_join_dies_with_the_wizard(tmp_path, sig):
    pid = _wizard_killed_in_the_join(tmp_path, sig, "obedient")
    deadline = time.monotonic() + 10
    while _runs(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _runs(pid), "the join outlived the wizard"
    assert _starts(tmp_path) == ["start"]


def test_the_resume_refuses_a_second_join_while_the_first_lives(tmp_path, monkeypatch):
    pid = _wizard_killed_in_the_join(tmp_path, signal.SIGKILL, "stubborn")
    monkeypatch.setattr(engine_core, "CHILD_WAIT_S", 1.0)
    site = load_site(tmp_path / "site.yaml")
    world = World(tmp_path / "world.json")
    world.update(join=["obedient", "0"])
    try:
        assert _runs(pid), "the stubborn join runs on"
        with (
            Checkpoint.open(tmp_path / "state", site) as checkpoint,
            pytest.raises(ChildStillRunningError, match=rf"pid {pid} \(`scale.yml`\).*still runs"),
        ):
            asyncio.run(Engine(site, plan(world), checkpoint, ScriptedFrontEnd()).run())
        assert _starts(tmp_path) == ["start"], "a second join started beside the first"
    finally:
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _runs(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    # Once it is gone, the resume goes on (and the join runs again, alone).
    with Checkpoint.open(tmp_path / "state", site) as checkpoint:
        summary = asyncio.run(Engine(site, plan(world), checkpoint, ScriptedFrontEnd()).run())
    assert summary.results[("join.scale", "cluster")] is StepState.DONE
    assert _starts(tmp_path) == ["start", "start", "end"]


def test_a_reused_pid_is_not_the_journaled_process():
    assert children.alive(os.getpid(), children.start_time(os.getpid()))
    assert not children.alive(os.getpid(), (children.start_time(os.getpid()) or 0) + 1)
    assert not children.alive(0, None) and not children.alive(2**22 + 1, None)


def test_a_journaled_child_without_start_time_or_of_another_boot_is_not_alive():
    """A pid alone proves nothing (any process may have it now), nor a start time of
    another boot (the ticks restart at each boot)."""
    import os as _os

    from wizard.transports import children as _children

    me = _os.getpid()
    started = _children.start_time(me)
    assert _children.alive(me, started, _children.boot_id())
    assert not _children.alive(me, None)
    assert not _children.alive(me, started, "another-boot-id")


def _runs(pid: int) -> bool:
    """A (non-zombie) process with this pid runs, whichever it is."""
    return children.alive(pid, children.start_time(pid))
