"""The checkpoint: atomic 0600 state, an exclusive lock naming its holder, a redacted
journal, and survival of kill -9 at any instant (a real subprocess, a real SIGKILL)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, with_nodes
from tests.engine_world import ScriptedFrontEnd, World, world_plan
from wizard.checkpoint import Checkpoint, read_state
from wizard.engine import Engine
from wizard.errors import LockHeldError
from wizard.events import Notice
from wizard.model import Evidence, Finding, Severity, StepKind, StepState
from wizard.plan import Phase, Plan, Step, StepContext
from wizard.redact import REDACTED
from wizard.site import load_site


def test_state_and_journal_are_private_files(site_file, state_dir):
    site = load_site(site_file)
    with Checkpoint.open(state_dir, site) as checkpoint:
        checkpoint.set_step("preflight.host", "gpu-1", StepState.DONE, message="ok")
        checkpoint.journal({"command": "uname -r", "stdout": "6.12.0\n"})
        directory = checkpoint.directory
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for name in ("state.json", "journal.jsonl", "lock"):
        assert stat.S_IMODE((directory / name).stat().st_mode) == 0o600, name
    state = read_state(directory)
    assert state["steps"]["preflight.host"]["gpu-1"]["state"] == "done"
    assert state["site"]["fingerprint"] == site.fingerprint()
    assert not list(directory.glob(".*.tmp"))


def test_second_wizard_is_refused_with_the_holder_named(site_file, state_dir):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path\n"
            "from wizard.checkpoint import Checkpoint\nfrom wizard.site import load_site\n"
            "with Checkpoint.open(Path(sys.argv[2]), load_site(sys.argv[1])):\n"
            "    print('locked', flush=True); time.sleep(30)\n",
            str(site_file),
            str(state_dir),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(LockHeldError) as info, Checkpoint.open(state_dir, load_site(site_file)):
            pass
        assert f"pid {holder.pid}" in str(info.value)
        assert "since" in str(info.value)
    finally:
        holder.kill()
        holder.wait()
    # The kernel released the lock with the dead holder.
    with Checkpoint.open(state_dir, load_site(site_file)):
        pass


def test_journal_and_state_are_redacted(site_file, state_dir, monkeypatch):
    monkeypatch.setenv("NEXUS_PASSWORD", "s3cr3t-Nexus-pw")
    site_file.write_text(
        site_file.read_text()
        + "registry: {username_env: NEXUS_USER, password_env: NEXUS_PASSWORD}\n"
    )
    site = load_site(site_file)
    with Checkpoint.open(state_dir, site) as checkpoint:
        checkpoint.journal(
            {
                "command": "skopeo copy --dest-creds admin:s3cr3t-Nexus-pw a b",
                "stdout": "token: abc123456",
            }
        )
        checkpoint.set_step(
            "x", "gpu-1", StepState.FAILED, message="login with s3cr3t-Nexus-pw failed"
        )
        directory = checkpoint.directory
    for path in directory.iterdir():
        assert "s3cr3t-Nexus-pw" not in path.read_text(), path
    journal = (directory / "journal.jsonl").read_text()
    assert REDACTED in journal and "abc123456" not in journal


def _journal_entries(directory: Path) -> list[dict]:
    lines = (directory / "journal.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_survives_kill_minus_nine_at_any_point(site_file, state_dir, tmp_path):
    """Kill the engine with SIGKILL at random instants; every resume must see a readable
    checkpoint and must never re-apply a change that is already in place."""
    site_file.write_text(with_nodes(2))
    world = World(tmp_path / "world.json")
    rng = random.Random(20261130)
    command = [
        sys.executable,
        "-m",
        "tests.run_world_engine",
        str(site_file),
        str(state_dir),
        str(world.path),
    ]
    wanted = {
        "two.apply@gpu-1", "two.apply@gpu-2", "two.cluster@cluster", "three.qos@gpu-1", "three.qos@gpu-2",
    }  # fmt: skip

    def fresh_scenario() -> None:
        shutil.rmtree(state_dir, ignore_errors=True)
        world.save({"live": {}, "applies": {}, "redundant": 0, "fail": [], "delay": 0.4})

    fresh_scenario()
    kills = attempts = 0
    while kills < 5 and attempts < 60:
        attempts += 1
        state = read_state(state_dir / "lab")
        done_before = {
            f"{step}@{target}": world.load()["applies"].get(f"{step}@{target}")
            for step, targets in (state or {"steps": {}})["steps"].items()
            for target, record in targets.items()
            if record["state"] == "done"
        }
        process = subprocess.Popen(command, cwd=REPO)
        time.sleep(rng.uniform(0.2, 1.4))
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            kills += 1
        returncode = process.wait()
        state = read_state(state_dir / "lab")  # raises if the file were torn
        assert state is None or state["format"] == 1
        # What was done before this attempt was not applied again by it.
        for key, count in done_before.items():
            assert world.load()["applies"].get(key) == count, key
        assert world.load()["redundant"] == 0
        if returncode == 0:
            assert set(world.load()["live"]) == wanted
            fresh_scenario()
    assert kills == 5
    # Resume the last, interrupted scenario to the end in this process.
    site = load_site(site_file)
    with Checkpoint.open(state_dir, site) as checkpoint:
        summary = asyncio.run(Engine(site, world_plan(world), checkpoint, ScriptedFrontEnd()).run())
    assert summary.ok, summary
    data = world.load()
    assert data["redundant"] == 0
    assert set(data["live"]) == wanted
    # Every journal line that was fully written parses.
    for entry in _journal_entries(state_dir / "lab")[:-1]:
        assert "at" in entry


def test_check_results_are_group_committed_and_changes_are_not(site_file, state_dir):
    """A read-only result may wait in memory for the next write; a change's record may not."""
    site = load_site(site_file)
    with Checkpoint.open(state_dir, site) as checkpoint:
        checkpoint.set_step("one.check", "gpu-1", StepState.DONE, durable=False)
        assert "one.check" not in read_state(checkpoint.directory)["steps"]
        checkpoint.set_step("two.apply", "gpu-1", StepState.RUNNING)
        on_disk = read_state(checkpoint.directory)["steps"]
        assert on_disk["one.check"]["gpu-1"]["state"] == "done"  # rode along
        assert on_disk["two.apply"]["gpu-1"]["state"] == "running"
        checkpoint.set_step("four.check", "gpu-1", StepState.FAILED, durable=False)
        directory = checkpoint.directory
    assert read_state(directory)["steps"]["four.check"]["gpu-1"]["state"] == "failed"


