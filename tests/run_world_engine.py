"""Run the world plan to the end in this process (the kill -9 test kills it part-way)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tests.engine_world import ScriptedFrontEnd, World, world_plan
from wizard.checkpoint import Checkpoint
from wizard.engine import Engine
from wizard.site import load_site


async def main(site_path: str, state_dir: str, world_path: str) -> None:
    site = load_site(site_path)
    world = World(Path(world_path))
    with Checkpoint.open(Path(state_dir), site) as checkpoint:
        engine = Engine(site, world_plan(world), checkpoint, ScriptedFrontEnd())
        await engine.run()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
