"""Every perftest command line the wizard writes is one perftest accepts.

The lab's perftest parser follows perftest's own (src/perftest_parameters.c: the getopt
string, the long option table, and the per-test refusals such as ``-q`` on latency tests),
so a line perftest would refuse fails here, not on the operator's node.
"""

from __future__ import annotations

import shlex

import pytest

from simulator.perf import PERFTEST, PerftestArgs, PerftestUsageError
from steps import build_plan
from tests.conftest import MINIMAL_SITE
from wizard.site import parse_site


def plan_lines(site_text: str, tools) -> list[list[str]]:
    """Every runbook line of the plan that runs one of ``tools`` (after ``timeout N``), as
    argv; the runbook's GID placeholder stands for a discovered index."""
    site = parse_site(site_text)
    found = []
    for step in build_plan().steps():
        for node in site.nodes:
            for line in step.commands(site, node):
                try:
                    argv = shlex.split(line, comments=True)
                except ValueError:
                    continue
                while argv[:1] == ["timeout"]:
                    argv = argv[2:]
                if argv and argv[0] in tools:
                    found.append([{"<gid-index>": "3"}.get(word, word) for word in argv])
    return found


def perftest_lines(site_text: str) -> list[list[str]]:
    return plan_lines(site_text, PERFTEST)


def pod_perftest_lines(site_text: str) -> list[list[str]]:
    """The perftest clients of the exported pods (the CUDA perftest), as they exec: the
    pod's script finds the device and GID index and passes them first."""
    import yaml

    from steps.nccl.steps import FIND_DEVICE_AND_GID

    site = parse_site(site_text)
    found = []
    for step in build_plan().steps():
        for node in site.nodes:
            for artifact in step.artifacts(site, node):
                if not artifact.path.endswith("-pod.yaml"):
                    continue
                for container in yaml.safe_load(artifact.content)["spec"]["containers"]:
                    argv = container["command"]
                    if argv[:3] == ["sh", "-c", FIND_DEVICE_AND_GID]:
                        argv = [argv[4], "-d", "irdma0", "-x", "3", *argv[5:]]
                    if argv[0] in PERFTEST:
                        found.append(argv)
    return found


def test_the_plan_runs_perftest_in_many_forms():
    lines = perftest_lines(MINIMAL_SITE)
    tools = {argv[0] for argv in lines}
    assert {"ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_send_lat"} <= tools
    pods = pod_perftest_lines(MINIMAL_SITE)
    assert any("--use_cuda_dmabuf" in argv for argv in pods)
    assert any("--cpu_util" in argv and "-D" in argv for argv in lines)


def test_every_pod_perftest_line_parses_as_perftest_would():
    for argv in pod_perftest_lines(MINIMAL_SITE):
        PerftestArgs.parse(argv)


def test_every_perftest_line_parses_as_perftest_would():
    for argv in perftest_lines(MINIMAL_SITE):
        try:
            PerftestArgs.parse(argv)
        except PerftestUsageError as exc:
            pytest.fail(f"perftest refuses `{shlex.join(argv)}`: {exc}")


def test_latency_tests_get_no_qp_count():
    for argv in perftest_lines(MINIMAL_SITE):
        if argv[0].endswith("_lat"):
            assert "-q" not in argv, shlex.join(argv)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["ib_send_lat", "-q", "1", "-d", "irdma0"], "Multiple QPs only available on bw tests"),
        (["ib_write_lat", "-b"], "Bidirectional is only available in BW test"),
        (["ib_write_bw", "--no_such_option"], "unrecognized option '--no_such_option'"),
        (["ib_write_bw", "-Y"], "invalid option -- 'Y'"),
        (["ib_write_bw", "-q"], "option requires an argument -- 'q'"),
        (["ib_write_bw", "-q", "four"], "Invalid value for qp"),
    ],
)
def test_the_lab_refuses_what_perftest_refuses(argv, message):
    with pytest.raises(PerftestUsageError, match=message):
        PerftestArgs.parse(argv)


def test_the_lab_takes_what_perftest_takes():
    args = PerftestArgs.parse(
        ["ib_write_bw", "-d", "irdma0", "-x3", "-q", "4", "--use_cuda=0", "--use_cuda_dmabuf",
         "-R", "-T", "96", "--report_gbits", "192.168.50.100"]
    )  # fmt: skip
    assert (args.device, args.gid, args.qps, args.cuda, args.dmabuf) == ("irdma0", 3, 4, 0, True)
    assert (args.rdma_cm, args.tos, args.gbits, args.server) == (True, 96, True, "192.168.50.100")


def iperf3_lines(site_text: str) -> list[list[str]]:
    return plan_lines(site_text, ("iperf3",))


def test_every_iperf3_line_parses_as_iperf3_would():
    from simulator.perf import check_iperf3_args

    lines = iperf3_lines(MINIMAL_SITE)
    assert any("-s" in a for a in lines) and any("-c" in a for a in lines)
    for argv in lines:
        assert check_iperf3_args(argv) is None, shlex.join(argv)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["iperf3", "-s", "-P", "8"], "client only"),
        (["iperf3", "-c", "10.0.0.1", "-1"], "server only"),
        (["iperf3", "-p", "5201"], "must either be a client"),
        (["iperf3", "-c", "h", "-q"], "invalid option -- 'q'"),
        (["iperf3", "-c"], "option requires an argument -- 'c'"),
    ],
)
def test_the_lab_refuses_what_iperf3_refuses(argv, message):
    from simulator.perf import check_iperf3_args

    assert message in (check_iperf3_args(argv) or "")


def test_every_bandwidth_client_against_a_production_peer_is_rate_limited():
    """MINIMAL_SITE's peer is production (the default): every perftest bandwidth client of
    the runbook and of the exported pods carries the software rate limiter, every iperf3
    client -b, and the lab's perftest (perftest's own option table) takes them."""
    site = parse_site(MINIMAL_SITE)
    clients = [
        argv
        for argv in perftest_lines(MINIMAL_SITE) + pod_perftest_lines(MINIMAL_SITE)
        if argv[0].endswith("_bw") and not argv[-1].startswith("-") and "." in argv[-1]
    ]
    assert len(clients) > 10
    for argv in clients:
        parsed = PerftestArgs.parse(argv)
        assert "--rate_limit_type=SW" in argv and "--rate_units=g" in argv, argv
        # perftest's SW limiter paces the process, not each QP (perftest_resources.c
        # run_iter_bw): the rate is the whole cap whatever -q (half of it only beside the
        # concurrent iperf3 of T09), never the cap split over the QPs.
        cap = site.aistor.load_rate_gbps
        assert parsed.rate_limit in (cap, cap / 2), argv
    assert sum(PerftestArgs.parse(a).rate_limit == site.aistor.load_rate_gbps for a in clients) > 10
    iperf3 = [a for a in plan_lines(MINIMAL_SITE, {"iperf3"}) if "-c" in a]
    assert iperf3 and all("-b" in a for a in iperf3)
    spare = MINIMAL_SITE.replace(
        "rdma_ip: 192.168.50.100}", "rdma_ip: 192.168.50.100, production: false}"
    )
    assert spare != MINIMAL_SITE
    assert not any(w.startswith("--rate_limit") for argv in perftest_lines(spare) for w in argv)
