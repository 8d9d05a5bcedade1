"""A tiny simulated world for engine tests: steps whose effects live in a JSON file.

The file stands in for a host: ``live`` holds what each (step, target) has applied,
``applies`` counts apply calls, ``redundant`` counts applies of a change that was already in
place (the thing the resume rules must never do). It is shared by the in-process tests and
by the subprocess that the kill -9 test murders.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from wizard.artifacts import Artifact, Target
from wizard.events import Answer, Decision, Event, Reply
from wizard.model import Finding, Severity, StepKind
from wizard.plan import Change, Phase, Plan, Scope, Step, StepContext


class World:
    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.exists():
            self.save({"live": {}, "applies": {}, "redundant": 0, "fail": [], "delay": 0.0})

    def load(self) -> dict[str, Any]:
        return json.loads(self.path.read_text())

    def save(self, data: dict[str, Any]) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path)

    def update(self, **changes: Any) -> None:
        data = self.load()
        data.update(changes)
        self.save(data)


def _key(ctx: StepContext) -> str:
    return f"{ctx.step.id}@{ctx.target}"


class WorldCheck(Step):
    """Passes unless its id@target is listed in the world's ``fail``."""

    kind = StepKind.CHECK
    gates = ("T00",)

    def __init__(self, step_id: str, world: World, **attrs: Any) -> None:
        self.id = step_id
        self.title = f"check {step_id}"
        self.world = world
        for name, value in attrs.items():
            setattr(self, name, value)

    async def verify(self, ctx: StepContext) -> list[Finding]:
        failing = _key(ctx) in self.world.load()["fail"]
        return [
            Finding(
                check=f"{self.id}.ok",
                gate=self.gates[0],
                severity=Severity.FAIL if failing else Severity.PASS,
                message="simulated failure" if failing else "fine",
                remediation="clear the simulated failure" if failing else "",
            )
        ]


class WorldApply(Step):
    """Wants ``desired`` in place; applying takes ``delay`` seconds in the middle."""

    kind = StepKind.APPLY
    gates = ("T02",)

    def __init__(self, step_id: str, world: World, **attrs: Any) -> None:
        self.id = step_id
        self.title = f"apply {step_id}"
        self.world = world
        for name, value in attrs.items():
            setattr(self, name, value)

    def desired(self, ctx: StepContext) -> str:
        return f"{self.id} for {ctx.target}\n"

    async def changes(self, ctx: StepContext) -> list[Change]:
        live = self.world.load()["live"].get(_key(ctx))
        artifact = Artifact(
            f"nodes/{ctx.target}/{self.id}.conf",
            self.desired(ctx),
            Target.HOST_FILE,
            f"/etc/{self.id}.conf on {ctx.target}",
            "test artifact",
        )
        return [Change(artifact, live)]

    async def apply(self, ctx: StepContext, changes: list[Change]) -> None:
        data = self.world.load()
        key = _key(ctx)
        if data["live"].get(key) == self.desired(ctx):
            data["redundant"] += 1
        data["applies"][key] = data["applies"].get(key, 0) + 1
        self.world.save(data)
        await asyncio.sleep(data["delay"])
        data = self.world.load()
        data["live"][key] = self.desired(ctx)
        self.world.save(data)

    async def verify(self, ctx: StepContext) -> list[Finding]:
        ok = self.world.load()["live"].get(_key(ctx)) == self.desired(ctx)
        return [
            Finding(
                check=f"{self.id}.in-place",
                gate=self.gates[0],
                severity=Severity.PASS if ok else Severity.FAIL,
                message="in place" if ok else "not in place",
            )
        ]


class WorldMaintenance(WorldApply):
    """A maintenance change with no cluster to drain (the world has none); its apply
    converges, as the engine's maintenance contract asks: what is in place is not redone."""

    kind = StepKind.MAINTENANCE
    gates = ("T08",)
    drains = False

    def rollback(self, site, node) -> str:
        return "undo it"

    async def capture(self, ctx: StepContext) -> dict[str, Any]:
        return {"live": self.world.load()["live"].get(_key(ctx))}

    async def apply(self, ctx: StepContext, changes: list[Change]) -> None:
        if self.world.load()["live"].get(_key(ctx)) == self.desired(ctx):
            return
        await super().apply(ctx, changes)

    async def undo(self, ctx: StepContext) -> list[Finding]:
        data = self.world.load()
        previous = ctx.data["capture"]["live"]
        if previous is None:
            data["live"].pop(_key(ctx), None)
        else:
            data["live"][_key(ctx)] = previous
        self.world.save(data)
        return []


def world_plan(world: World) -> Plan:
    return Plan(
        (
            Phase("one", 1, "First", "checks", (WorldCheck("one.check", world, reads=("qos",)),)),
            Phase(
                "two",
                2,
                "Second",
                "applies",
                (
                    WorldApply("two.apply", world, reads=("node.bond",)),
                    WorldApply("two.cluster", world, scope=Scope.CLUSTER),
                ),
            ),
            Phase("three", 3, "Third", "maintenance", (WorldMaintenance("three.qos", world),)),
            Phase("four", 4, "Fourth", "verify", (WorldCheck("four.check", world),)),
        )
    )


class ScriptedFrontEnd:
    """Records events; answers decisions from a script (default: proceed, typing the name)."""

    wants_output_lines = True

    def __init__(self, answers: dict[str, Reply] | None = None) -> None:
        self.events: list[Event] = []
        self.decisions: list[Decision] = []
        self.answers = answers or {}

    def emit(self, event: Event) -> None:
        self.events.append(event)

    async def decide(self, decision: Decision) -> Reply:
        self.decisions.append(decision)
        key = f"{decision.kind.value}:{decision.step}@{decision.target}"
        reply = self.answers.get(key) or self.answers.get(decision.kind.value)
        if reply is not None:
            return reply
        return Reply(Answer.PROCEED, typed=decision.confirm_text or "")
