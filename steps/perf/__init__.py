"""Benchmark orchestration shared by the measure steps: perftest pairs, iperf3, line rate.

A server runs on the AIStor peer (the far end), the client on the GPU node. The server is
wrapped in ``timeout`` and killed explicitly when the client fails, so no benchmark
process is ever left behind on either host.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
from dataclasses import dataclass
from typing import Any

from steps.common import RDMA_LINKS, bonding_command, on_host, shown, stats_command
from wizard.facts import ParseError, parse
from wizard.facts.perftest import Perftest
from wizard.plan import FarEnd, StepContext, measurement_far_end
from wizard.probe import Report, probe
from wizard.site import Node, Site
from wizard.transports.base import TransportError

SERVER_TIMEOUT_S = 120
LISTEN_GRACE_S = 0.5
BW_TESTS = ("ib_write_bw", "ib_read_bw", "ib_send_bw")
BW_QPS = 4  # the bandwidth tests and the loads (coexistence, soak, GPU memory)
LAT_TEST, LAT_QPS = "ib_send_lat", 1
QP_SWEEP = (1, 4, 8)


def devinfo_command(device: str) -> list[str]:
    return ["ibv_devinfo", "-v", "-d", device]


@dataclass(frozen=True)
class Endpoint:
    host: str  # host name in the site (transport key)
    device: str
    gid_index: int | str | None  # a str only as the runbook's placeholder
    address: str  # RDMA (bond1) address


def _gid_matches(gid: str, address: str) -> bool:
    packed = ipaddress.IPv4Address(address).packed
    hex_tail = f"ffff:{packed[0]:02x}{packed[1]:02x}:{packed[2]:02x}{packed[3]:02x}"
    return gid.endswith(f"::ffff:{address}") or gid.lower().endswith(hex_tail)


async def discover(
    ctx: StepContext, host: str, address: str, device: str | None = None
) -> Endpoint | None:
    """The RDMA device and RoCEv2 GID index for ``address`` on ``host``."""
    if device is None:
        links = await probe(ctx, RDMA_LINKS, "rdma-link", on=host)
        active = [lk for lk in (links.fact.links if links.ok else []) if lk.state == "ACTIVE"]
        if not active:
            return None
        device = active[0].device
    info = await probe(ctx, devinfo_command(device), "ibv-devinfo", on=host)
    gid_index = None
    if info.ok:
        for dev in info.fact.devices:
            for port in dev.ports:
                for gid in port.gids:
                    if gid.type and "v2" in gid.type.lower() and _gid_matches(gid.gid, address):
                        gid_index = gid.index
    return Endpoint(host, device, gid_index, address)


async def endpoints(ctx: StepContext) -> tuple[Endpoint | None, Endpoint | None, FarEnd | None]:
    """The GPU node's and its far end's endpoints (from discovery): an AIStor peer, or the
    node's pair (``measurements.pair_nodes``)."""
    assert ctx.node is not None
    peer = measurement_far_end(ctx.site, ctx.target)
    declared = {key for _, key in ctx.step.needs}
    if {"rdma_device", "gid_index"} <= declared:
        # Typed results: irdma.verify recorded both (the engine blocked the step otherwise).
        client = Endpoint(
            ctx.target, str(ctx.need("rdma_device")), int(ctx.need("gid_index")), ctx.node.rdma_ip
        )
    else:
        client = await discover(ctx, ctx.target, ctx.node.rdma_ip)
    server = await discover(ctx, peer.name, peer.rdma_ip, peer.rdma_device) if peer else None
    return client, server, peer


def planned_endpoints(site: Site, node: Node) -> tuple[Endpoint, Endpoint | None]:
    """The endpoints as the runbook shows them: what discovery finds is a placeholder."""
    client = Endpoint(node.name, "<rdma-dev>", "<gid-index>", node.rdma_ip)
    peer = measurement_far_end(site, node.name)
    server = (
        Endpoint(peer.name, peer.rdma_device or "<rdma-dev>", "<gid-index>", peer.rdma_ip)
        if peer
        else None
    )
    return client, server


