"""Crash safety by construction (issue #17): a damaged or missing checkpoint is a clear
error, a torn journal line stays apart, intents are durable before their effects, resumed
runs keep their verdicts, a bug fails only its own targets, missing results block with a
reason, and a checkpoint is bound to the machines it describes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from frontend.runner import Outcome
from tests.conftest import REPO, with_nodes
from tests.engine_world import ScriptedFrontEnd, World, WorldApply, WorldCheck, world_plan
from wizard.checkpoint import Checkpoint, read_journal
from wizard.engine import Engine
from wizard.errors import CheckpointError, CheckpointMissingError
from wizard.events import Notice, StepFinished
from wizard.model import NO_GATE, StepState
from wizard.plan import Phase, Plan, Services
from wizard.result_keys import ResultKey
from wizard.site import load_site
from wizard.transports.base import CommandResult
from wizard.verdict import GateVerdict


@pytest.fixture
def site_path(tmp_path: Path) -> Path:
    path = tmp_path / "site.yaml"
    path.write_text(with_nodes(2))
    return path


def _run(site_path, state_dir, plan, frontend=None, services=None, **kwargs):
    site = load_site(site_path)
    frontend = frontend or ScriptedFrontEnd()
    with Checkpoint.open(state_dir, site) as checkpoint:
        engine = Engine(site, plan, checkpoint, frontend, services)
        summary = asyncio.run(engine.run(**kwargs))
    return summary, frontend


# -- a damaged checkpoint -------------------------------------------------------------------

DAMAGED = {
    "not json": b"{not json",
    "empty": b"",
    "a list": b"[]",
    "wrong format": b'{"format": 9, "steps": {}}',
    "steps a list": b'{"format": 1, "site": {}, "steps": []}',
    "targets a list": b'{"format": 1, "site": {}, "steps": {"one.check": []}}',
    "record a string": b'{"format": 1, "site": {}, "steps": {"one.check": {"gpu-1": "done"}}}',
    "unknown state": b'{"format": 1, "site": {}, "steps": {"one.check": {"gpu-1": {"state": "great"}}}}',
    "findings a dict": b'{"format": 1, "site": {}, "steps": {"one.check": {"gpu-1": {"state": "done", "findings": {}}}}}',
    "finding without gate": b'{"format": 1, "site": {}, "steps": {"one.check": {"gpu-1": {"state": "done", "findings": [{"check": "x"}]}}}}',
    "extra a list": b'{"format": 1, "site": {}, "steps": {"one.check": {"gpu-1": {"state": "done", "extra": []}}}}',
    "waivers a dict": b'{"format": 1, "site": {}, "steps": {}, "waivers": {}}',
    "waiver without reason": b'{"format": 1, "site": {}, "steps": {}, "waivers": [{"check": "x"}]}',
    "sections a list": b'{"format": 1, "site": {"sections": []}, "steps": {}}',
    "binary": bytes(range(256)),
}


@pytest.mark.parametrize("case", sorted(DAMAGED))
def test_a_damaged_checkpoint_is_a_clear_error_for_every_command(site_path, state_dir, case):
    directory = state_dir / "lab"
    directory.mkdir(parents=True)
    (directory / "state.json").write_bytes(DAMAGED[case])
    for argv in (["status", str(site_path)], ["run", str(site_path), "--headless"],
                 ["report", str(site_path), "--out", str(state_dir / "r")]):  # fmt: skip
        done = subprocess.run(
            [sys.executable, "-m", "frontend.cli", *argv, "--state-dir", str(state_dir)],
            cwd=REPO, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        assert "checkpoint" in done.stderr and str(directory) in done.stderr, done.stderr
    # The choice to start over: the damaged file is set aside, the journal kept.
    done = subprocess.run(
        [sys.executable, "-m", "frontend.cli", "run", str(site_path), "--headless", "--start-over",
         "--phase", "preflight", "--state-dir", str(state_dir)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "Traceback" not in done.stderr and "damaged" not in done.stderr, done.stderr
    assert list(directory.glob("state.json.damaged-*"))
    assert json.loads((directory / "state.json").read_text())["format"] == 1


def test_a_deleted_checkpoint_is_not_a_silent_fresh_start(site_path, state_dir):
    site = load_site(site_path)
    world = World(state_dir.parent / "world.json")
    _run(site_path, state_dir, world_plan(world))
    (state_dir / "lab" / "state.json").unlink()
    with (
        pytest.raises(CheckpointMissingError, match="--start-over"),
        Checkpoint.open(state_dir, site),
    ):
        pass
    with Checkpoint.open(state_dir, site, start_over=True) as checkpoint:
        assert checkpoint.run().steps == {}


def test_read_state_names_the_problem(state_dir, site_path):
    directory = state_dir / "lab"
    directory.mkdir(parents=True)
    (directory / "state.json").write_bytes(DAMAGED["unknown state"])
    with pytest.raises(CheckpointError, match=r"'one\.check' on 'gpu-1' has state 'great'"):
        Checkpoint.open(state_dir, load_site(site_path)).__enter__()


# -- the journal ------------------------------------------------------------------------------


def test_a_torn_last_line_is_reported_and_never_merged_with_the_next_entry(site_path, state_dir):
    site = load_site(site_path)
    with Checkpoint.open(state_dir, site) as checkpoint:
        checkpoint.journal({"command": "uname -r", "stdout": "6.12\n"})
    path = state_dir / "lab" / "journal.jsonl"
    with path.open("a") as handle:
        handle.write('{"command": "dcb app add dev ens5f1np1 dscp-pr')  # the kill came here
    frontend = ScriptedFrontEnd()
    world = World(state_dir.parent / "world.json")
    _run(site_path, state_dir, world_plan(world), frontend)
    entries, bad = read_journal(state_dir / "lab")
    assert bad == 1  # the torn line, on a line of its own
    assert any(e.get("event") == "torn-journal-line" for e in entries)
    notices = [e.message for e in frontend.events if isinstance(e, Notice)]
    assert any("cut off by a crash" in n for n in notices), notices


class RecordingHost:
    """A host whose every command first checks that the journal on disk already holds
    the command's intent (what a kill right after the effect would leave)."""

    def __init__(self, journal: Path) -> None:
        self.journal = journal
        self.seen: list[tuple[str, bool]] = []

    async def run(
        self, command, *, sudo=False, timeout=None, check=False, stdin=None, on_line=None
    ):
        text = command if isinstance(command, str) else " ".join(command)
        on_disk = [json.loads(line) for line in self.journal.read_text().splitlines()]
        self.seen.append((text, any(e.get("intent") and e.get("command") == text for e in on_disk)))
        return CommandResult("gpu-1", text, 0, "", "")

    async def run_many(self, commands, *, sudo=False, timeout=None):
        return [CommandResult("gpu-1", " ".join(c) if not isinstance(c, str) else c, 0, "", "")
                for c in commands]  # fmt: skip

    async def close(self) -> None:
        pass


