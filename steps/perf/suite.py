"""The RDMA measurement suite the baseline, host RDMA and QoS phases run: write, read and
send bandwidth, send latency and a write QP sweep, with the counters around it, recorded
under one series; and its runbook lines."""

from __future__ import annotations

from steps.common import bonding_command, on_host, shown
from steps.perf.commands import SWEEP_CLIENT_EXTRA, perftest_lines, rate_cap_gbps, sweep_extra
from steps.perf.counters import (
    _delta,
    congestion_counters,
    hw_counter_command,
    line_rate_gbps,
    loss_counters,
    pause_counter_lines,
    pause_counters,
)
from steps.perf.endpoints import endpoint_lines, endpoints
from steps.perf.model import BW_QPS, BW_TESTS, LAT_QPS, LAT_TEST, QP_SWEEP, Endpoint
from steps.perf.runs import LoadGuard, perftest_pair
from steps.perf.verdict import judge_bandwidth, report_congestion
from wizard.facts import ParseError, parse
from wizard.facts.rdma import parse_ibv_devinfo
from wizard.model import Severity
from wizard.plan import StepContext, measurement_far_end
from wizard.probe import Report
from wizard.site import Node, Site
from wizard.transports.base import read_file_command


def suite_extra(site: Site, qos: bool) -> list[str]:
    """With QoS: through the connection manager (-R) with the RoCE ToS (-T)."""
    return ["-R", "-T", str(site.qos.roce_tos)] if qos else []


# rdma_cm without -T: the connection takes the RDMA device's default_roce_tos (configfs
# /sys/kernel/config/rdma_cm/<dev>/ports/1/default_roce_tos; drivers/infiniband/core/cma.c),
# as AIStor's clients connect. The -T runs set the ToS themselves and prove nothing about it.
DEFAULT_TOS_EXTRA = ["-R"]


def default_tos_lines(site: Site, node: Node) -> list[str]:
    """The runbook lines of ``default_tos_run``."""
    return [
        *pause_counter_lines(node, "pause counters before the default-ToS run"),
        *perftest_lines(site, node, "ib_write_bw", qps=BW_QPS, extra=DEFAULT_TOS_EXTRA),
        *pause_counter_lines(node, "and after it: priority "
                             f"{site.qos.priority} must have paused, as with -T {site.qos.roce_tos}"),
        shown(read_file_command(default_tos_path("<rdma-dev>")),
              f"right after: the default ToS must still read {site.qos.roce_tos} (this decides)"),
    ]  # fmt: skip


def default_tos_path(device: str) -> str:
    """rdma_cm's per-device default ToS in configfs (drivers/infiniband/core/cma_configfs.c)."""
    return f"/sys/kernel/config/rdma_cm/{device}/ports/1/default_roce_tos"


def iboe_mtu(netdev_mtu: int) -> int:
    """The RoCE MTU a netdev MTU allows (include/rdma/ib_addr.h ``iboe_get_mtu``: the
    largest IB MTU within the netdev MTU less 100 bytes of RoCEv2 headers)."""
    payload = netdev_mtu - 100
    return next((m for m in (4096, 2048, 1024, 512) if payload >= m), 256)


def bond_mtu_path(node: Node) -> str:
    return f"/sys/class/net/{node.bond.name}/mtu"


def mtu_lines(site: Site, node: Node) -> list[str]:
    """The runbook lines of ``check_mtu`` (ibv_devinfo -v of both ends is in endpoint_lines)."""
    return [
        shown(read_file_command(bond_mtu_path(node)), "the bond's MTU: the RoCE MTU follows it")
    ]


async def _active_mtu(ctx: StepContext, endpoint: Endpoint) -> int | None:
    result = await ctx.run(["ibv_devinfo", "-v", "-d", endpoint.device], on=endpoint.host)
    try:
        info = parse(parse_ibv_devinfo, result.stdout)
    except ParseError:
        return None
    ports = [p for d in info.devices if d.hca_id == endpoint.device for p in d.ports]
    return ports[0].active_mtu if ports else None


