"""The command lines of a measurement: a perftest or iperf3 server on the far end, its
client on the node and the server's cleanup, with ports that never clash between nodes
and tests; and their runbook lines."""

from __future__ import annotations

from steps.perf.endpoints import planned_endpoints
from steps.perf.model import _TESTS, SERVER_TIMEOUT_S, Endpoint, ServerRun
from wizard.plan import measurement_far_end
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


# The QP sweep runs for a set time with CPU use reported (seed 000 section 21: bandwidth,
# latency, CPU and packet loss per QP count). perftest's --cpu_util works only in duration
# mode (src/perftest_parameters.c: "CPU Utilization works only with Duration mode.") and adds
# a CPU_Util[%] column; -D goes to both ends, --cpu_util to the client that reports.
SWEEP_CLIENT_EXTRA = ["--cpu_util"]


def sweep_extra(site: Site) -> list[str]:
    return ["-D", str(site.measurements.duration_s)]


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
