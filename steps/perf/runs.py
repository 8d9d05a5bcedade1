"""Running a measurement: a one-shot server on the far end, the client on the node, and a
server the client never reached stopped and reaped, so no benchmark process is left
behind and no clean-up error masks the client's result."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from steps.perf.commands import iperf3_run, perftest_run, rate_cap_gbps
from steps.perf.model import LISTEN_GRACE_S, SERVER_EXITS, STOP_EXITS, Endpoint
from wizard.facts import ParseError, parse
from wizard.facts.perftest import Perftest, parse_perftest
from wizard.plan import StepContext, load_rate_gbps, measurement_far_end
from wizard.transports.base import CommandResult, TransportError

SERVER_REAP_S = 15.0  # how long a stopped one-shot server may take to exit
# perftest's SW limiter, when it cannot read the CPU frequency, says so and then runs with
# gap_cycles = 0, i.e. unlimited (perftest_resources.c run_iter_bw: "Failed: couldn't
# acquire cpu frequency for rate limiter." and no return).
LIMITER_UNREAD = "couldn't acquire cpu frequency for rate limiter"
CAP_TOLERANCE = 1.05  # a limited run a little over its cap is pacing jitter, not a broken limiter
# A client started before its one-shot server listens fails at once and says so: perftest's
# ethernet_client_connect (src/perftest_communication.c) prints "Couldn't connect to
# HOST:PORT" and does not retry; iperf3 prints "unable to connect to server" (src/iperf_error.c
# IECONNECT). The server's SSH session may take longer than LISTEN_GRACE_S to start (a jump
# host, a loaded peer), so such a client is run again while its server still waits, for up
# to CONNECT_RETRY_S; any other failure, or a server that has ended, is the run's result.
NOT_LISTENING = ("Couldn't connect to ", "unable to connect to server")
CONNECT_RETRY_S = 20.0
CONNECT_RETRY_EVERY_S = 1.0


@dataclass
class LoadGuard:
    """One step's promise to a production peer: once a run broke its rate cap (over_cap),
    no further load run of the step starts, since the next one would break it too."""

    broken: str = ""

    def refusal(self) -> str:
        return f"not run: an earlier run broke the rate cap ({self.broken})" if self.broken else ""


def over_cap(output: str, gbps: float | None, cap: float | None) -> str:
    """Why a run against a production peer broke its rate cap, or "" when it kept it: the
    limiter's own complaint in the output, or a measured bandwidth above cap x 1.05."""
    if cap is None:
        return ""
    if LIMITER_UNREAD in output:
        return (
            f"perftest could not read the CPU frequency, so its rate limiter was off and the "
            f"run loaded the production peer unlimited (cap {cap:g} Gb/s)"
        )
    if gbps is not None and gbps > cap * CAP_TOLERANCE:
        return (
            f"measured {gbps:.1f} Gb/s, above the {cap:g} Gb/s cap on the production peer: "
            "the rate limiter did not hold"
        )
    return ""


def not_listening(result: CommandResult) -> bool:
    """Whether a client failed only because its server was not listening yet."""
    text = result.stdout + result.stderr
    return result.exit_status != 0 and any(marker in text for marker in NOT_LISTENING)


async def client_when_listening(
    run_client: Callable[[], Awaitable[CommandResult]], server: asyncio.Future
) -> CommandResult:
    """The client's result once its server was listening (see NOT_LISTENING): a refused
    connection is retried while the server still runs, within CONNECT_RETRY_S."""
    await asyncio.sleep(LISTEN_GRACE_S)
    deadline = asyncio.get_running_loop().time() + CONNECT_RETRY_S
    while True:
        result = await run_client()
        if not not_listening(result) or server.done():
            return result
        if asyncio.get_running_loop().time() + CONNECT_RETRY_EVERY_S > deadline:
            return result
        await asyncio.sleep(CONNECT_RETRY_EVERY_S)


async def _stop_server(ctx: StepContext, task: asyncio.Task, host: str, stop: list[str]) -> None:
    """End a one-shot server the client never reached (it would wait forever), then reap it.

    Runs in a `finally`, so neither a failed pkill nor the task's own error may mask the
    result or error of the client that ran before it.
    """
    if not task.done():
        with contextlib.suppress(TransportError):
            await ctx.run(stop, on=host, expected=STOP_EXITS)
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
    share: float = 1.0,
    guard: LoadGuard | None = None,
) -> tuple[Perftest | None, str]:
    """Run ``test`` server-on-peer / client-on-node; return (fact, problem). A run above its
    rate cap is a problem (over_cap): the production peer took more than it was promised;
    with a ``guard``, it is remembered and the guard's later runs are refused unrun."""
    if guard is not None and guard.broken:
        return None, guard.refusal()
    run = perftest_run(
        ctx.site, ctx.target, test, client, server, qps=qps, extra=extra,
        client_extra=client_extra, share=share,
    )  # fmt: skip
    server_task = asyncio.ensure_future(
        ctx.run(run.server, on=server.host, timeout=run.seconds + 10, expected=SERVER_EXITS)
    )
    try:
        result = await client_when_listening(
            lambda: ctx.run(run.client, on=client.host, timeout=run.seconds), server_task
        )
    finally:
        await _stop_server(ctx, server_task, server.host, run.stop)
    try:
        fact = parse(parse_perftest, result.stdout + result.stderr)
    except ParseError as exc:
        return None, f"`{result.command}` printed nothing perftest-like ({exc.reason})"
    # Before fact.error: perftest's limiter complaint starts with "Failed:", which the
    # parser also reports as the run's error.
    cap = rate_cap_gbps(ctx.site, ctx.target, test, share)
    broken = over_cap(result.stdout + result.stderr, fact.best_bw_gbps, cap)
    if broken:
        if guard is not None:
            guard.broken = broken
        return fact, broken
    if fact.error:
        return fact, fact.error
    return fact, ""


async def iperf3_pair(
    ctx: StepContext, *, reverse: bool = False, share: float = 1.0
) -> tuple[float | None, str]:
    """TCP throughput between the GPU node and the peer over bond1 (Gb/s)."""
    assert ctx.node is not None
    run = iperf3_run(ctx.site, ctx.target, reverse=reverse, share=share)
    if run is None:
        return None, "no AIStor peer in the site"
    peer = measurement_far_end(ctx.site, ctx.target)
    assert peer is not None
    server = asyncio.ensure_future(ctx.run(run.server, on=peer.name, expected=SERVER_EXITS))
    try:
        result = await client_when_listening(
            lambda: ctx.run(run.client, timeout=ctx.site.measurements.duration_s + 60), server
        )
    finally:
        await _stop_server(ctx, server, peer.name, run.stop)
    if result.exit_status != 0:
        return None, (
            result.stderr.strip() or result.stdout.strip() or "iperf3 failed"
        ).splitlines()[0]
    try:
        data: dict[str, Any] = json.loads(result.stdout)
        gbps = data["end"]["sum_received"]["bits_per_second"] / 1e9
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"iperf3 printed no JSON result ({exc})"
    rate = load_rate_gbps(ctx.site, ctx.target)
    return gbps, over_cap("", gbps, None if rate is None else rate * share)
