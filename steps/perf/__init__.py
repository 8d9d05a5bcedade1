"""Benchmark orchestration shared by the measure steps: perftest pairs, iperf3, line rate.

A server runs on the AIStor peer (the far end), the client on the GPU node. The server is
wrapped in ``timeout`` and killed explicitly when the client fails, so no benchmark
process is ever left behind on either host.

A package of one job per module: ``model`` (the tests, limits, an endpoint, a server/client
pair), ``endpoints`` (the RDMA device and GID of each end), ``commands`` (the command lines
of a perftest or iperf3 pair and their runbook lines), ``runs`` (running a pair and
reaping its server), ``counters`` (line rate, pause, drop and DCQCN counters), ``verdict``
(bandwidth and congestion judged) and ``suite`` (the RDMA suite the phases run).
"""

from steps.perf.commands import (
    SWEEP_CLIENT_EXTRA,
    iperf3_lines,
    iperf3_run,
    perftest_lines,
    perftest_run,
    rate_cap_gbps,
    sweep_extra,
)
from steps.perf.counters import (
    CONGESTION_COUNTERS,
    LOSS_COUNTERS,
    congestion_counters,
    hw_counter_command,
    line_rate_gbps,
    loss_counters,
    pause_counter_lines,
    pause_counters,
)
from steps.perf.endpoints import (
    devinfo_command,
    discover,
    endpoint_lines,
    endpoints,
    planned_endpoints,
)
from steps.perf.model import (
    BW_QPS,
    BW_TESTS,
    LAT_QPS,
    LAT_TEST,
    LISTEN_GRACE_S,
    QP_SWEEP,
    SERVER_TIMEOUT_S,
    Endpoint,
    ServerRun,
)
from steps.perf.runs import _stop_server, iperf3_pair, over_cap, perftest_pair
from steps.perf.suite import rdma_suite, suite_extra, suite_lines
from steps.perf.verdict import judge_bandwidth, report_congestion

# SERVER_REAP_S is steps.perf.runs' own: patch it there (``_stop_server`` reads it there).
__all__ = [
    "BW_QPS",
    "BW_TESTS",
    "CONGESTION_COUNTERS",
    "LAT_QPS",
    "LAT_TEST",
    "LISTEN_GRACE_S",
    "LOSS_COUNTERS",
    "QP_SWEEP",
    "SERVER_TIMEOUT_S",
    "SWEEP_CLIENT_EXTRA",
    "Endpoint",
    "ServerRun",
    "_stop_server",
    "congestion_counters",
    "devinfo_command",
    "discover",
    "endpoint_lines",
    "endpoints",
    "hw_counter_command",
    "iperf3_lines",
    "iperf3_pair",
    "iperf3_run",
    "judge_bandwidth",
    "line_rate_gbps",
    "loss_counters",
    "over_cap",
    "pause_counter_lines",
    "pause_counters",
    "perftest_lines",
    "perftest_pair",
    "perftest_run",
    "planned_endpoints",
    "rate_cap_gbps",
    "rdma_suite",
    "report_congestion",
    "suite_extra",
    "suite_lines",
    "sweep_extra",
]
