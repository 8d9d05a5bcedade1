"""Issue #25 (CI time, host truth): after the rejoin of a QoS change, a LAG refusal that
Intel's ice logs (src/ice_lag.c ice_is_bond_rdma_cap: "Found netdev %s with different DCB
config", ice then unplugs the RDMA device) ends the wait for the RDMA device at once; one
logged before the rejoin never does, and a slow registration still succeeds. The step's
own clock (time.monotonic, driven here) says how long it waited."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import steps.qos.steps as qos_steps
from steps.e810 import LAG_REFUSALS, lag_refusals_after, newest_stamp
from steps.qos.commands import LACP_WAIT_S
from tests.conftest import MINIMAL_SITE
from wizard.site import parse_site
from wizard.transports.base import CommandResult

REFUSAL = "ice 0000:3b:00.0 ens5f0np0: Found netdev ens5f1np1 with different DCB config"
BEFORE = (
    "[    0.000000] Linux version 6.12.0-55.el10.x86_64\n"
    "[    9.118804] bond1: (slave ens5f0np0): Enslaving as a backup interface with an up link\n"
    f"[   31.000000] {REFUSAL}\n"  # a refusal from an earlier bond: history
    "[   35.500000] bond1: (slave ens5f1np1): Releasing backup interface\n"
)
AFTER = BEFORE + (
    "[   40.000000] bond1: (slave ens5f1np1): Enslaving as a backup interface with an up link\n"
    f"[   40.000120] {REFUSAL}\n"
)


def test_only_a_refusal_stamped_after_the_mark_counts():
    mark = newest_stamp(BEFORE)
    assert mark == 35.5
    assert lag_refusals_after(BEFORE, mark) == []
    [(line, refusal)] = lag_refusals_after(AFTER, mark)
    assert line == REFUSAL and refusal is LAG_REFUSALS[2]
    assert "DCB configs differ" in refusal.cause
    # No timestamps (printk.time off): nothing is newer than anything.
    assert newest_stamp(REFUSAL + "\n") is None
    # The SR-IOV LAG's message (ice_lag_chk_comp) is about VFs, not RDMA: not a refusal.
    vf = "[   41.0] ice 0000:3b:00.0: Found ens5f1np1 with different DCB in LAG - VF LAG disabled"
    assert lag_refusals_after(vf, 0.0) == []


class Host:
    """The step's view of a node: a fake clock the step's sleeps advance, `rdma link`
    answered by ``devices`` (one per poll), and dmesg by ``logs`` (one per read)."""

    def __init__(self, monkeypatch, devices, logs):
        self.now = 1000.0
        self.devices, self.logs = iter(devices), iter(logs)
        self.said: list = []
        self.dmesg_reads = 0

        async def device(ctx, live=False):
            return next(self.devices, None)

        async def sleep(seconds):
            self.now += seconds

        monkeypatch.setattr(qos_steps, "rdma_device", device)
        monkeypatch.setattr(qos_steps.asyncio, "sleep", sleep)
        monkeypatch.setattr(qos_steps.time, "monotonic", lambda: self.now)

    async def run(self, argv, **_):
        assert argv == ["dmesg"]
        self.dmesg_reads += 1
        return CommandResult("gpu-1", "dmesg", 0, next(self.logs), "")

    def ctx(self):
        return SimpleNamespace(
            node=parse_site(MINIMAL_SITE).nodes[0],
            run=self.run,
            wait_begins=lambda message, timeout: self.said.append((message, round(timeout))),
            wait_ends=lambda: self.said.append("ended"),
        )


async def test_a_refusal_logged_after_the_rejoin_ends_the_wait_at_once(monkeypatch):
    host = Host(monkeypatch, devices=[], logs=[BEFORE] + [AFTER] * 40)
    step = qos_steps.ApplyQos()
    started = host.now
    mark = await step._log_mark(host.ctx())
    found = await step._device_on_bond(host.ctx(), mark)
    assert found.device is None and [line for line, _ in found.refusals] == [REFUSAL]
    # Found at the first poll: no wait began, the step's clock did not move.
    assert host.now - started < LACP_WAIT_S and host.now == started
    assert host.said == []


@pytest.mark.parametrize("polls", [1, 10, 25])
async def test_an_old_refusal_never_ends_a_slow_registration_early(monkeypatch, polls):
    """The device comes after ``polls`` polls (2 s each); dmesg only shows the refusal from
    before the rejoin: the step waits and returns the device."""
    host = Host(monkeypatch, devices=[None] * polls + ["irdma0"], logs=[BEFORE] * 40)
    step = qos_steps.ApplyQos()
    found = await step._device_on_bond(host.ctx(), await step._log_mark(host.ctx()))
    assert found.device == "irdma0" and found.refusals == ()
    assert host.said == [("waiting for the RDMA device on bond1", LACP_WAIT_S), "ended"]
    # dmesg is read at the first poll, then after gaps that double: not at every poll.
    assert host.dmesg_reads <= 2 + polls.bit_length()


async def test_an_unreadable_log_before_the_rejoin_lets_no_refusal_end_the_wait(monkeypatch):
    """Without a mark nothing tells a new refusal from an old one: the full bound."""
    host = Host(monkeypatch, devices=[], logs=[AFTER] * 40)
    started = host.now
    found = await qos_steps.ApplyQos()._device_on_bond(host.ctx(), None)
    assert found.device is None and found.refusals == ()
    assert host.now - started > LACP_WAIT_S and host.dmesg_reads == 0


@pytest.mark.parametrize("polls", [3, 12])
async def test_the_rollbacks_wait_outlasts_a_refusal_that_heals(monkeypatch, polls):
    """The rollback turns the firmware LLDP agent back on last, so each port's DCB comes
    from the switch on its own time and ice may refuse once, then plug RDMA at a later
    bonding event (ice_lag.c ice_lag_process_event -> ice_lag_chk_rdma): the rollback's
    wait goes on past the refusal and returns the device that came."""
    host = Host(monkeypatch, devices=[None] * polls + ["irdma0"], logs=[BEFORE] + [AFTER] * 40)
    step = qos_steps.ApplyQos()
    mark = await step._log_mark(host.ctx())
    found = await step._device_on_bond(host.ctx(), mark, refusal_ends_wait=False)
    assert found.device == "irdma0" and found.refusals == ()


async def test_the_rollbacks_wait_names_the_refusal_when_no_device_came(monkeypatch):
    host = Host(monkeypatch, devices=[], logs=[BEFORE] + [AFTER] * 40)
    step = qos_steps.ApplyQos()
    started = host.now
    mark = await step._log_mark(host.ctx())
    found = await step._device_on_bond(host.ctx(), mark, refusal_ends_wait=False)
    assert found.device is None and [line for line, _ in found.refusals] == [REFUSAL]
    assert host.now - started > LACP_WAIT_S  # the full bound, then the cause named
