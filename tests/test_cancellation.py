"""A measurement's clean-up never swallows the caller's cancellation and never lets a
time-out of its own escape (steps/perf/runs.py ``_stop_server``)."""

from __future__ import annotations

import asyncio

import pytest

from steps import perf
from steps.perf import runs


class HangingPeer:
    """Stands in for the step context: the peer's server ignores pkill and never exits."""

    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    async def run(self, command, *, on=None, **_):
        self.commands.append(command)


async def _server_that_never_ends() -> None:
    await asyncio.sleep(3600)


async def test_a_cancelled_caller_is_not_swallowed_while_reaping_the_server():
    ctx = HangingPeer()
    server = asyncio.ensure_future(_server_that_never_ends())
    reaper = asyncio.ensure_future(
        perf._stop_server(ctx, server, "peer", ["pkill", "-f", "ib_write_bw"])
    )
    await asyncio.sleep(0.05)
    reaper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reaper
    assert ctx.commands == [["pkill", "-f", "ib_write_bw"]]
    server.cancel()


async def test_a_server_that_outlives_pkill_is_given_up_without_a_timeout_error(monkeypatch):
    monkeypatch.setattr(runs, "SERVER_REAP_S", 0.05)  # _stop_server reads it there
    server = asyncio.ensure_future(_server_that_never_ends())
    await perf._stop_server(
        HangingPeer(), server, "peer", ["pkill", "-f", "iperf3 -s"]
    )  # no TimeoutError
    assert server.cancelled()


async def test_the_servers_own_error_does_not_mask_the_client():
    async def failing() -> None:
        raise RuntimeError("server died")

    server = asyncio.ensure_future(failing())
    await asyncio.sleep(0)
    await perf._stop_server(
        HangingPeer(), server, "peer", ["pkill", "-f", "x"]
    )  # returns; error retrieved
