"""A lab past the old 250-node cap: valid distinct addresses, a clear refusal past 1000.
Speed itself is measured in benchmarks/, not here."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from tests.conftest import run_cli
from wizard.lab.lab import MAX_NODES, Lab, _gpu_addresses, _peer_addresses
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
