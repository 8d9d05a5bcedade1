"""Load on production storage is gated (#30): a measurement that loads a production AIStor
peer runs only after the operator typed the peer's name (headless: --allow-storage-load
PEER, never implied by --yes), and its load is capped at aistor.load_max_seconds."""

from __future__ import annotations

import io

import pytest

from frontend.headless import HeadlessFrontEnd
from frontend.runner import run_engine
from simulator.lab import Lab
from steps import build_plan
from tests.conftest import MINIMAL_SITE
from wizard.engine.results import DecisionRequired
from wizard.events import Answer, DecisionKind, Reply
from wizard.plan import capped_load_seconds
from wizard.site import load_site, parse_site

PEER = "aistor-01"
ONLY = ["irdma.verify", "baseline.tcp"]


async def run(tmp_path, frontend, *, production=True):
    async with Lab(tmp_path / "lab") as lab:
        if production:
            text = lab.site_path.read_text()
            assert "production: false" in text
            lab.site_path.write_text(text.replace("production: false", "production: true"))
        outcome = await run_engine(
            load_site(lab.site_path), build_plan(), tmp_path / "state", frontend,
            only=ONLY, ignore_requires=True,
        )  # fmt: skip
        return outcome, lab.hosts[PEER].commands


def iperf3_servers(commands):
    return [c for c in commands if "iperf3" in c and " -s" in c]


async def test_headless_stops_before_loading_a_production_peer_and_names_the_flag(tmp_path):
    frontend = HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO())
    with pytest.raises(DecisionRequired, match=f"--allow-storage-load {PEER}") as raised:
        await run(tmp_path, frontend)
    assert raised.value.decision.kind is DecisionKind.STORAGE_LOAD


async def test_the_named_flag_allows_it(tmp_path):
    frontend = HeadlessFrontEnd(yes=True, allow_storage_load={PEER}, out=io.StringIO())
    outcome, commands = await run(tmp_path, frontend)
    assert outcome.summary.results[("baseline.tcp", "gpu-b300-01")].value == "done", (
        outcome.format()
    )
    assert iperf3_servers(commands)


class Typist(HeadlessFrontEnd):
    """Types another peer's name at the storage gate."""

    async def decide(self, decision):
        if decision.kind is DecisionKind.STORAGE_LOAD:
            return Reply(Answer.PROCEED, typed="aistor-99")
        return await super().decide(decision)


async def test_a_wrong_name_skips_and_loads_nothing(tmp_path):
    outcome, commands = await run(tmp_path, Typist(yes=True, out=io.StringIO()))
    assert outcome.summary.results[("baseline.tcp", "gpu-b300-01")].value == "skipped"
    assert not iperf3_servers(commands)


async def test_a_peer_without_production_storage_is_not_gated(tmp_path):
    outcome, _ = await run(
        tmp_path, HeadlessFrontEnd(yes=True, out=io.StringIO()), production=False
    )
    assert outcome.summary.results[("baseline.tcp", "gpu-b300-01")].value == "done"


def test_load_on_a_production_peer_is_capped():
    entry = "{name: aistor-1, host: 10.0.1.1, rdma_ip: 192.168.50.100}"
    assert entry in MINIMAL_SITE
    site = parse_site(MINIMAL_SITE)
    assert site.aistor.peers[0].production is True  # the default: treat a peer as production
    assert site.aistor.load_max_seconds == 300
    assert capped_load_seconds(site, "gpu-1", 1800) == 300
    assert capped_load_seconds(site, "gpu-1", 60) == 60
    spare = parse_site(MINIMAL_SITE.replace(entry, entry[:-1] + ", production: false}"))
    assert capped_load_seconds(spare, "gpu-1", 1800) == 1800


def _client(run):
    return run.client