def endpoint_lines(site: Site, node: Node) -> list[str]:
    """The runbook lines of ``endpoints``: discovery of the RDMA device and GID index."""
    peer = measurement_far_end(site, node.name)
    lines = [
        shown(RDMA_LINKS, "only when irdma.verify recorded no device and GID"),
        shown(devinfo_command("<rdma-dev>"), "then, for the device it shows"),
    ]
    if peer is not None:
        if peer.rdma_device is None:
            lines.append(shown(RDMA_LINKS, on_host(peer.name)))
        lines.append(shown(devinfo_command(peer.rdma_device or "<rdma-dev>"), on_host(peer.name)))
    return lines


_TESTS = (*BW_TESTS, "ib_write_lat", "ib_read_lat", "ib_send_lat")


def _port(site: Site, target: str, base: int, test: str, qps: int) -> int:
    """A port per node, test and QP count, so concurrent runs against one peer never clash."""
    node_index = next((i for i, n in enumerate(site.nodes) if n.name == target), 0)
    return base + 100 * node_index + 10 * _TESTS.index(test) + min(qps, 9)


def _args(test: str, endpoint: Endpoint, qps: int, port: int, extra: list[str]) -> list[str]:
    """perftest's options for one end. ``-q`` only on bandwidth tests: perftest's parser
    (src/perftest_parameters.c, ``case 'q'``) refuses it on latency tests with "Multiple QPs
    only available on bw tests", whatever the count, up to 25.10; from 26.01.5 (commit
    a07e85a) it takes ``-q 1`` and refuses only more. Leaving it out is right for both."""
    argv = ["-d", endpoint.device]
    if endpoint.gid_index is not None:
        argv += ["-x", str(endpoint.gid_index)]
    if test.endswith("_bw"):
        argv += ["-q", str(qps)]
    return [*argv, "-p", str(port), *extra]


SERVER_REAP_S = 15.0  # how long a stopped one-shot server may take to exit


def _run_seconds(extra: list[str]) -> int:
    """How long a run may take: perftest's -D (duration mode) on top of the usual limit."""
    if "-D" in extra and extra.index("-D") + 1 < len(extra):
        return SERVER_TIMEOUT_S + int(extra[extra.index("-D") + 1])
    return SERVER_TIMEOUT_S


@dataclass(frozen=True)
class ServerRun:
    """A one-shot server on the far end, the client on the node, and the server's cleanup."""

    server: list[str]
    client: list[str]
    stop: list[str]  # pkill, for a server the client never reached
    seconds: int = SERVER_TIMEOUT_S  # the server's `timeout`, and the client's limit

    def lines(self, server_host: str) -> list[str]:
        return [
            shown(self.server, on_host(server_host, "first")),
            shown(self.client),
            shown(self.stop, on_host(server_host, "if that server still waits")),
        ]


def perftest_run(
    site: Site,
    target: str,
    test: str,
    client: Endpoint,
    server: Endpoint,
    *,
    qps: int = 1,
    extra: list[str] | None = None,
    client_extra: list[str] | None = None,
) -> ServerRun:
    """The commands of one perftest pair (``perftest_pair`` runs them)."""
    extra = list(extra or [])
    if not test.endswith("_lat"):
        extra.append("--report_gbits")
    port = _port(site, target, site.measurements.perftest_port, test, qps)
    return ServerRun(
        ["timeout", str(_run_seconds(extra)), test, *_args(test, server, qps, port, extra)],
        [test, *_args(test, client, qps, port, extra + list(client_extra or [])), server.address],
        ["pkill", "-f", f"{test} .*-p {port}"],
        _run_seconds(extra),
    )


def perftest_lines(
    site: Site,
    node: Node,
    test: str,
    *,
    qps: int = 1,
    extra: list[str] | None = None,
    client_extra: list[str] | None = None,
) -> list[str]:
    """The runbook lines of one perftest pair."""
    client, server = planned_endpoints(site, node)
    if server is None:
        return ["# no AIStor peer in the site: no perftest server"]
    run = perftest_run(
        site, node.name, test, client, server, qps=qps, extra=extra, client_extra=client_extra
    )
    return run.lines(server.host)


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


async def line_rate_gbps(ctx: StepContext) -> tuple[float | None, float | None]:
    """(one port, the bond aggregate) in Gb/s from /proc/net/bonding."""
    assert ctx.node is not None
    bond = await probe(ctx, bonding_command(ctx.node), "bonding")
    if not bond.ok:
        return None, None
    speeds = [s.speed_mbps for s in bond.fact.slaves if s.speed_mbps]
    if not speeds:
        return None, None
    return max(speeds) / 1000, sum(speeds) / 1000


