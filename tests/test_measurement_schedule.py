"""Fleet measurements in disjoint waves: as many at once as there are far ends to measure
against, never two runs on one far end (its link would be shared and the numbers halved)."""

from __future__ import annotations

import io

import yaml

from frontend.headless import HeadlessFrontEnd
from steps import build_plan
from tests.conftest import fleet_site
from wizard.plan import describe_waves, measurement_far_end, measurement_peer, measurement_waves
from wizard.site import parse_site


def site_with(nodes: int, peers: int):
    data = yaml.safe_load(fleet_site(nodes))
    data["aistor"] = {
        "peers": [
            {"name": f"aistor-{i}", "host": f"10.0.1.{i}", "rdma_ip": f"192.168.50.{100 + i}"}
            for i in range(1, peers + 1)
        ]
    }
    return parse_site(yaml.safe_dump(data))


def step(step_id: str):
    return next(s for s in build_plan().steps() if s.id == step_id)


def waves_of(step_id: str, site):
    measured = step(step_id)
    return measured, measurement_waves(
        [n.name for n in site.nodes], lambda t: measured.measured_with(site, t)
    )


def test_no_wave_shares_a_peer_and_every_node_runs_once():
    site = site_with(64, 8)
    _, waves = waves_of("host-rdma.perftest", site)
    assert len(waves) == 8 and all(len(w) == 8 for w in waves)
    assert sorted(t for w in waves for t in w) == sorted(n.name for n in site.nodes)
    for wave in waves:
        peers = [measurement_peer(site, t).name for t in wave]
        assert len(set(peers)) == len(peers)


def test_one_peer_means_turns():
    site = site_with(5, 1)
    _, waves = waves_of("host-rdma.perftest", site)
    assert waves == [[n.name] for n in site.nodes]


def test_nccl_pairs_take_two_waves_of_disjoint_nodes():
    for count in (8, 7):
        site = site_with(count, 1)
        measured, waves = waves_of("nccl.all-reduce", site)
        assert len(waves) <= 3
        for wave in waves:
            held = [r for t in wave for r in measured.measured_with(site, t)]
            assert len(held) == len(set(held)), wave


def test_the_aistor_service_benchmark_stays_one_at_a_time():
    site = site_with(6, 3)
    _, waves = waves_of("aistor.tcp", site)
    assert all(len(w) == 1 for w in waves)


def test_the_schedule_is_described_before_it_runs():
    site = site_with(6, 3)
    measured, waves = waves_of("host-rdma.perftest", site)
    text = describe_waves(measured, site, waves)
    assert text.startswith("2 wave(s), up to 3 at once")
    assert "gpu-01->aistor-1, gpu-02->aistor-2, gpu-03->aistor-3" in text


async def test_a_fleet_measures_against_each_peer_in_parallel(tmp_path):
    """The lab with four nodes and two peers: each peer serves its own two nodes, and the
    operator sees the schedule first."""
    from frontend.runner import run_engine
    from simulator.lab import Lab
    from wizard.site import load_site

    plan = build_plan()
    only = [s.id for p in plan.phases if p.id in ("irdma", "host-rdma") for s in p.steps]
    out = io.StringIO()
    async with Lab(tmp_path / "lab", nodes=4, peers=2) as lab:
        outcome = await run_engine(
            load_site(lab.site_path), plan, tmp_path / "state",
            HeadlessFrontEnd(yes=True, out=out), only=only,
        )  # fmt: skip
        served = {
            name: [c for c in host.commands if "ib_write_bw" in c and "timeout" in c]
            for name, host in lab.hosts.items()
            if host.role == "peer"
        }
    assert "host-rdma.perftest: 2 wave(s), up to 2 at once" in out.getvalue()
    assert served["aistor-01"] and served["aistor-02"]
    assert not any("failed" in str(s) for s in outcome.summary.results.values())


def with_pairs(site):
    return site.model_copy(
        update={"measurements": site.measurements.model_copy(update={"pair_nodes": True})}
    )


def test_paired_nodes_measure_each_other_in_two_waves():
    site = with_pairs(site_with(64, 1))
    _, waves = waves_of("host-rdma.perftest", site)
    assert len(waves) == 2 and all(len(w) == 32 for w in waves)
    far = measurement_far_end(site, "gpu-01")
    assert (far.name, far.is_node) == ("gpu-02", True)
    assert measurement_far_end(site, "gpu-02").name == "gpu-01"


def test_an_odd_last_node_pairs_with_the_first_in_a_wave_of_its_own():
    site = with_pairs(site_with(5, 1))
    _, waves = waves_of("host-rdma.perftest", site)
    assert measurement_far_end(site, "gpu-05").name == "gpu-01"
    assert len(waves) == 3 and ["gpu-05"] in waves


async def test_paired_nodes_run_their_servers_on_each_other(tmp_path):
    from frontend.runner import run_engine
    from simulator.lab import Lab
    from wizard.site import load_site

    plan = build_plan()
    only = [s.id for p in plan.phases if p.id in ("irdma", "host-rdma") for s in p.steps]
    out = io.StringIO()
    async with Lab(tmp_path / "lab", nodes=2) as lab:
        site = with_pairs(load_site(lab.site_path))
        outcome = await run_engine(
            site, plan, tmp_path / "state", HeadlessFrontEnd(yes=True, out=out), only=only
        )
        servers = {
            name: [c for c in host.commands if c.startswith("timeout") and "ib_write_bw" in c]
            for name, host in lab.hosts.items()
        }
    assert servers["gpu-b300-01"] and servers["gpu-b300-02"] and not servers["aistor-01"]
    assert "2 wave(s), up to 1 at once" in out.getvalue()  # each pair measures both ways
    assert all(state.value == "done" for state in outcome.summary.results.values())


def test_every_measurement_steps_schedule_can_be_described():
    """Each step's resources (node, peer, NCCL pair, the AIStor service) read back in the
    schedule line, whatever their form."""
    site = site_with(3, 2)
    described = {}
    for measured in build_plan().steps():
        if measured.one_node_at_a_time:
            waves = measurement_waves([n.name for n in site.nodes],
                                      lambda t, m=measured: m.measured_with(site, t))  # fmt: skip
            described[measured.id] = describe_waves(measured, site, waves)
    assert "gpu-01->AIStor" in described["aistor.tcp"]
    assert "gpu-01->aistor-1" in described["host-rdma.perftest"]
    assert "gpu-01->gpu-02" in described["nccl.all-reduce"]
