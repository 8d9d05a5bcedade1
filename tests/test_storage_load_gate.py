"""Load on production storage is gated (#30): a measurement that loads a production AIStor
peer runs only after the operator typed the peer's name (headless: --allow-storage-load
PEER, never implied by --yes), and its load is capped at aistor.load_max_seconds."""

from __future__ import annotations

import io

import pytest

from steps import build_plan
from tests.conftest import MINIMAL_SITE
from wizard.engine.results import DecisionRequired
from wizard.events import Answer, DecisionKind, Reply
from wizard.headless import HeadlessFrontEnd
from wizard.lab.lab import Lab
from wizard.plan import capped_load_seconds
from wizard.runner import run_engine
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