def test_engine_writes_each_steps_check_results_when_its_fan_out_ends(
    site_file, state_dir, tmp_path
):
    site = load_site(site_file)
    world = World(tmp_path / "world.json")
    with Checkpoint.open(state_dir, site) as checkpoint:
        engine = Engine(site, world_plan(world), checkpoint, ScriptedFrontEnd())
        summary = asyncio.run(engine.run(phase="one"))
        assert summary.ok
        # Still inside the open checkpoint: the result is on disk, not only in memory.
        on_disk = read_state(checkpoint.directory)["steps"]
        assert {t: r["state"] for t, r in on_disk["one.check"].items()} == {
            n.name: "done" for n in site.nodes
        }


def test_findings_survive_the_checkpoint_unchanged(site_file, state_dir):
    site = load_site(site_file)
    finding = Finding(
        "T10.lacp-partner",
        "T10",
        Severity.WARN,
        "partner churned",
        "check the switch",
        (Evidence("cat /proc/net/bonding/bond1", "Partner Churn State: churned"),),
        waived="known flapping port, ticket 42",
    )
    with Checkpoint.open(state_dir, site) as checkpoint:
        checkpoint.set_step("bond.lacp", "gpu-1", StepState.DONE, findings=[finding])
    with Checkpoint.open(state_dir, site) as checkpoint:
        assert checkpoint.findings("bond.lacp", "gpu-1") == [finding]


def test_check_results_in_memory_are_written_when_the_run_is_interrupted(site_file, state_dir):
    site = load_site(site_file)
    with pytest.raises(KeyboardInterrupt), Checkpoint.open(state_dir, site) as checkpoint:
        checkpoint.set_step("one.check", "gpu-1", StepState.DONE, durable=False)
        directory = checkpoint.directory
        raise KeyboardInterrupt
    assert read_state(directory)["steps"]["one.check"]["gpu-1"]["state"] == "done"


