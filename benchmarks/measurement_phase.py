"""The fleet's measurement phase: taking turns on one AIStor peer vs disjoint waves over several.

    python benchmarks/measurement_phase.py              # 16 nodes
    python benchmarks/measurement_phase.py --nodes 64   # the issue's fleet (a few minutes)

Runs the lab's host RDMA measurement (phase 6: three bandwidth tests, the latency test and
the QP sweep per node, each a perftest server on the peer and a client on the node) for
1 node, then for N nodes against one peer (the turns every node used to take, the fair
baseline: it is the same scheduler with one far end), then for N nodes against N/8 peers
(disjoint waves, as many at once as peers), then the N nodes measuring each other in
disjoint pairs (``measurements.pair_nodes``: two waves). Prints the wall times and their
ratios to the 1-node run; the goals: N nodes over P peers in about N/P times the 1-node
time, and paired nodes within 3x of it (issue #20).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from frontend.headless import HeadlessFrontEnd  # noqa: E402
from frontend.runner import run_engine  # noqa: E402
from simulator.lab import Lab  # noqa: E402
from steps import build_plan  # noqa: E402
from wizard.site import load_site  # noqa: E402

PHASES = ("irdma", "host-rdma")  # host-rdma needs what irdma.verify records


async def measure(nodes: int, peers: int, *, pairs: bool = False) -> float:
    """Wall time of the measurement phase for ``nodes`` nodes against ``peers`` peers
    (``pairs``: the nodes measure each other, measurements.pair_nodes)."""
    plan = build_plan()
    only = [s.id for p in plan.phases if p.id in PHASES for s in p.steps]
    with tempfile.TemporaryDirectory() as folder:
        async with Lab(Path(folder) / "lab", nodes=nodes, peers=peers) as lab:
            site = load_site(lab.site_path)
            if pairs:
                measurements = site.measurements.model_copy(update={"pair_nodes": True})
                site = site.model_copy(update={"measurements": measurements})
            frontend = HeadlessFrontEnd(yes=True, out=io.StringIO())
            start = time.perf_counter()
            await run_engine(site, plan, Path(folder) / "state", frontend, only=only)
            return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=16, help="fleet size (default 16)")
    parser.add_argument(
        "--peers", type=int, default=0, help="peers for the wave run (default nodes/8)"
    )
    args = parser.parse_args()
    if not 2 <= args.nodes <= 250:
        parser.error("--nodes must be 2-250")
    peers = args.peers or max(2, args.nodes // 8)
    one = asyncio.run(measure(1, 1))
    turns = asyncio.run(measure(args.nodes, 1))
    waves = asyncio.run(measure(args.nodes, peers))
    paired = asyncio.run(measure(args.nodes, 1, pairs=True))
    expected = -(-args.nodes // peers)
    print("| run | wall time | x of 1 node | goal |")
    print("|---|---|---|---|")
    print(f"| 1 node, 1 peer | {one:.1f} s | 1.00x | |")
    print(f"| {args.nodes} nodes, 1 peer (turns) | {turns:.1f} s | {turns / one:.2f}x | "
          f"~{args.nodes}x (one at a time) |")  # fmt: skip
    print(f"| {args.nodes} nodes, {peers} peers (waves) | {waves:.1f} s | {waves / one:.2f}x | "
          f"~{expected}x ({args.nodes}/{peers} waves) |")  # fmt: skip
    print(f"| {args.nodes} nodes in pairs (pair_nodes) | {paired:.1f} s | {paired / one:.2f}x | "
          "within 3x (two waves) |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
