"""Typed result keys (issue #23): a step reads another step's result only through a
``ResultKey`` it declared (``needs``: blocked with the reason when missing; ``uses``: None
when missing), typed as the producer declared it; never by the producer's name with a
default in its place."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from tests.conftest import REPO, with_nodes
from tests.engine_world import ScriptedFrontEnd, World, WorldCheck
from wizard.checkpoint import Checkpoint
from wizard.engine import Engine
from wizard.events import StepFinished
from wizard.model import StepState
from wizard.plan import Phase, Plan, Scope
from wizard.result_keys import MissingResultError, ResultKey
from wizard.site import load_site

NETDEV = ResultKey("one.discover", "netdev", str)
COUNT = ResultKey("one.discover", "count", int)


class Discover(WorldCheck):
    """Records a netdev on every node but the ones listed in ``silent``."""

    provides = (NETDEV, COUNT)
    silent: tuple[str, ...] = ()
    count: object = 2

    async def verify(self, ctx):
        if ctx.target not in self.silent:
            ctx.provide(NETDEV, f"ens1f0-{ctx.target}")
            ctx.data[COUNT.name] = self.count  # as a checkpoint of another version might
        return await super().verify(ctx)


class FleetConfig(WorldCheck):
    """A cluster-scope step built from every node's netdev (as the RDMA plugin's config)."""

    scope = Scope.CLUSTER
    needs = (NETDEV,)
    seen: list[str]

    async def verify(self, ctx):
        self.seen = [ctx.need(NETDEV, on=node.name) for node in ctx.site.nodes]
        return await super().verify(ctx)


class Counts(WorldCheck):
    needs = (COUNT,)
    got: list[object]

    async def verify(self, ctx):
        self.got = [ctx.need(COUNT)]
        return await super().verify(ctx)


class Optional(WorldCheck):
    uses = (NETDEV,)
    got: dict[str, object]

    async def verify(self, ctx):
        self.got = {**getattr(self, "got", {}), ctx.target: ctx.result_if_any(NETDEV)}
        return await super().verify(ctx)


def _run(tmp_path: Path, *later, **discover):
    site_path = tmp_path / "site.yaml"
    site_path.write_text(with_nodes(2))
    site = load_site(site_path)
    world = World(tmp_path / "world.json")
    first = Discover("one.discover", world, **discover)
    plan = Plan(
        (
            Phase("one", 1, "First", "discovers", (first,)),
            Phase("two", 2, "Second", "uses it", tuple(later)),
        )
    )
    frontend = ScriptedFrontEnd()
    with Checkpoint.open(tmp_path / "state", site) as checkpoint:
        summary = asyncio.run(Engine(site, plan, checkpoint, frontend).run())
    return summary, frontend


def _message(frontend, step):
    return next(
        e.message for e in frontend.events if isinstance(e, StepFinished) and e.step == step
    )


def test_a_cluster_step_needs_the_result_of_every_node(tmp_path):
    fleet = FleetConfig("two.fleet", World(tmp_path / "w2.json"))
    summary, _ = _run(tmp_path, fleet)
    assert summary.results[("two.fleet", "cluster")] is StepState.DONE
    assert fleet.seen == ["ens1f0-gpu-1", "ens1f0-gpu-2"]


def test_a_node_without_the_result_blocks_the_cluster_step_and_is_named(tmp_path):
    fleet = FleetConfig("two.fleet", World(tmp_path / "w2.json"))
    summary, frontend = _run(tmp_path, fleet, silent=("gpu-2",))
    assert summary.results[("two.fleet", "cluster")] is StepState.BLOCKED
    message = _message(frontend, "two.fleet")
    assert "needs netdev from one.discover" in message and "on gpu-2" in message, message


def test_a_result_of_the_wrong_type_is_refused_not_used(tmp_path):
    counts = Counts("two.counts", World(tmp_path / "w2.json"))
    summary, _ = _run(tmp_path, counts, count=2)
    assert counts.got == [2]
    counts = Counts("two.counts", World(tmp_path / "w3.json"))
    (tmp_path / "again").mkdir()
    summary, _ = _run(tmp_path / "again", counts, count=True)  # a bool is no count
    assert summary.results[("two.counts", "gpu-1")] is StepState.FAILED
    [finding] = summary.findings[("two.counts", "gpu-1")]
    assert "needs 'count' from one.discover, which recorded a bool" in finding.message


def test_an_optional_result_is_none_when_missing_and_never_blocks(tmp_path):
    optional = Optional("two.optional", World(tmp_path / "w2.json"))
    summary, _ = _run(tmp_path, optional, silent=("gpu-2",))
    assert summary.results[("two.optional", "gpu-2")] is StepState.DONE
    assert optional.got == {"gpu-1": "ens1f0-gpu-1", "gpu-2": None}


def test_reading_or_recording_an_undeclared_result_is_a_bug_not_a_default():
    from wizard.engine.runtime import StepRuntime

    step = WorldCheck("two.check", None)
    ctx = StepRuntime.__new__(StepRuntime)
    ctx.step, ctx.data = step, {}
    with pytest.raises(KeyError, match="without declaring it in `needs`"):
        ctx.need(NETDEV)
    with pytest.raises(KeyError, match="without declaring it in `uses`"):
        ctx.result_if_any(NETDEV)
    with pytest.raises(KeyError, match="without declaring it in `provides`"):
        ctx.provide(NETDEV, "ens1f0")
    assert ResultKey("a", "n", str).check("x", "b") == "x"
    with pytest.raises(MissingResultError):
        ResultKey("a", "n", int).check("3", "b")


def test_no_step_reads_a_result_by_the_producers_name():
    """The six reads the audit found (`ctx.recorded("irdma.verify").get(...)` and the like)
    are gone, and the way to write another one with them: a step's record is read through
    its ResultKeys only."""
    from wizard.engine.runtime import StepRuntime
    from wizard.plan import StepContext

    assert not hasattr(StepContext, "recorded")
    assert not hasattr(StepRuntime, "recorded")
    pattern = re.compile(r"checkpoint\.record\(|\.recorded\(")
    offenders = [
        f"{path.relative_to(REPO)}:{n}"
        for path in sorted((REPO / "steps").rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []


def test_every_product_result_is_declared_with_its_producer():
    from steps import build_plan

    plan = build_plan()
    keys = {key for step in plan.steps() for key in (*step.needs, *step.uses, *step.provides)}
    assert len(keys) >= 8
    for key in keys:
        assert key in plan.step(key.provider).provides, str(key)
        assert key.kind in (str, int, float, bool, list, dict), str(key)
