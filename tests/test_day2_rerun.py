"""Day-2 reruns on a finished checkpoint (issue #27).

Point 4: after an outside reboot the reboot step's settled result is re-verified on the new
boot, never crashes (it has no capture then), and never reboots the node again; "a node is
not rebooted twice" holds across reruns, also when the re-verification fails.
Point 5: a changed host key fails `run` (exit 2, the cause named), whatever the checkpoint
says."""

from __future__ import annotations

import io

from frontend.headless import HeadlessFrontEnd
from frontend.runner import run_engine
from simulator.lab import Lab
from wizard.checkpoint import Checkpoint, read_journal
from wizard.model import StepState
from wizard.site import load_site

NODE = "gpu-b300-01"


def _reboots(state) -> int:
    return sum(
        1
        for e in read_journal(state / "lab")[0]
        if "intent" in e and str(e.get("command", "")).endswith("systemctl reboot")
    )


async def _reboot_step(lab: Lab, state):
    from steps import build_plan

    out = io.StringIO()
    frontend = HeadlessFrontEnd(yes=True, window_open=True, out=out)
    outcome = await run_engine(
        load_site(lab.site_path), build_plan(), state, frontend, step="operate.reboot"
    )
    return outcome, out.getvalue()


async def test_a_rerun_after_an_outside_reboot_re_verifies_and_does_not_reboot_again(tmp_path):
    state = tmp_path / "state"
    async with Lab(tmp_path / "lab", nodes=1, faults=("greenfield",)) as lab:  # joined already
        lab.reboot_seconds = 0.2
        first, text = await _reboot_step(lab, state)
        assert first.summary.results[("operate.reboot", NODE)] is StepState.DONE, text
        assert _reboots(state) == 1
        # `systemctl reboot` by hand, outside the wizard.
        await lab.servers[NODE]._reboot()
        second, text = await _reboot_step(lab, state)
        assert second.exit_code == 0, text
        assert "rebooted since its results were recorded" in text
        assert second.summary.results[("operate.reboot", NODE)] is StepState.DONE, text
        assert not second.internal_errors, second.internal_errors
        third, text = await _reboot_step(lab, state)
        assert third.summary.results[("operate.reboot", NODE)] is StepState.DONE, text
    assert _reboots(state) == 1, "the node was rebooted again by a rerun"


async def test_a_failed_re_verification_is_not_a_reason_to_reboot_again(tmp_path):
    state = tmp_path / "state"
    async with Lab(tmp_path / "lab", nodes=1, faults=("greenfield",)) as lab:  # joined already
        lab.reboot_seconds = 0.2
        first, text = await _reboot_step(lab, state)
        assert first.summary.results[("operate.reboot", NODE)] is StepState.DONE, text
        await lab.servers[NODE]._reboot()
        # QoS was recorded done before the reboot, and does not hold on the new boot:
        # the re-verification fails.
        with Checkpoint.open(state, load_site(lab.site_path)) as checkpoint:
            checkpoint.set_step("qos.apply", NODE, StepState.DONE)
        second, text = await _reboot_step(lab, state)
        assert second.summary.results[("operate.reboot", NODE)] is StepState.FAILED, text
        third, text = await _reboot_step(lab, state)
        assert third.summary.results[("operate.reboot", NODE)] is StepState.FAILED, text
        assert "--redo operate.reboot" in text, text
    assert _reboots(state) == 1, "a failed re-verification rebooted the node again"


async def test_a_changed_host_key_fails_run_whatever_the_checkpoint_says(tmp_path):
    """Issue #27 point 5: `check` named a possible man-in-the-middle, `run` on the finished
    checkpoint exited 0 ("its recorded results stand")."""
    import asyncssh

    from steps import build_plan

    state = tmp_path / "state"
    async with Lab(tmp_path / "lab", nodes=1, faults=("greenfield",)) as lab:  # joined already
        site = load_site(lab.site_path)
        plan = build_plan()
        # A finished checkpoint: every step done, on the machine as it is now.
        with Checkpoint.open(state, site) as checkpoint:
            for phase in plan.phases:
                for step in phase.steps:
                    for target in plan.targets(step, site):
                        checkpoint.set_step(step.id, target, StepState.DONE, durable=False)
        first = await run_engine(site, plan, state, HeadlessFrontEnd(yes=True, out=io.StringIO()))
        assert first.exit_code == 0, first.summary
        # Another machine answers at the node's address: its key differs from known_hosts.
        known = lab.directory / "known_hosts"
        lines = known.read_text().splitlines()
        other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode().strip()
        lines[0] = lines[0].split(" ", 1)[0] + " " + other
        known.write_text("\n".join(lines) + "\n")
        out = io.StringIO()
        second = await run_engine(site, plan, state, HeadlessFrontEnd(yes=True, out=out))
    text = out.getvalue()
    assert second.exit_code == 2, text
    assert "possible man-in-the-middle" in text + str(second.summary.stopped), text
    assert "results stand" not in text, text