def judge_bandwidth(
    report: Report,
    name: str,
    label: str,
    fact: Perftest,
    port_rate: float | None,
    minimum_percent: int,
    gate: str,
) -> float | None:
    gbps = fact.best_bw_gbps
    if gbps is None:
        report.fail(
            name, f"{label}: no bandwidth in the output", "read the perftest output", gate=gate
        )
        return None
    if port_rate:
        percent = 100 * gbps / port_rate
        text = f"{label}: {gbps:.1f} Gb/s = {percent:.0f}% of one {port_rate:.0f} Gb/s port"
        if percent >= minimum_percent:
            report.ok(name, text, gate=gate)
        else:
            report.warn(
                name,
                text + f" (below {minimum_percent}%)",
                "try more QPs (-q 4/8), check MTU 4096, PCIe width and the switch",
                gate=gate,
            )
    else:
        report.ok(name, f"{label}: {gbps:.1f} Gb/s (line rate unknown)", gate=gate)
    return gbps


# The QP sweep runs for a set time with CPU use reported (seed 000 section 21: bandwidth,
# latency, CPU and packet loss per QP count). perftest's --cpu_util works only in duration
# mode (src/perftest_parameters.c: "CPU Utilization works only with Duration mode.") and adds
# a CPU_Util[%] column; -D goes to both ends, --cpu_util to the client that reports.
SWEEP_CLIENT_EXTRA = ["--cpu_util"]


def sweep_extra(site: Site) -> list[str]:
    return ["-D", str(site.measurements.duration_s)]


def report_congestion(
    ctx: StepContext,
    report: Report,
    series: str,
    before: dict[str, dict[str, int]],
    after: dict[str, dict[str, int]],
    *,
    qos: bool,
) -> None:
    """DCQCN's counters on both ends over the suite, recorded and explained."""
    gate = "T08" if qos else "T07"
    parts = []
    for end in ("node", "far end"):
        delta = _delta(after[end], before[end])
        for name, value in delta.items():
            ctx.record(
                f"{series}.congestion.{end.replace(' ', '_')}.{name}", float(value), "packets"
            )
        if delta:
            parts.append(f"{end}: " + ", ".join(f"{k} +{v}" for k, v in sorted(delta.items())))
    if not parts:
        report.skip("congestion-counters", "the RDMA devices show no CNP/ECN counters", gate=gate)
        return
    ecn = ctx.site.qos.ecn and qos
    marked = any(after[e].get("RxECNMrkd", 0) > before[e].get("RxECNMrkd", 0) for e in after)
    note = (
        "ECN marks and CNPs: DCQCN is reacting to congestion"
        if marked
        else "no ECN marks: " + ("the switch marked nothing" if ecn else "ECN is off")
    )
    report.ok("congestion-counters", f"CNP / ECN over the suite ({note}): {'; '.join(parts)}",
              gate=gate)  # fmt: skip


def suite_extra(site: Site, qos: bool) -> list[str]:
    """With QoS: through the connection manager (-R) with the RoCE ToS (-T)."""
    return ["-R", "-T", str(site.qos.roce_tos)] if qos else []


def suite_lines(site: Site, node: Node, *, qos: bool) -> list[str]:
    """The runbook lines of ``rdma_suite``, in the order it runs them."""
    extra = suite_extra(site, qos)
    far = measurement_far_end(site, node.name)
    counters = [shown(hw_counter_command("<rdma-dev>"), "CNP / ECN counters, before and after")]
    if far is not None:
        counters.append(shown(hw_counter_command(far.rdma_device or "<rdma-dev>"),
                              on_host(far.name, "CNP / ECN counters, before and after")))  # fmt: skip
    lines = [*endpoint_lines(site, node), shown(bonding_command(node), "line rate"), *counters]
    for test in BW_TESTS:
        lines += perftest_lines(site, node, test, qps=BW_QPS, extra=extra)
    lines += perftest_lines(site, node, LAT_TEST, qps=LAT_QPS, extra=extra)
    for qps in QP_SWEEP:
        lines += pause_counter_lines(node, "drop and error counters, before and after")
        lines += perftest_lines(site, node, "ib_write_bw", qps=qps, extra=[*extra, *sweep_extra(site)],
                                client_extra=SWEEP_CLIENT_EXTRA)  # fmt: skip
    return lines