class HostApply(WorldApply):
    """Applies by running a command on the host."""

    async def apply(self, ctx, changes):
        await ctx.run(["modprobe", "irdma"])
        await super().apply(ctx, changes)


def test_every_change_has_a_durable_intent_before_it_runs(site_path, state_dir):
    world = World(state_dir.parent / "world.json")
    journal = state_dir / "lab" / "journal.jsonl"
    hosts = {"gpu-1": RecordingHost(journal), "gpu-2": RecordingHost(journal)}
    plan = Plan((Phase("two", 2, "Second", "applies", (HostApply("two.apply", world),)),))
    summary, _ = _run(site_path, state_dir, plan, services=Services(hosts=hosts))
    assert summary.ok, summary
    seen = [entry for host in hosts.values() for entry in host.seen if entry[0] == "modprobe irdma"]
    assert seen == [("modprobe irdma", True)] * 2
    outcomes = [e for e in read_journal(state_dir / "lab")[0] if "outcome" in e]
    assert len(outcomes) == 2 and all(e["exit"] == 0 for e in outcomes)


# -- verdicts after a resume ------------------------------------------------------------------


def test_steps_settled_earlier_still_report_their_verdicts(site_path, state_dir):
    world = World(state_dir.parent / "world.json")
    _run(site_path, state_dir, world_plan(world))
    summary, frontend = _run(site_path, state_dir, world_plan(world))
    settled = [
        e for e in frontend.events if isinstance(e, StepFinished) and "checkpoint" in e.message
    ]
    assert settled and all(e.findings for e in settled if e.step != "two.cluster" or e.findings)
    outcome = Outcome(load_site(site_path), summary)
    assert outcome.gate_verdicts()["T00"] is not None and outcome.gate_verdicts()["T08"] is not None


# -- a bug in a step ----------------------------------------------------------------------------


class Buggy(WorldCheck):
    async def verify(self, ctx):
        raise RuntimeError(f"bug on {ctx.target}")


