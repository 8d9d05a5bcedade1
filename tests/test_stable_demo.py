"""A demo kept in a state directory comes back as it was: `demo` killed and started again
resumes exactly where it stopped.

It used to come back on new ports with new keys and a factory-fresh lab: the wizard saw a
changed site file, reset the join and the operator install, then failed phase 9 because
the node labels had gone with the old lab.
"""

from __future__ import annotations

import asyncio
import io
import stat

from frontend.headless import HeadlessFrontEnd
from frontend.lab_session import kept_lab_dir, open_lab
from frontend.runner import run_engine
from simulator import persist
from simulator.lab import Lab
from steps import build_plan
from wizard.model import StepState
from wizard.site import load_site

FIRST = ("preflight", "packages", "e810", "bond", "irdma", "join")
THEN = ("gpu-operator", "rdma-plugin")
NODE = "gpu-b300-01"


def steps_of(phases):
    return [s.id for p in build_plan().phases if p.id in phases for s in p.steps]


def lab_files(directory):
    return {
        name: (directory / name).read_text() for name in ("site.yaml", "known_hosts", "kubeconfig")
    }


async def test_a_kept_lab_comes_back_with_its_ports_keys_and_state(tmp_path):
    state = tmp_path / "state"
    directory = kept_lab_dir(state)
    quiet = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
    async with Lab(directory, persist=True) as lab:
        first = await run_engine(load_site(lab.site_path), build_plan(), state, quiet,
                                 only=steps_of(FIRST))  # fmt: skip
        assert first.summary.results[("join.labels", NODE)] is StepState.DONE
        before = lab_files(directory)
        machine_id = lab.hosts[NODE].state.machine_id
    saved = directory / persist.SAVED
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700

    async with Lab(directory, persist=True) as lab:
        assert lab_files(directory) == before  # same addresses, ports, host and client keys
        assert lab.hosts[NODE].state.machine_id == machine_id
        assert lab.cluster.node(NODE)["metadata"]["labels"]["accelerator"] == "nvidia-b300"
        quiet = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
        then = await run_engine(load_site(lab.site_path), build_plan(), state, quiet,
                                only=steps_of(FIRST + THEN))  # fmt: skip
    assert then.summary.reset == []  # the checkpoint is not reset
    assert "join.labels: already done (checkpoint)" in quiet.out.getvalue() or (
        then.summary.results[("join.labels", NODE)] is StepState.DONE
    )
    assert then.summary.results[("rdma-plugin.pod-test", NODE)] is StepState.DONE, then.summary


async def test_a_killed_demo_lab_was_saved_after_its_last_change(tmp_path):
    """No stop(): the lab saves on its own after a change, as a kill -9 leaves it."""
    state = tmp_path / "state"
    session = await open_lab((), 1, state, keep=True)
    lab = session.lab
    try:
        lab.hosts[NODE].execute("modprobe -r irdma")
        await asyncio.sleep(2.5)  # the saver's turn (once a second, after a change)
        saved = persist.load(kept_lab_dir(state), 1, 1, ())
        assert saved is not None and "irdma" not in saved.hosts[NODE].modules
        assert saved.ssh_ports[NODE] == lab.servers[NODE].port
    finally:
        lab._saver.cancel()  # as if killed: no final save
        lab._saver = None
        await session.close()


async def test_a_lab_saved_for_other_faults_starts_fresh(tmp_path):
    directory = tmp_path / "lab"
    async with Lab(directory, persist=True) as lab:
        machine_id = lab.hosts[NODE].state.machine_id
    async with Lab(directory, persist=True, faults=("irdma-not-loaded",)) as lab:
        assert lab.hosts[NODE].state.machine_id != machine_id
        assert "irdma" not in lab.hosts[NODE].state.modules
    assert (directory / "lab-state.set-aside").exists()
