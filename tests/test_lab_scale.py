"""A lab past the old 250-node cap: valid distinct addresses, a clear refusal past 1000,
and the wizard's costs that grew with the fleet (the site's node index, the checkpoint's
group-commit interval). Speed itself is measured in benchmarks/, not here."""

from __future__ import annotations

import asyncio
import ipaddress
import time

import pytest

from simulator.lab import MAX_NODES, Lab, _gpu_addresses, _peer_addresses
from tests.conftest import run_cli
from wizard.checkpoint import FLUSH_INTERVAL_S, SAVE_SHARE, Checkpoint, read_state
from wizard.model import StepState
from wizard.site import load_site


def test_a_thousand_nodes_and_their_peers_get_valid_distinct_addresses():
    gpus = [_gpu_addresses(i) for i in range(MAX_NODES)]
    peers = [_peer_addresses(i) for i in range(250)]
    every = [a for pair in gpus + peers for a in pair]
    for address in every:
        ipaddress.IPv4Address(address)  # raises on 10.10.0.270
    assert len(set(every)) == len(every)
    assert gpus[0] == ("10.10.0.21", "192.168.50.21")  # small labs keep their addresses


def test_a_lab_past_the_old_cap_starts_and_writes_a_valid_site(tmp_path):
    async def start() -> tuple[int, int]:
        async with Lab(tmp_path / "lab", nodes=260) as lab:
            site = load_site(lab.site_path)  # the site model validates every address
            lines = (lab.directory / "known_hosts").read_text().splitlines()
            return len(site.nodes), len(lines)

    assert asyncio.run(start()) == (260, 261)


@pytest.mark.parametrize("command", ["lab", "demo"])
@pytest.mark.parametrize("nodes", ["0", str(MAX_NODES + 1)])
def test_nodes_outside_the_lab_are_a_usage_error_in_one_line(tmp_path, command, nodes):
    extra = ["--write-site", str(tmp_path / "site.yaml")] if command == "lab" else ["--headless"]
    result = run_cli(command, *extra, "--nodes", nodes)
    assert result.returncode == 2
    assert (
        result.stderr == f"gpu-node-wizard: --nodes {nodes}: the lab serves 1 to 1000 GPU nodes\n"
    )
    assert not (tmp_path / "site.yaml").exists()


def test_the_lab_itself_refuses_a_size_it_cannot_serve(tmp_path):
    with pytest.raises(ValueError, match="1 to 1000 GPU nodes, not 1001"):
        Lab(tmp_path / "lab", nodes=MAX_NODES + 1)


def test_the_node_index_follows_the_list_of_nodes(tmp_path):
    async def site_of_lab():
        async with Lab(tmp_path / "lab", nodes=3) as lab:
            return load_site(lab.site_path)

    site = asyncio.run(site_of_lab())
    assert site.node("gpu-b300-03") is site.nodes[2]
    fewer = site.model_copy(update={"nodes": site.nodes[:1]})
    with pytest.raises(KeyError):
        fewer.node("gpu-b300-03")
    assert fewer.node("gpu-b300-01") is site.nodes[0]


def test_a_slow_state_write_stretches_the_group_commit_interval(tmp_path):
    """A read-only result waits longer for its write when writing the state is costly (a
    big fleet's state), so that writes stay a small share of the run."""

    async def site_of_lab():
        async with Lab(tmp_path / "lab", nodes=1) as lab:
            return load_site(lab.site_path)

    site = asyncio.run(site_of_lab())
    with Checkpoint.open(tmp_path / "state", site) as checkpoint:
        checkpoint.save()
        # As if the last write of the state had taken 0.1 s (a 1000-node state takes more).
        checkpoint._save_seconds = 0.1
        assert checkpoint.flush_interval() == pytest.approx(SAVE_SHARE * 0.1)
        checkpoint._last_save = time.monotonic() - (FLUSH_INTERVAL_S + 0.5)
        checkpoint.set_step("a.check", "gpu-b300-01", StepState.DONE, durable=False)
        assert "a.check" not in read_state(checkpoint.directory)["steps"]  # still waiting
        checkpoint._last_save = time.monotonic() - (SAVE_SHARE * 0.1 + 0.5)
        checkpoint.set_step("b.check", "gpu-b300-01", StepState.DONE, durable=False)
        on_disk = read_state(checkpoint.directory)["steps"]
        assert {"a.check", "b.check"} <= set(on_disk)