async def check_mtu(ctx: StepContext, report: Report, client: Endpoint, server: Endpoint) -> None:
    """MTU end to end (T04): the RoCE active_mtu of both ends equal, and what the node's bond
    MTU allows. A far end at a smaller MTU makes every QP settle on the smaller one (the
    connection takes the minimum of both ports), so jumbo frames are not end to end."""
    assert ctx.node is not None
    mine, theirs = await _active_mtu(ctx, client), await _active_mtu(ctx, server)
    text = await ctx.read_file(bond_mtu_path(ctx.node))
    bond = int(text.strip()) if text and text.strip().isdigit() else None
    expected = iboe_mtu(bond) if bond else None
    if mine is None or theirs is None:
        report.warn("rdma-mtu", f"active_mtu not readable (node {mine}, far end {theirs})",
                    "read `ibv_devinfo -v` on both ends", gate="T04")  # fmt: skip
        return
    ctx.record("rdma.active_mtu.node", float(mine), "bytes")
    ctx.record("rdma.active_mtu.far_end", float(theirs), "bytes")
    where = f"{client.host} {client.device}: {mine}, {server.host} {server.device}: {theirs}"
    if mine != theirs:
        report.fail(
            "rdma-mtu",
            f"RoCE active_mtu differs between the ends ({where}): the path is not at one MTU",
            "set the same MTU (9000 for 4096-byte RoCE frames) on both bonds and every switch "
            "port and ISL between them (cluster/switch/intent.md)",
            gate="T04",
        )
    elif expected is not None and mine != expected:
        report.warn(
            "rdma-mtu",
            f"RoCE active_mtu {mine} on both ends, but {ctx.node.bond.name} MTU {bond} allows "
            f"{expected} ({where})",
            "check the RDMA device follows the bond's MTU (ip link set dev bond1 mtu ...)",
            gate="T04",
        )
    else:
        report.ok("rdma-mtu", f"RoCE active_mtu {mine} on both ends, as {ctx.node.bond.name} MTU "
                  f"{bond} allows ({where})", gate="T04")  # fmt: skip


def suite_lines(site: Site, node: Node, *, qos: bool) -> list[str]:
    """The runbook lines of ``rdma_suite``, in the order it runs them."""
    extra = suite_extra(site, qos)
    far = measurement_far_end(site, node.name)
    counters = [shown(hw_counter_command("<rdma-dev>"), "CNP / ECN counters, before and after")]
    if far is not None:
        counters.append(shown(hw_counter_command(far.rdma_device or "<rdma-dev>"),
                              on_host(far.name, "CNP / ECN counters, before and after")))  # fmt: skip
    mtu = [] if qos else mtu_lines(site, node)  # once, in the baseline
    lines = [*endpoint_lines(site, node), *mtu, shown(bonding_command(node), "line rate"),
             *counters]  # fmt: skip
    for test in BW_TESTS:
        lines += perftest_lines(site, node, test, qps=BW_QPS, extra=extra)
    lines += perftest_lines(site, node, LAT_TEST, qps=LAT_QPS, extra=extra)
    for qps in QP_SWEEP:
        lines += pause_counter_lines(node, "drop and error counters, before and after")
        lines += perftest_lines(site, node, "ib_write_bw", qps=qps, extra=[*extra, *sweep_extra(site)],
                                client_extra=SWEEP_CLIENT_EXTRA)  # fmt: skip
    if qos:
        lines += default_tos_lines(site, node)
    return lines


def _prio_pauses(before: dict, after: dict, prio: str) -> int:
    """XOFF frames received (pause_rx) on ``prio`` over the node's ports between two
    readings: the switch pausing the node's sending, which is what a congested lossless
    class does to a writer. Sent pauses (tx) are the node's own receive side; not counted."""
    zero = {"rx": 0, "tx": 0}
    return sum(
        after[port].get(prio, zero)["rx"] - before.get(port, {}).get(prio, zero)["rx"]
        for port in after
    )


def judge_default_tos(
    qos, path: str, read_back: str | None, paused: int, explicit: int, cap: float | None = None
) -> tuple[Severity, str, str]:
    """T08's verdict: (severity, message, remediation).

    The configfs value read back right after the run decides: wrong is a FAIL (rdma_cm
    traffic without -T, AIStor's, leaves the lossless priority). Pause frames are evidence,
    not proof (they count a whole priority on the port, any traffic's, and need congestion):
    with a right value they give a PASS when the default-ToS run paused the priority, else a
    WARN; an unreadable value is a WARN whatever the counters say. ``explicit``: the pauses
    of the same-shaped ib_write_bw run with -T. ``cap``: the rate limit of both runs against
    a production peer, a load that congests nothing, so missing pauses prove nothing (SKIP)."""
    prio = qos.priority
    value = None if read_back is None else read_back.strip()
    if value is not None and value != str(qos.roce_tos):
        return (
            Severity.FAIL,
            f"{path} reads {value or '(empty)'} right after the run, not {qos.roce_tos}: rdma_cm "
            f"connections without -T (AIStor's) leave priority {prio}"
            + (f" (with -T {qos.roce_tos} the load paused priority {prio} ({explicit} frames), "
               f"with the default ToS {paused})" if explicit else ""),
            f"write {qos.roce_tos} to {path} (qos.apply) and find what re-registered the device "
            "since (a bond re-form or PF reset zeroes it; the boot unit only runs at boot)",
        )  # fmt: skip
    proof = f" ({path} reads {value})" if value is not None else ""
    if value is not None and paused > 0:
        return (Severity.PASS, f"RoCE through rdma_cm without -T (the default ToS, as AIStor's "
                f"clients connect) reached priority {prio}: {paused} pause frames{proof}", "")  # fmt: skip
    switch = f"read the switch's per-DSCP / per-priority counters for DSCP {qos.dscp} during an AIStor load"
    if value is None:
        return (Severity.WARN, f"{path} could not be read back after the run; the pause "
                f"counters ({paused} frames on priority {prio} without -T, {explicit} with) are "
                "evidence, not proof", f"read {path} on the node by hand; {switch}")  # fmt: skip
    if cap is not None:
        return (Severity.SKIP, f"the default ToS is right{proof}; the pause counters "
                f"({paused} frames without -T, {explicit} with) are not comparable: both runs "
                f"were capped at {cap:g} Gb/s on the production peer, too little to congest "
                "the path", switch)  # fmt: skip
    if explicit > 0:
        return (Severity.WARN, f"the default ToS is right{proof}, but the same ib_write_bw "
                f"paused priority {prio} {explicit} times with -T {qos.roce_tos} and not without "
                "it: congestion differed between the runs, or the switch classifies differently",
                switch)  # fmt: skip
    return (Severity.WARN, f"the default ToS is right{proof}, but neither the -T run nor the "
            f"default-ToS run paused priority {prio}: the load did not congest the path, so the "
            "default ToS is not proven end to end", switch)  # fmt: skip


