"""A day-2 rerun after an outside reboot (issue #27, point 4): the reboot step's settled
result is re-verified on the new boot, never crashes (it has no capture then), and never
reboots the node again; "a node is not rebooted twice" holds across reruns, also when the
re-verification fails."""

from __future__ import annotations

import io

from wizard.checkpoint import Checkpoint, read_journal
from wizard.headless import HeadlessFrontEnd
from wizard.lab.lab import Lab
from wizard.model import StepState
from wizard.runner import run_engine
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
    async with Lab(tmp_path / "lab", nodes=1) as lab:
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
    async with Lab(tmp_path / "lab", nodes=1) as lab:
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
