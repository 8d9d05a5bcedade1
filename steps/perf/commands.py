"""The command lines of a measurement: a perftest or iperf3 server on the far end, its
client on the node and the server's cleanup, with ports that never clash between nodes
and tests; and their runbook lines."""

from __future__ import annotations

from steps.perf.endpoints import planned_endpoints
from steps.perf.model import _TESTS, SERVER_TIMEOUT_S, Endpoint, ServerRun
from wizard.plan import capped_load_seconds, load_rate_gbps, measurement_far_end
from wizard.site import Node, Site


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


def _run_seconds(extra: list[str]) -> int:
    """How long a run may take: perftest's -D (duration mode) on top of the usual limit."""
    if "-D" in extra and extra.index("-D") + 1 < len(extra):
        return SERVER_TIMEOUT_S + int(extra[extra.index("-D") + 1])
    return SERVER_TIMEOUT_S


def _capped(site: Site, target: str, extra: list[str]) -> list[str]:
    """``extra`` with perftest's -D (duration mode) capped at aistor.load_max_seconds when
    the far end is a production AIStor peer."""
    if "-D" in extra and extra.index("-D") + 1 < len(extra):
        at = extra.index("-D") + 1
        seconds = int(extra[at]) if extra[at].isdigit() else None
        if seconds is not None:
            extra = [*extra[:at], str(capped_load_seconds(site, target, seconds)), *extra[at + 1 :]]
    return extra


def rate_cap_gbps(site: Site, target: str, test: str, share: float = 1.0) -> float | None:
    """The rate a perftest run from ``target`` is limited to (Gb/s), or None at line rate:
    ``share`` of aistor.load_rate_gbps for a bandwidth test against a production peer (a
    share below 1 when other load runs at the same time, T09)."""
    rate = load_rate_gbps(site, target)
    if rate is None or not test.endswith("_bw"):
        return None
    return rate * share


def rate_limit_args(site: Site, target: str, test: str, qps: int, share: float = 1.0) -> list[str]:
    """perftest's software rate limiter on a bandwidth test against a production AIStor
    peer (perftest usage text: ``--rate_limit=<rate>`` "Set the maximum rate of sent
    packages. default unit is [Gbps]", ``--rate_units=<units> [Mgp]``,
    ``--rate_limit_type=<type> [HW/SW/PP]``). SW, because the HW and PP limiters are QP rate
    limits of the NIC (ibv_modify_qp_rate_limit), which irdma does not offer. The rate is
    passed whole, whatever ``qps``: the SW limiter paces the process, not each QP
    (perftest_resources.c ``run_iter_bw``: one ``gap_deadline``/``is_sending_burst``/
    ``burst_iter`` shared by the loop over ``num_of_qps``, ``rate_limit_pps`` computed once
    from ``rate_limit``), so the test as a whole carries at most aistor.load_rate_gbps."""
    del qps  # the limiter is per process (see above): the QP count does not change the rate
    rate = rate_cap_gbps(site, target, test, share)
    if rate is None:
        return []
    return [f"--rate_limit={rate:g}", "--rate_units=g", "--rate_limit_type=SW"]


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
    share: float = 1.0,
) -> ServerRun:
    """The commands of one perftest pair (``perftest_pair`` runs them); ``share``: the part
    of the production peer's rate cap this run may take (rate_cap_gbps)."""
    extra = _capped(site, target, list(extra or []))
    if not test.endswith("_lat"):
        extra.append("--report_gbits")
    client_extra = [*(client_extra or []), *rate_limit_args(site, target, test, qps, share)]
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
    share: float = 1.0,
) -> list[str]:
    """The runbook lines of one perftest pair."""
    client, server = planned_endpoints(site, node)
    if server is None:
        return ["# no AIStor peer in the site: no perftest server"]
    run = perftest_run(
        site, node.name, test, client, server, qps=qps, extra=extra, client_extra=client_extra,
        share=share,
    )  # fmt: skip
    return run.lines(server.host)


# The QP sweep runs for a set time with CPU use reported (seed 000 section 21: bandwidth,
# latency, CPU and packet loss per QP count). perftest's --cpu_util works only in duration
# mode (src/perftest_parameters.c: "CPU Utilization works only with Duration mode.") and adds
# a CPU_Util[%] column; -D goes to both ends, --cpu_util to the client that reports.
SWEEP_CLIENT_EXTRA = ["--cpu_util"]


def sweep_extra(site: Site) -> list[str]:
    return ["-D", str(site.measurements.duration_s)]


def iperf3_run(
    site: Site, target: str, *, reverse: bool = False, share: float = 1.0
) -> ServerRun | None:
    """The commands of one iperf3 pair over the bond (None without an AIStor peer);
    ``share``: the part of the production peer's rate cap this run may take."""
    peer = measurement_far_end(site, target)
    if peer is None:
        return None
    m = site.measurements
    port = m.iperf3_port + next((i for i, n in enumerate(site.nodes) if n.name == target), 0)
    server = ["iperf3", "-s", "-1", "-p", str(port)]
    # Against a production AIStor peer: the run capped at aistor.load_max_seconds, and the
    # streams at aistor.load_rate_gbps together. iperf3's -b applies to each stream
    # ("If there are multiple streams (-P flag), the throughput limit is applied separately
    # to each stream", iperf3(1)), so each gets its share, in Mbit/s.
    seconds = capped_load_seconds(site, target, m.duration_s)
    rate = load_rate_gbps(site, target)
    bitrate = (
        ["-b", f"{max(1, int(rate * share * 1000 / m.tcp_streams))}M"] if rate is not None else []
    )
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
            str(seconds),
            *bitrate,
            "-J",
            *(["-R"] if reverse else []),
        ],
        ["pkill", "-f", " ".join(server)],
    )


def iperf3_lines(site: Site, node: Node, *, reverse: bool = False, share: float = 1.0) -> list[str]:
    run = iperf3_run(site, node.name, reverse=reverse, share=share)
    if run is None:
        return ["# no AIStor peer in the site: no iperf3 server"]
    peer = measurement_far_end(site, node.name)
    assert peer is not None
    return run.lines(peer.name)