def test_storage_load_is_rate_limited_and_capped_against_a_production_peer():
    """perftest's bandwidth clients get the software rate limiter (the whole cap: it paces
    the process, not each QP),
    iperf3 -b per stream and -t, perftest's -D, capped; a spare peer runs at line rate."""
    from steps.perf.commands import iperf3_run, perftest_run
    from steps.perf.model import Endpoint

    entry = "{name: aistor-1, host: 10.0.1.1, rdma_ip: 192.168.50.100}"
    site = parse_site(MINIMAL_SITE.replace("aistor:", "measurements: {duration_s: 900}\naistor:"))
    client = Endpoint("gpu-1", "irdma0", 3, "192.168.50.11")
    server = Endpoint("aistor-1", "irdma0", 3, "192.168.50.100")
    bw = perftest_run(site, "gpu-1", "ib_write_bw", client, server, qps=4, extra=["-D", "1800"])
    assert "--rate_limit=25" in bw.client and "--rate_limit_type=SW" in bw.client
    assert "--rate_units=g" in bw.client
    assert not any(w.startswith("--rate") for w in bw.server)  # the sender is limited
    assert bw.client[bw.client.index("-D") + 1] == "300" == bw.server[bw.server.index("-D") + 1]
    lat = perftest_run(site, "gpu-1", "ib_write_lat", client, server)
    assert not any(w.startswith("--rate") for w in lat.client)
    tcp = iperf3_run(site, "gpu-1")
    assert tcp.client[tcp.client.index("-b") + 1] == "3125M"  # 25 Gb/s over -P 8
    assert tcp.client[tcp.client.index("-t") + 1] == "300"
    spare = parse_site(
        MINIMAL_SITE.replace(entry, entry[:-1] + ", production: false}").replace(
            "aistor:", "measurements: {duration_s: 900}\naistor:"
        )
    )
    free = perftest_run(spare, "gpu-1", "ib_write_bw", client, server, qps=4, extra=["-D", "1800"])
    assert not any(w.startswith("--rate") for w in free.client)
    assert free.client[free.client.index("-D") + 1] == "1800"
    line_rate = iperf3_run(spare, "gpu-1")
    assert (
        "-b" not in line_rate.client and line_rate.client[line_rate.client.index("-t") + 1] == "900"
    )


def test_the_site_sets_the_rate_and_a_bad_one_names_field_value_and_range():
    from wizard.errors import SiteError

    site = parse_site(MINIMAL_SITE.replace("aistor:", "aistor:\n  load_rate_gbps: 10"))
    assert site.aistor.load_rate_gbps == 10
    for bad in ("0", "-5", "1000", "fast"):
        with pytest.raises(SiteError) as raised:
            parse_site(MINIMAL_SITE.replace("aistor:", f"aistor:\n  load_rate_gbps: {bad}"))
        message = str(raised.value)
        assert "aistor.load_rate_gbps" in message and bad in message, message


def test_the_lab_perftest_and_iperf3_obey_the_limit():
    """The lab models the limiters (perftest's SW pacing, iperf3 -b per stream)."""
    import json

    from simulator.host import LabHost
    from simulator.perf import PerftestArgs, client_output, iperf3_bitrate, iperf3_json
    from wizard.facts import parse

    host = LabHost("n", "gpu", "10.0.0.1", "192.168.50.1")
    for qps in (1, 4, 8):
        # perftest's SW limiter paces the process, not each QP (perftest_resources.c
        # run_iter_bw): -q 8 at --rate_limit=25 carries at most 25 Gb/s, not 200.
        args = PerftestArgs.parse(["ib_write_bw", "-q", str(qps), "--rate_limit=25",
                                   "--rate_units=g", "--rate_limit_type=SW", "--report_gbits",
                                   "10.0.0.1"])  # fmt: skip
        assert args.rate_limit == 25
        gbps = parse("perftest", client_output(args, host)).best_bw_gbps
        assert 24 <= gbps <= 25, (qps, gbps)
    rate = iperf3_bitrate(["iperf3", "-c", "x", "-P", "8", "-b", "3125M"])
    assert rate == 3.125e9
    result = json.loads(iperf3_json(8, False, rate))
    assert result["end"]["sum_received"]["bits_per_second"] <= 25e9