async def rdma_suite(ctx: StepContext, report: Report, *, series: str, qos: bool) -> None:
    """write/read/send bandwidth, send latency and a write QP sweep, recorded as ``series``."""
    client, server, peer = await endpoints(ctx)
    if peer is None or server is None or client is None:
        report.fail(
            "rdma-pair",
            "no RDMA endpoint pair (AIStor peer or its RDMA device missing)",
            "add aistor.peers to the site and make its RDMA device ACTIVE",
            gate="T04",
        )
        return
    extra = suite_extra(ctx.site, qos)
    port_rate, bond_rate = await line_rate_gbps(ctx)
    if port_rate:
        ctx.record(f"{series}.line_rate_port", port_rate, "Gb/s")
    if bond_rate:
        ctx.record(f"{series}.line_rate_bond", bond_rate, "Gb/s")
    minimum = ctx.site.measurements.min_line_rate_percent
    congestion_before = {
        "node": await congestion_counters(ctx, client),
        "far end": await congestion_counters(ctx, server),
    }
    functional = True
    for test in BW_TESTS:
        fact, problem = await perftest_pair(ctx, test, client, server, qps=BW_QPS, extra=extra)
        if fact is None or problem:
            functional = False
            report.fail(
                f"{series}-{test}",
                f"{test} failed: {problem}",
                "check the peer's RDMA device, GIDs and routes between the bond1 addresses",
                gate="T06",
            )
            continue
        gbps = judge_bandwidth(
            report, f"{series}-{test}", f"{test} ({BW_QPS} QPs)", fact, port_rate, minimum, "T06"
        )
        if gbps is not None:
            ctx.record(
                f"{series}.{test}.q{BW_QPS}",
                gbps,
                "Gb/s",
                tos=str(fact.tos) if fact.tos is not None else "",
            )
    lat, problem = await perftest_pair(ctx, LAT_TEST, client, server, qps=LAT_QPS, extra=extra)
    if lat and not problem and lat.results:
        typical = lat.results[0].get("t_typical_us")
        ctx.record(f"{series}.{LAT_TEST}.typical", float(typical), "us")
        report.ok(
            f"{series}-latency",
            f"{LAT_TEST} typical {typical} us, p99 {lat.results[0].get('p99_us')} us",
            gate="T06",
        )
    else:
        functional = False
        report.fail(
            f"{series}-latency", f"{LAT_TEST} failed: {problem}", "see the output", gate="T06"
        )
    sweep: dict[int, tuple[float, float | None, int]] = {}
    for qps in QP_SWEEP:
        lost_before = await loss_counters(ctx)
        fact, problem = await perftest_pair(
            ctx, "ib_write_bw", client, server, qps=qps, extra=[*extra, *sweep_extra(ctx.site)],
            client_extra=SWEEP_CLIENT_EXTRA,
        )  # fmt: skip
        lost = sum(_delta(await loss_counters(ctx), lost_before).values())
        if fact and not problem and fact.best_bw_gbps is not None:
            cpu = next((r.get("cpu_util_percent") for r in fact.results
                        if r.get("cpu_util_percent") is not None), None)  # fmt: skip
            sweep[qps] = (fact.best_bw_gbps, cpu, lost)
            ctx.record(f"{series}.qp_sweep.q{qps}", fact.best_bw_gbps, "Gb/s", qps=str(qps))
            if cpu is not None:
                ctx.record(f"{series}.qp_sweep.q{qps}.cpu", float(cpu), "%", qps=str(qps))
            ctx.record(f"{series}.qp_sweep.q{qps}.lost", float(lost), "packets", qps=str(qps))
    if len(sweep) == len(QP_SWEEP):
        text = ", ".join(
            f"{q} QP: {bw:.1f}" + (f" (CPU {cpu:.1f} %, {lost} lost)" if cpu is not None
                                   else f" ({lost} lost)")
            for q, (bw, cpu, lost) in sweep.items()
        )  # fmt: skip
        best = max(sweep, key=lambda q: sweep[q][0])
        lost_total = sum(lost for _, _, lost in sweep.values())
        if lost_total:
            report.warn(
                f"{series}-qp-sweep",
                f"ib_write_bw {text} Gb/s: {lost_total} packets dropped or corrupted on the "
                "node's ports during the sweep",
                "a lossless class must not drop: check PFC on priority 3 end to end, the "
                "switch buffers and the cabling (CRC errors)",
                gate="T07",
            )
        else:
            report.ok(f"{series}-qp-sweep", f"ib_write_bw {text} Gb/s; best with {best} QPs",
                      gate="T07")  # fmt: skip
    else:
        report.fail(
            f"{series}-qp-sweep",
            "the QP sweep did not complete",
            "see the perftest output",
            gate="T07",
        )
    congestion_after = {
        "node": await congestion_counters(ctx, client),
        "far end": await congestion_counters(ctx, server),
    }
    report_congestion(ctx, report, series, congestion_before, congestion_after, qos=qos)
    if functional:
        report.ok(
            "rdma-functional",
            f"RDMA between {client.host} ({client.device}, GID {client.gid_index}) and "
            f"{server.host} ({server.device}) works",
            gate="T04",
        )


