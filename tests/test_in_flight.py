"""A maintenance change in flight (issue #27, points 2 and 3): begun, its capture persisted,
then the wizard died. Whatever runs next finishes it or rolls it back before anything else
(a check that fails on the half-changed node must not gate the repair); read-only commands
say it is in flight and which command finishes it; a site edit never drops its capture,
and removing its node or renaming the site is refused until it is finished."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, node_entry, with_nodes
from tests.engine_world import ScriptedFrontEnd, World, WorldCheck, WorldMaintenance
from wizard.checkpoint import Checkpoint
from wizard.engine import Engine
from wizard.errors import WizardError
from wizard.model import Severity, StepState
from wizard.plan import Phase, Plan
from wizard.site import load_site

HALF = "half\n"


class Killed(BaseException):
    """Stands for a kill -9 inside the change: nothing after it runs, nothing is recorded."""


class HalfwayMaintenance(WorldMaintenance):
    """Leaves the node half changed first (a port out of the bond), then, while the world
    says ``die``, the wizard dies right there."""

    async def apply(self, ctx, changes):
        data = self.world.load()
        if data["live"].get(f"{self.id}@{ctx.target}") == self.desired(ctx):
            return
        data["live"][f"{self.id}@{ctx.target}"] = HALF
        self.world.save(data)
        if data.get("die"):
            raise Killed
        await super().apply(ctx, changes)


class BondCheck(WorldCheck):
    """Fails on a half-changed node, as bond.lacp does with a port out of bond1."""

    async def verify(self, ctx):
        findings = await super().verify(ctx)
        if self.world.load()["live"].get(f"three.qos@{ctx.target}") == HALF:
            return [f.__class__(f.check, f.gate, Severity.FAIL, "a port is out of the bond")
                    for f in findings]  # fmt: skip
        return findings


def plan(world: World) -> Plan:
    return Plan(
        (
            Phase("one", 1, "Bond", "checks", (BondCheck("one.bond", world, reads=("qos",)),)),
            Phase(
                "three",
                3,
                "QoS",
                "maintenance",
                (HalfwayMaintenance("three.qos", world, reads=("qos",)),),
            ),
            Phase("four", 4, "Verify", "checks", (WorldCheck("four.check", world),)),
        )
    )


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path / "world.json")


@pytest.fixture
def site_path(tmp_path: Path) -> Path:
    path = tmp_path / "site.yaml"
    path.write_text(with_nodes(2))
    return path


def _run(site_path: Path, state_dir: Path, world: World, **kwargs):
    site = load_site(site_path)
    frontend = ScriptedFrontEnd()
    with Checkpoint.open(state_dir, site) as checkpoint:
        engine = Engine(site, plan(world), checkpoint, frontend)
        summary = asyncio.run(engine.run(**kwargs))
    return summary, frontend


def _killed_inside_the_change(site_path: Path, state_dir: Path, world: World) -> None:
    world.update(die=True)
    with pytest.raises(Killed):
        _run(site_path, state_dir, world)
    world.update(die=False)
    assert world.load()["live"]["three.qos@gpu-1"] == HALF


def _check(site_path: Path, state_dir: Path, world: World):
    return _run(site_path, state_dir, world, only=["one.bond", "four.check"], ignore_requires=True)


@pytest.mark.parametrize(
    "entry", [{}, {"phase": "one"}, {"phase": "four"}, {"step": "four.check"}],
    ids=["run", "--phase one", "--phase four", "--step four.check"],
)  # fmt: skip
def test_a_check_after_a_kill_inside_the_change_does_not_strand_the_node(
    site_path, state_dir, world, entry
):
    _killed_inside_the_change(site_path, state_dir, world)
    # The read-only check sees the half-changed node fail, and says what is in flight.
    checked, _ = _check(site_path, state_dir, world)
    assert checked.results[("one.bond", "gpu-1")] is StepState.FAILED
    assert checked.in_flight and "three.qos is in flight on gpu-1" in checked.in_flight[0]
    assert f"gpu-node-wizard run {site_path}" in checked.in_flight[0]
    assert world.load()["live"]["three.qos@gpu-1"] == HALF, "a check changed nothing"

    # Any entry point finishes the change first, before phase 1's failed check can gate it.
    summary, _ = _run(site_path, state_dir, world, **entry)
    assert world.load()["live"]["three.qos@gpu-1"] == "three.qos for gpu-1\n"
    assert summary.results[("three.qos", "gpu-1")] is StepState.DONE
    if not entry:
        assert summary.ok, (summary.stopped, summary.failed)
    assert not _check(site_path, state_dir, world)[0].in_flight


def test_status_and_check_name_the_change_in_flight_and_the_command(site_path, state_dir, world):
    _killed_inside_the_change(site_path, state_dir, world)
    done = subprocess.run(
        [sys.executable, "-m", "frontend.cli", "status", str(site_path), "--state-dir",
         str(state_dir), "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (line,) = json.loads(done.stdout)["in_flight"]
    assert line.startswith("three.qos on gpu-1 (maintenance stage applying")
    assert f"gpu-node-wizard run {site_path} --state-dir {state_dir}" in line
    text = subprocess.run(
        [sys.executable, "-m", "frontend.cli", "status", str(site_path), "--state-dir",
         str(state_dir)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    assert "IN FLIGHT: three.qos on gpu-1" in text


def test_a_site_edit_never_drops_the_capture_of_a_change_in_flight(site_path, state_dir, world):
    _killed_inside_the_change(site_path, state_dir, world)
    site = load_site(site_path)
    with Checkpoint.open(state_dir, site) as checkpoint:
        before = checkpoint.record("three.qos", "gpu-1").maintenance.capture
    assert before == {"live": None}
    # The qos section changes between the kill and the resume (three.qos reads it).
    site_path.write_text(
        site_path.read_text()
        + "qos:\n  dscp: 26\n  priority: 3\n  traffic_class: 3\n  pfc_priorities: [3]\n  ecn: false\n"
    )
    summary, frontend = _run(site_path, state_dir, world)
    notes = [getattr(e, "message", "") for e in frontend.events]
    assert any("site file changed (qos)" in n for n in notes), notes
    assert not any("three.qos on gpu-1" in n for n in notes if "reset:" in n), notes
    # Resumed from the first capture (the resume notice), not a second one of the half state.
    assert any("three.qos was interrupted on gpu-1" in n for n in notes), notes
    assert summary.results[("three.qos", "gpu-1")] is StepState.DONE


def test_removing_a_node_with_a_change_in_flight_is_refused(site_path, state_dir, world):
    _killed_inside_the_change(site_path, state_dir, world)
    without_gpu_1 = with_nodes(2).replace(node_entry("gpu-1", 1), "")
    assert "gpu-1" not in without_gpu_1
    site_path.write_text(without_gpu_1)
    with pytest.raises(WizardError, match=r"gpu-1 has a change in flight \(three\.qos") as caught:
        _run(site_path, state_dir, world)
    assert "put it back" in str(caught.value) and "gpu-node-wizard run" in str(caught.value)


def test_renaming_the_site_with_a_change_in_flight_is_refused(site_path, state_dir, world):
    _killed_inside_the_change(site_path, state_dir, world)
    renamed = site_path.read_text().replace("name: lab", "name: lab-renamed", 1)
    assert renamed != site_path.read_text()
    site_path.write_text(renamed)
    with pytest.raises(WizardError, match=r"site 'lab'.*three\.qos on gpu-1.*in flight"):
        _run(site_path, state_dir, world)


def test_start_over_is_refused_while_a_change_is_in_flight(site_path, state_dir, world):
    """--start-over (and the TUI's Start over, reset_all) would throw the capture of the
    half-done change away: refused, naming the command that finishes it; nothing lost."""
    from wizard.errors import CheckpointError

    _killed_inside_the_change(site_path, state_dir, world)
    site = load_site(site_path)
    with (
        pytest.raises(CheckpointError, match=r"three\.qos on gpu-1") as refused,
        Checkpoint.open(state_dir, site, start_over=True),
    ):
        pass
    assert f"gpu-node-wizard run {site_path}" in str(refused.value)
    with Checkpoint.open(state_dir, site) as checkpoint:
        with pytest.raises(CheckpointError, match="in flight"):
            checkpoint.reset_all()
        assert checkpoint.record("three.qos", "gpu-1").maintenance
    done = subprocess.run(
        [sys.executable, "-m", "frontend.cli", "run", str(site_path), "--headless",
         "--start-over", "--state-dir", str(state_dir)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert "in flight" in done.stderr + done.stdout, done.stderr
    with Checkpoint.open(state_dir, site) as checkpoint:
        assert checkpoint.record("three.qos", "gpu-1").maintenance


def test_a_resumed_change_left_failed_stops_the_run_before_its_window_is_asked_again(
    site_path, state_dir, world
):
    """screen-r3 B3: the resumed change was cancelled, rolled back and left failed; the run
    then went on through the later phases and asked for the same window again, as if
    nothing had happened. Left failed stops the run, as a failed step of a phase does."""
    from wizard.events import Answer, DecisionKind, Reply

    _killed_inside_the_change(site_path, state_dir, world)
    site = load_site(site_path)
    frontend = ScriptedFrontEnd({"maintenance-window": Reply(Answer.SKIP)})
    with Checkpoint.open(state_dir, site) as checkpoint:
        summary = asyncio.run(Engine(site, plan(world), checkpoint, frontend).run())
    assert summary.results[("three.qos", "gpu-1")] is StepState.FAILED
    windows = [d for d in frontend.decisions if d.kind is DecisionKind.MAINTENANCE_WINDOW]
    assert [(d.step, d.target) for d in windows] == [("three.qos", "gpu-1")]
    assert summary.stopped and "three.qos" in summary.stopped
    assert ("four.check", "gpu-1") not in summary.results