# A reader that never takes the lock (like `gpu-node-wizard status` in another terminal): it
# reads state.json in a tight loop until told to stop and reports what it saw.
_READER = """
import json, os, sys
path, stop = sys.argv[1], sys.argv[2]
reads, bad, inodes = 0, [], set()
open(sys.argv[3], "w").close()  # ready
while not os.path.exists(stop):
    try:
        with open(path, "rb") as handle:
            inodes.add(os.fstat(handle.fileno()).st_ino)
            raw = handle.read()
    except FileNotFoundError:
        bad.append("missing")
        continue
    reads += 1
    try:
        json.loads(raw)
    except ValueError as exc:
        bad.append(f"{len(raw)} bytes: {exc}")
print(json.dumps({"reads": reads, "bad": bad[:5], "bad_count": len(bad), "inodes": len(inodes)}))
"""


def test_a_concurrent_reader_only_ever_sees_a_whole_state(site_file, state_dir, tmp_path):
    """Each save replaces state.json (a new inode) rather than rewriting it in place, so a
    reader in another process sees the old or the new state, never a torn or empty file."""
    site = load_site(site_file)
    finding = Finding("T02.big", "T02", Severity.WARN, "x" * 200, "y" * 200)
    with Checkpoint.open(state_dir, site) as checkpoint:
        for i in range(600):  # about 360 kB of state
            checkpoint.set_step(f"s{i}", "gpu-1", StepState.DONE, findings=[finding], durable=False)
        checkpoint.save()
        path = checkpoint.directory / "state.json"
        assert path.stat().st_size > 300_000
        stop, ready = tmp_path / "stop", tmp_path / "ready"
        reader = subprocess.Popen(
            [sys.executable, "-c", _READER, str(path), str(stop), str(ready)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 5
            while not ready.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            same_inode = 0
            for i in range(200):
                before = path.stat().st_ino
                checkpoint.set_step("s0", "gpu-1", StepState.DONE, message=str(i))
                same_inode += path.stat().st_ino == before
        finally:
            stop.touch()
            out, _ = reader.communicate(timeout=10)
    seen = json.loads(out)
    assert same_inode == 0, "a save rewrote state.json in place"
    assert seen["bad_count"] == 0, seen["bad"]
    assert seen["reads"] > 50 and seen["inodes"] > 1, seen  # the reader really overlapped


class _MixedCheck(Step):
    """One pass, one warning and one failure, each under its own check name."""

    id = "mixed.check"
    title = "mixed results"
    kind = StepKind.CHECK
    gates = ("T01",)

    async def verify(self, ctx: StepContext) -> list[Finding]:
        return [
            Finding("mixed.pass", "T01", Severity.PASS, "fine"),
            Finding("mixed.warn", "T01", Severity.WARN, "odd", "look at it"),
            Finding("mixed.fail", "T01", Severity.FAIL, "broken", "fix it"),
        ]


def test_a_waiver_marks_only_a_failure_of_that_name(site_file, state_dir):
    """The operator waives check names; the checkpoint records the reason on the failed
    finding alone. A pass or a warning under a waived name is recorded as it was: it did not
    need a waiver, and the report must not claim one was used."""
    site = load_site(site_file)
    plan = Plan((Phase("mixed", 1, "Mixed", "checks", (_MixedCheck(),)),))
    waivers = {name: f"ticket for {name}" for name in ("mixed.pass", "mixed.warn", "mixed.fail")}
    frontend = ScriptedFrontEnd()
    with Checkpoint.open(state_dir, site) as checkpoint:
        engine = Engine(site, plan, checkpoint, frontend, waivers=waivers)
        summary = asyncio.run(engine.run())
        directory = checkpoint.directory
    assert summary.ok  # the one failure is waived
    record = read_state(directory)["steps"]["mixed.check"]["gpu-1"]
    assert record["state"] == "done"
    recorded = {f["check"]: (f["severity"], f["waived"]) for f in record["findings"]}
    assert recorded == {
        "mixed.pass": ("pass", None),
        "mixed.warn": ("warn", None),
        "mixed.fail": ("fail", "ticket for mixed.fail"),
    }
    notices = [
        e.message for e in frontend.events if isinstance(e, Notice) and "waived" in e.message
    ]
    assert notices == ["mixed.fail failed but is waived: ticket for mixed.fail"]