def iperf3_run(site: Site, target: str, *, reverse: bool = False) -> ServerRun | None:
    """The commands of one iperf3 pair over the bond (None without an AIStor peer)."""
    peer = measurement_far_end(site, target)
    if peer is None:
        return None
    m = site.measurements
    port = m.iperf3_port + next((i for i, n in enumerate(site.nodes) if n.name == target), 0)
    server = ["iperf3", "-s", "-1", "-p", str(port)]
    return ServerRun(
        ["timeout", str(SERVER_TIMEOUT_S), *server],
        [
            "iperf3",
            "-c",
            peer.rdma_ip,
            "-p",
            str(port),
            "-P",
            str(m.tcp_streams),
            "-t",
            str(m.duration_s),
            "-J",
            *(["-R"] if reverse else []),
        ],
        ["pkill", "-f", " ".join(server)],
    )


def iperf3_lines(site: Site, node: Node, *, reverse: bool = False) -> list[str]:
    run = iperf3_run(site, node.name, reverse=reverse)
    if run is None:
        return ["# no AIStor peer in the site: no iperf3 server"]
    peer = measurement_far_end(site, node.name)
    assert peer is not None
    return run.lines(peer.name)


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


async def pause_counters(ctx: StepContext) -> dict[str, dict[str, dict[str, int]]]:
    """Per-port, per-priority pause (xoff) counters from ethtool -S."""
    assert ctx.node is not None
    result = {}
    for port in ctx.node.bond.ports:
        stats = await probe(ctx, stats_command(port), "ethtool-s")
        if stats.ok:
            result[port] = {p: {"rx": v.rx, "tx": v.tx} for p, v in stats.fact.prio_pause.items()}
    return result


# DCQCN's counters on an irdma device (ib_core hw_counters; seed 004 section 3: PFC, ECN,
# CNP and drop counters rising together explain a shaky RoCE path).
CONGESTION_COUNTERS = ("cnpSent", "cnpHandled", "cnpIgnored", "RxECNMrkd")
# ice's port-level drop and error counters in `ethtool -S` (../shared/fixtures/ethtool-s/01.txt:
# rx_dropped.nic, rx_crc_errors.nic, rx_length_errors.nic): packets a lossless class lost.
LOSS_COUNTERS = ("rx_dropped.nic", "rx_crc_errors.nic", "rx_length_errors.nic")


def hw_counter_command(device: str) -> list[str]:
    """The congestion counters of an RDMA device, one ``path:value`` line each."""
    base = f"/sys/class/infiniband/{device}/ports/1/hw_counters"
    return ["grep", "-H", ".", *(f"{base}/{name}" for name in CONGESTION_COUNTERS)]


async def congestion_counters(ctx: StepContext, endpoint: Endpoint) -> dict[str, int]:
    """An end's DCQCN counters now ({} when the device shows none)."""
    counters = await probe(
        ctx, hw_counter_command(endpoint.device), "rdma-hw-counters", on=endpoint.host
    )
    return dict(counters.fact.counters) if counters.ok else {}


async def loss_counters(ctx: StepContext) -> dict[str, int]:
    """The node's bond ports' drop and error counters, summed by name."""
    assert ctx.node is not None
    total: dict[str, int] = dict.fromkeys(LOSS_COUNTERS, 0)
    for port in ctx.node.bond.ports:
        stats = await probe(ctx, stats_command(port), "ethtool-s")
        if stats.ok:
            for name in LOSS_COUNTERS:
                total[name] += stats.fact.counters.get(name, 0)
    return total


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after}


def pause_counter_lines(node: Node, note: str = "per-priority pause counters") -> list[str]:
    return [shown(stats_command(port), note) for port in node.bond.ports]
