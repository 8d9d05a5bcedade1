"""Running a measurement: a one-shot server on the far end, the client on the node, and a
server the client never reached stopped and reaped, so no benchmark process is left
behind and no clean-up error masks the client's result."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from steps.perf.commands import iperf3_run, perftest_run
from steps.perf.model import LISTEN_GRACE_S, Endpoint
from wizard.facts import ParseError, parse
from wizard.facts.perftest import Perftest
from wizard.plan import StepContext, measurement_far_end
from wizard.transports.base import TransportError

SERVER_REAP_S = 15.0  # how long a stopped one-shot server may take to exit


async def _stop_server(ctx: StepContext, task: asyncio.Task, host: str, stop: list[str]) -> None:
    """End a one-shot server the client never reached (it would wait forever), then reap it.

    Runs in a `finally`, so neither a failed pkill nor the task's own error may mask the
    result or error of the client that ran before it.
    """
    if not task.done():
        with contextlib.suppress(TransportError):
            await ctx.run(stop, on=host)
    # asyncio.wait neither raises the task's error nor times out with an exception, and a
    # cancellation of *this* coroutine (the operator quit, a deadline) still propagates.
    done, _ = await asyncio.wait({task}, timeout=SERVER_REAP_S)
    if not done:
        task.cancel()  # outlived pkill: stop waiting (the remote `timeout` ends it anyway)
        await asyncio.wait({task}, timeout=1)
    if task.done() and not task.cancelled():
        task.exception()  # retrieved, so that it neither masks the client's result nor warns


async def perftest_pair(
    ctx: StepContext,
    test: str,
    client: Endpoint,
    server: Endpoint,
    *,
    qps: int = 1,
    extra: list[str] | None = None,
    client_extra: list[str] | None = None,
) -> tuple[Perftest | None, str]:
    """Run ``test`` server-on-peer / client-on-node; return (fact, problem)."""
    run = perftest_run(
        ctx.site, ctx.target, test, client, server, qps=qps, extra=extra, client_extra=client_extra
    )
    server_task = asyncio.ensure_future(
        ctx.run(run.server, on=server.host, timeout=run.seconds + 10)
    )
    try:
        await asyncio.sleep(LISTEN_GRACE_S)
        result = await ctx.run(run.client, on=client.host, timeout=run.seconds)
    finally:
        await _stop_server(ctx, server_task, server.host, run.stop)
    try:
        fact = parse("perftest", result.stdout + result.stderr)
    except ParseError as exc:
        return None, f"`{result.command}` printed nothing perftest-like ({exc.reason})"
    if fact.error:
        return fact, fact.error
    return fact, ""


async def iperf3_pair(ctx: StepContext, *, reverse: bool = False) -> tuple[float | None, str]:
    """TCP throughput between the GPU node and the peer over bond1 (Gb/s)."""
    assert ctx.node is not None
    run = iperf3_run(ctx.site, ctx.target, reverse=reverse)
    if run is None:
        return None, "no AIStor peer in the site"
    peer = measurement_far_end(ctx.site, ctx.target)
    assert peer is not None
    server = asyncio.ensure_future(ctx.run(run.server, on=peer.name))
    try:
        await asyncio.sleep(LISTEN_GRACE_S)
        result = await ctx.run(run.client, timeout=ctx.site.measurements.duration_s + 60)
    finally:
        await _stop_server(ctx, server, peer.name, run.stop)
    if result.exit_status != 0:
        return None, (
            result.stderr.strip() or result.stdout.strip() or "iperf3 failed"
        ).splitlines()[0]
    try:
        data: dict[str, Any] = json.loads(result.stdout)
        return data["end"]["sum_received"]["bits_per_second"] / 1e9, ""
    except (ValueError, KeyError) as exc:
        return None, f"iperf3 printed no JSON result ({exc})"
