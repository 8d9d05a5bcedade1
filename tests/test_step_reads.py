"""Declared step inputs: every `reads` name exists in the site model, and a change there resets
the steps that declare it, also a cluster-scope step that reads node fields."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from steps import build_plan
from steps.join import KubesprayJoin
from tests.conftest import MINIMAL_SITE, with_nodes
from tests.engine_world import ScriptedFrontEnd, World, WorldCheck
from wizard.checkpoint import Checkpoint, changed_sections
from wizard.engine import Engine
from wizard.plan import CLUSTER, Phase, Plan, Scope
from wizard.site import Node, Site, load_site, parse_site


def allowed_reads() -> set[str]:
    """The names `Step.reads` may use, from the pydantic models: a top-level key of Site (but
    not the node list, which is read through node fields), "node" or "node.<Node field>"."""
    return (
        (set(Site.model_fields) - {"nodes"}) | {"node"} | {f"node.{f}" for f in Node.model_fields}
    )


def test_every_declared_read_names_a_part_of_the_site_model():
    wrong = [
        (step.id, read)
        for step in build_plan().steps()
        for read in step.reads
        if read not in allowed_reads()
    ]
    assert wrong == []


def test_the_check_rejects_a_name_the_model_does_not_have():
    assert "nodes" not in allowed_reads()  # join.kubespray's old, never-matching read
    assert "node.bonds" not in allowed_reads()
    assert {"qos", "cluster", "node", "node.bond", "node.host"} <= allowed_reads()


def invalidated(before: str, after: str) -> set[tuple[str, str]]:
    """What the real plan resets when the site file goes from ``before`` to ``after``."""
    old, new = parse_site(before), parse_site(after)
    changed = changed_sections(old.sections(), new)
    assert changed, "the edit changed nothing"
    return set(build_plan().invalidated(changed, new))


def test_a_new_node_address_resets_the_join():
    moved = MINIMAL_SITE.replace("host: 10.0.0.1", "host: 10.0.0.9")
    reset = invalidated(MINIMAL_SITE, moved)
    assert ("join.kubespray", CLUSTER) in reset
    assert ("preflight.ssh-path", "gpu-1") in reset  # a node step reading node.host
    assert ("qos.apply", "gpu-1") not in reset  # reads no address


def test_an_added_node_resets_the_join_but_no_step_of_the_other_node():
    reset = invalidated(MINIMAL_SITE, with_nodes(2))
    assert ("join.kubespray", CLUSTER) in reset
    assert ("rdma-plugin.install", CLUSTER) in reset  # its config and verify cover every node
    assert not {(s, t) for s, t in reset if t == "gpu-1"}


def test_a_changed_peer_resets_the_steps_that_read_aistor():
    moved = MINIMAL_SITE.replace("rdma_ip: 192.168.50.100", "rdma_ip: 192.168.50.101")
    reset = invalidated(MINIMAL_SITE, moved)
    assert ("baseline.rdma", "gpu-1") in reset
    assert ("join.kubespray", CLUSTER) not in reset


def test_a_node_step_reading_node_fields_ignores_the_other_nodes():
    two = with_nodes(2)
    moved = two.replace("host: 10.0.0.2", "host: 10.0.0.9")
    reset = invalidated(two, moved)
    assert ("preflight.ssh-path", "gpu-2") in reset
    assert ("preflight.ssh-path", "gpu-1") not in reset


# -- the same through the engine: a resumed run resets the join and verifies it again


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path / "world.json")


def join_plan(world: World) -> Plan:
    """A cluster-scope check standing in for join.kubespray, with its real reads."""
    join = WorldCheck("join.kubespray", world, scope=Scope.CLUSTER, reads=KubesprayJoin.reads)
    return Plan((Phase("join", 7, "Join", "join", (join,)),))


def run(site_path: Path, state_dir: Path, world: World):
    site = load_site(site_path)
    with Checkpoint.open(state_dir, site) as checkpoint:
        engine = Engine(site, join_plan(world), checkpoint, ScriptedFrontEnd())
        return asyncio.run(engine.run())


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda text: text.replace("host: 10.0.0.1", "host: 10.0.0.9"), id="host"),
        pytest.param(lambda text: with_nodes(2), id="added-node"),
    ],
)
def test_resume_after_a_node_edit_resets_the_join(tmp_path, state_dir, world, edit):
    site_path = tmp_path / "site.yaml"
    site_path.write_text(MINIMAL_SITE)
    assert run(site_path, state_dir, world).ok
    site_path.write_text(edit(MINIMAL_SITE))
    summary = run(site_path, state_dir, world)
    assert summary.reset == [("join.kubespray", CLUSTER)]
    assert summary.ok