def test_a_bug_fails_each_of_its_targets_and_names_the_journal(site_path, state_dir):
    world = World(state_dir.parent / "world.json")
    plan = Plan((Phase("one", 1, "First", "checks", (Buggy("one.check", world),)),))
    summary, _ = _run(site_path, state_dir, plan)
    assert summary.results == {("one.check", "gpu-1"): StepState.FAILED,
                               ("one.check", "gpu-2"): StepState.FAILED}  # fmt: skip
    for target in ("gpu-1", "gpu-2"):
        [finding] = summary.findings[("one.check", target)]
        assert finding.check == "T00.internal-error"
        assert f"RuntimeError: bug on {target}" in finding.message
        assert str(state_dir / "lab" / "journal.jsonl") in finding.remediation
    assert Outcome(load_site(site_path), summary).exit_code == 70
    tracebacks = [e for e in read_journal(state_dir / "lab")[0] if "traceback" in e]
    assert len(tracebacks) == 2


class GatelessBuggy(Buggy):
    gates = ()  # proves no gate (a helper step of the procedure)


def test_a_bug_in_a_step_that_proves_no_gate_is_charged_to_no_gate(site_path, state_dir):
    """The engine used to invent gate T00 for a step that declares none: its bug read as a
    failed T00 (OS / Kubernetes / containerd), which it had nothing to do with. The finding
    names the step instead, belongs to no gate, and the run is still an internal error."""
    world = World(state_dir.parent / "world.json")
    plan = Plan((Phase("one", 1, "First", "checks", (GatelessBuggy("one.helper", world),)),))
    summary, _ = _run(site_path, state_dir, plan)
    [finding] = summary.findings[("one.helper", "gpu-1")]
    assert (finding.check, finding.gate) == ("one.helper.internal-error", NO_GATE)
    outcome = Outcome(load_site(site_path), summary)
    assert outcome.exit_code == 70
    assert outcome.gate_verdicts()["T00"] is not GateVerdict.FAIL
    # the engine's other findings (unreachable host, held lease) name it the same way
    assert GatelessBuggy("x", world).engine_check("lease") == ("x.lease", NO_GATE)
    assert Buggy("x", world).engine_check("reachable") == ("T00.reachable", "T00")


# -- declared needs -----------------------------------------------------------------------------


DEVICE = ResultKey("one.check", "rdma_device", str)


class NeedsDevice(WorldCheck):
    needs = (DEVICE,)

    async def verify(self, ctx):
        ctx.need(DEVICE)
        return await super().verify(ctx)


def test_a_missing_result_blocks_with_the_reason_not_a_default(site_path, state_dir):
    world = World(state_dir.parent / "world.json")
    plan = Plan(
        (
            Phase("one", 1, "First", "checks", (WorldCheck("one.check", world),)),
            Phase("two", 2, "Second", "uses", (NeedsDevice("two.check", world),)),
        )
    )
    summary, frontend = _run(site_path, state_dir, plan)
    assert summary.results[("two.check", "gpu-1")] is StepState.BLOCKED
    blocked = [e for e in frontend.events if isinstance(e, StepFinished) and e.step == "two.check"]
    assert "needs rdma_device from one.check" in blocked[0].message


def test_every_declared_need_is_provided_by_an_earlier_step():
    from steps import build_plan

    plan = build_plan()
    order = [s.id for s in plan.steps()]
    for step in plan.steps():
        for key in (*step.needs, *step.uses):
            assert key in plan.step(key.provider).provides, (step.id, str(key))
            assert order.index(key.provider) < order.index(step.id), (step.id, str(key))
        for key in step.provides:
            assert key.provider == step.id, (step.id, str(key))


# -- a checkpoint knows its machines ----------------------------------------------------------


async def _lab_run(lab, state, frontend, phases=("preflight", "packages")):
    from frontend.runner import run_engine
    from steps import build_plan

    plan = build_plan()
    only = [s.id for p in plan.phases if p.id in phases for s in p.steps]
    return await run_engine(load_site(lab.site_path), plan, state, frontend, only=only)


async def test_a_rebuilt_machine_under_the_same_name_does_not_inherit_its_results(tmp_path):
    import io

    from frontend.headless import HeadlessFrontEnd
    from simulator.lab import Lab

    state = tmp_path / "state"
    async with Lab(tmp_path / "lab") as lab:
        first = await _lab_run(lab, state, HeadlessFrontEnd(yes=True, out=io.StringIO()))
        assert first.exit_code == 0
        host = lab.hosts["gpu-b300-01"]
        # Reinstalled: a new machine-id, and the packages the wizard installed are gone.
        host.state.machine_id = "0" * 32
        host.state.packages.clear()
        out = io.StringIO()
        second = await _lab_run(lab, state, HeadlessFrontEnd(yes=True, out=out))
    text = out.getvalue()
    assert "gpu-b300-01 is not the machine its results were recorded on (machine_id" in text
    assert "already done" not in text
    assert second.summary.results[("packages.install", "gpu-b300-01")] is StepState.DONE
    assert host.state.packages, "the packages were installed again on the new machine"