async def default_tos_run(
    ctx: StepContext,
    report: Report,
    client: Endpoint,
    server: Endpoint,
    explicit: int,
    cap: float | None = None,
    guard: LoadGuard | None = None,
) -> None:
    """T08: RoCE that takes the default ToS reaches the lossless priority.

    One ib_write_bw through rdma_cm without -T, shaped like the -T ib_write_bw before it
    (``explicit``: that run's XOFF frames received), then the device's default_roce_tos read
    back from configfs (judge_default_tos weighs them)."""
    qos = ctx.site.qos
    prio = str(qos.priority)
    before = await pause_counters(ctx)
    fact, problem = await perftest_pair(
        ctx, "ib_write_bw", client, server, qps=BW_QPS, extra=DEFAULT_TOS_EXTRA, guard=guard
    )
    paused = _prio_pauses(before, await pause_counters(ctx), prio)
    ctx.record("qos.default_tos.pause", float(paused), "frames", priority=prio)
    path = default_tos_path(client.device)
    read = await ctx.run(read_file_command(path))
    read_back = read.stdout if read.exit_status == 0 else None
    if fact is None or problem:
        report.fail("default-tos", f"ib_write_bw -R with the default ToS failed: {problem}",
                    "see the perftest output", gate="T08")  # fmt: skip
        return
    severity, message, fix = judge_default_tos(qos, path, read_back, paused, explicit, cap)
    report.add("default-tos", severity, message, fix, gate="T08")


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
    if not qos:
        await check_mtu(ctx, report, client, server)
    extra = suite_extra(ctx.site, qos)
    explicit = 0  # the -T ib_write_bw's XOFF frames received, for T08's same-shaped run
    port_rate, bond_rate = await line_rate_gbps(ctx)
    if port_rate:
        ctx.record(f"{series}.line_rate_port", port_rate, "Gb/s")
    if bond_rate:
        ctx.record(f"{series}.line_rate_bond", bond_rate, "Gb/s")
    minimum = ctx.site.measurements.min_line_rate_percent
    cap = rate_cap_gbps(ctx.site, ctx.target, "ib_write_bw")
    if cap is not None:
        ctx.record(f"{series}.capped_at", cap, "Gb/s")
    guard = LoadGuard()  # a run that breaks the cap stops the suite's further load runs
    congestion_before = {
        "node": await congestion_counters(ctx, client),
        "far end": await congestion_counters(ctx, server),
    }
    functional = True
    for test in BW_TESTS:
        paired = qos and test == "ib_write_bw"
        before = await pause_counters(ctx) if paired else {}
        fact, problem = await perftest_pair(
            ctx, test, client, server, qps=BW_QPS, extra=extra, guard=guard
        )
        if paired:
            explicit = _prio_pauses(before, await pause_counters(ctx), str(ctx.site.qos.priority))
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
            report, f"{series}-{test}", f"{test} ({BW_QPS} QPs)", fact, port_rate, minimum, "T06",
            cap=cap,
        )  # fmt: skip
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
            client_extra=SWEEP_CLIENT_EXTRA, guard=guard,
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
        elif cap is not None:
            # perftest's SW limiter paces the process: every QP count runs at the same cap,
            # so the sweep says nothing about how the path scales with QPs.
            report.skip(f"{series}-qp-sweep", f"ib_write_bw {text} Gb/s, every run capped at "
                        f"{cap:g} Gb/s on the production peer: the QP counts are not "
                        "comparable (no loss on the node's ports)", gate="T07")  # fmt: skip
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
    if qos:
        await default_tos_run(ctx, report, client, server, explicit, cap, guard)
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