async def test_a_reboot_re_verifies_settled_results_before_trusting_them(tmp_path):
    import io

    from frontend.headless import HeadlessFrontEnd
    from simulator.lab import Lab

    state = tmp_path / "state"
    async with Lab(tmp_path / "lab") as lab:
        await _lab_run(lab, state, HeadlessFrontEnd(yes=True, out=io.StringIO()))
        lab.hosts["gpu-b300-01"].state.boot_id = "rebooted-boot-id"
        lab.hosts["gpu-b300-01"].state.packages.discard("perftest")  # lost (e.g. a bad image)
        out = io.StringIO()
        await _lab_run(lab, state, HeadlessFrontEnd(yes=True, out=out))
    text = out.getvalue()
    assert "rebooted since its results were recorded" in text
    assert "packages.install no longer holds after a reboot: running it again" in text
    assert "perftest" in lab.hosts["gpu-b300-01"].state.packages


async def test_a_read_only_run_between_does_not_use_up_a_reboot(tmp_path):
    """A reboot is noticed per settled result (its verified boot), not once per run."""
    import io

    from frontend.headless import HeadlessFrontEnd
    from simulator.lab import Lab

    state = tmp_path / "state"
    async with Lab(tmp_path / "lab") as lab:
        await _lab_run(lab, state, HeadlessFrontEnd(yes=True, out=io.StringIO()))
        host = lab.hosts["gpu-b300-01"]
        host.state.boot_id = "rebooted-boot-id"
        host.state.packages.discard("perftest")
        # A run of another phase first: it reads the new boot id, and must not settle it.
        await _lab_run(lab, state, HeadlessFrontEnd(yes=True, out=io.StringIO()), phases=("e810",))
        out = io.StringIO()
        await _lab_run(lab, state, HeadlessFrontEnd(yes=True, out=out))
    assert "packages.install no longer holds after a reboot: running it again" in out.getvalue()
    assert "perftest" in host.state.packages


class _Kube:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    async def node(self, name):
        return {"metadata": {"name": name}, "spec": {}}  # schedulable: no cordon before

    async def pods(self, namespace=None, *, field_selector=""):
        return []  # no pod without a controller to put to the operator

    async def cordon(self, name, unschedulable=True):
        self.calls.append(("cordon", name, unschedulable))

    async def drain(self, name, timeout=600.0, progress=None, delete_bare=()):
        from wizard.transports.kube import KubeError

        raise KubeError(f"drain of {name} timed out after 600s; still running: default/db-0")


def test_a_failed_drain_changes_nothing_and_offers_no_rollback(site_path, state_dir):
    from tests.engine_world import WorldMaintenance

    world = World(state_dir.parent / "world.json")
    step = WorldMaintenance("three.qos", world)
    step.drains = True
    kube = _Kube()
    plan = Plan((Phase("three", 3, "Third", "maintenance", (step,)),))
    summary, frontend = _run(site_path, state_dir, plan, services=Services(kube=kube))
    assert summary.results[("three.qos", "gpu-1")] is StepState.FAILED
    assert summary.results[("three.qos", "gpu-2")] is StepState.BLOCKED  # the rollout stopped
    assert world.load()["applies"] == {}  # apply never ran
    assert not [d for d in frontend.decisions if d.kind.value == "rollback"]
    assert ("cordon", "gpu-1", False) in kube.calls  # made schedulable again
    [finding] = summary.findings[("three.qos", "gpu-1")]
    assert "drain" in finding.message


def test_the_same_cluster_behind_another_api_address_is_the_same_cluster():
    from wizard import identity

    before = {"server": "https://10.0.0.1:6443", "kube_system_uid": "u-1"}
    moved = {"server": "https://lb.example:6443", "kube_system_uid": "u-1"}
    rebuilt = {"server": "https://10.0.0.1:6443", "kube_system_uid": "u-2"}
    assert identity.compare(before, moved, identity.CLUSTER_FIELDS) is None
    assert identity.compare(before, rebuilt, identity.CLUSTER_FIELDS).field == "kube_system_uid"
