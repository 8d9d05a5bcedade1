"""Benchmarks that prove the scaling claims, measured in one run, each figure with its goal.

    python benchmarks/run.py            # the table, and benchmarks/RESULTS.md with the commit
    python benchmarks/run.py --quick    # smoke run (about a minute): every benchmark still
                                        # runs; asserts nothing about time, writes nothing

- per-node cost of `check` (benchmarks/fleet.py): the wizard process's own user+sys CPU and
  peak RSS for 1, 64, 250 and 1000 lab nodes (the lab in another process), and the
  marginal cost per node (goal at 1000: at most 8 ms and 150 KB per node); the 1000-node
  lab's start time;
- fair baselines on the same lab and probe set at 64 and 250 nodes: parallel-ssh (goal:
  the wizard within 1.5x) and a tuned Ansible playbook (goal: the wizard at least 5x
  faster), each with the lower bound the machine allows (lab + client CPU / cores);
- the measurement phases (irdma, host RDMA) on 64 nodes over 8 AIStor peers vs 1 node
  (benchmarks/measurement_phase.py; goal: within 3x);
- the TUI's longest event-loop stall during an 8-node and a 64-node demo
  (benchmarks/tui_stall.py; goal 50 ms) and the fleet view's refresh at 250 nodes
  (benchmarks/fleet_view.py; goal 30 ms);
- `export` for 1 and 256 nodes (goal: no worse than linear); TUI time to first paint vs a
  minimal Textual app (goal: within 2x); NCCL log classification vs `grep -c` (goal:
  within 10x); a checkpoint step write with a 10k-entry journal vs an empty one (goal:
  does not grow); the site loader on 1 MB hostile input vs PyYAML's SafeLoader (goal:
  within 2x) and every parser kind at 100 KB vs 1 MB (goal: linear;
  benchmarks/hostile_input.py).

Wall times that noise decides are the best of three (fleets up to 64 nodes); CPU seconds
and memory are stable and measured once at 250 and 1000 nodes. Sections of RESULTS.md
after the table (``## ...``, e.g. a before/after comparison) are kept.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from steps import build_plan  # noqa: E402
from wizard.checkpoint import Checkpoint  # noqa: E402
from wizard.export import export  # noqa: E402
from wizard.facts import parse  # noqa: E402
from wizard.model import StepState  # noqa: E402
from wizard.site import parse_site  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
import fleet as fleet_bench  # noqa: E402
import fleet_view  # noqa: E402
import hostile_input  # noqa: E402
import measurement_phase  # noqa: E402

Row = tuple[str, str, str, str]  # (what, measured, ratio, goal)


def site_text(nodes: int) -> str:
    entries = "".join(
        f"  - name: gpu-{i:03d}\n    host: 10.{i // 250}.{i % 250}.1\n"
        f"    bond: {{ports: [ens5f0np0, ens5f1np1]}}\n    rdma_ip: 192.168.{i // 250}.{i % 250 + 1}\n"
        for i in range(nodes)
    )
    peers = "aistor:\n  peers:\n    - {name: a1, host: 10.9.9.9, rdma_ip: 192.168.9.9}\n"
    return f"name: bench\nnodes:\n{entries}{peers}"


def export_time(nodes: int, tmp: Path) -> float:
    site = parse_site(site_text(nodes))
    started = time.perf_counter()
    export(site, build_plan(), tmp / f"export-{nodes}")
    return time.perf_counter() - started


def nccl_throughput(tmp: Path, repeat: int = 200_000) -> tuple[float, float]:
    line = "host:1:2 [0] NCCL INFO Channel 00/0 : 0[18000] -> 1[18000] [send] via NET/IB/0/GDRDMA\n"
    noise = "host:1:2 [0] NCCL INFO Connected all rings\n"
    text = (line + noise) * repeat  # 200k: about 25 MB
    path = tmp / "nccl.log"
    path.write_text(text)
    started = time.perf_counter()
    parse("nccl-log", text)
    ours = time.perf_counter() - started
    started = time.perf_counter()
    subprocess.run(["grep", "-c", "via NET", str(path)], capture_output=True, check=True)
    grep = time.perf_counter() - started
    return ours, grep


def checkpoint_write(tmp: Path, journal: int = 10_000) -> tuple[float, float]:
    site = parse_site(site_text(1))
    timings = []
    for entries in (0, journal):
        state_dir = tmp / f"ckpt-{entries}"
        with Checkpoint.open(state_dir, site) as checkpoint:
            for i in range(entries):
                checkpoint._journal.write(
                    f'{{"at": "x", "command": "probe {i}", "stdout": "{"x" * 200}"}}\n'
                )
            checkpoint._journal.flush()
            started = time.perf_counter()
            for _ in range(50):
                checkpoint.set_step("preflight.host", "gpu-000", StepState.DONE, message="ok")
                checkpoint.journal({"command": "uname -r", "stdout": "6.12.0"})
            timings.append((time.perf_counter() - started) / 50)
    return timings[0], timings[1]


def first_paint(tmp: Path, samples: int = 5) -> tuple[float, float]:
    """The real WizardApp until its start screen is painted vs a one-Label Textual app."""
    from textual.app import App
    from textual.widgets import Label

    from frontend.session import open_site
    from frontend.tui.app import WizardApp
    from frontend.tui.start import StartScreen

    site = tmp / "paint" / "site.yaml"
    site.parent.mkdir()
    site.write_text(site_text(1))

    class Minimal(App[None]):
        def compose(self):
            yield Label("hello")

    async def minimal() -> float:
        started = time.perf_counter()
        async with Minimal().run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            return time.perf_counter() - started

    async def wizard() -> float:
        started = time.perf_counter()
        app = WizardApp(lambda: open_site(site, site.parent / "state"))
        async with app.run_test(size=(120, 40)) as pilot:
            while not isinstance(app.screen, StartScreen):
                await asyncio.sleep(0.001)
            await pilot.pause()
            elapsed = time.perf_counter() - started
            app.exit(0)
            return elapsed

    async def both() -> tuple[float, float]:
        await wizard(), await minimal()  # warm-up: imports and first-use caches
        runs = [(await wizard(), await minimal()) for _ in range(samples)]
        return min(r[0] for r in runs), min(r[1] for r in runs)

    return asyncio.run(both())


def tui_stall(nodes: int = 8, phases: int = 11, timeout: float = 300.0) -> dict:
    """The stall probe in its own process (it freezes the garbage collector's startup objects
    and must not share Textual's state with the first-paint runs)."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "tui_stall.py"), "--json", "--nodes", str(nodes),
         "--phases", str(phases), "--timeout", str(timeout)],
        capture_output=True, text=True, cwd=ROOT, timeout=timeout + 300, check=True,
    )  # fmt: skip
    return json.loads(result.stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class Sizes:
    """How much each benchmark does: the full run, or the smoke run's least that still
    exercises every code path (a lab, both baselines, a TUI demo, the fleet view)."""

    fleet: tuple[int, ...] = (1, 64, 250, 1000)
    baselines: tuple[int, ...] = (64, 250)
    best_of: int = 3  # wall-time runs of the small fleets
    best_of_upto: int = 64
    phases_nodes: int = 64
    phases_peers: int = 8
    stalls: tuple[tuple[int, int, float], ...] = ((8, 11, 300.0), (64, 6, 300.0))
    view_nodes: int = 250
    export_nodes: int = 256
    paint_samples: int = 5
    nccl_lines: int = 200_000
    journal: int = 10_000
    hostile_bytes: int = 1_000_000


QUICK = Sizes(
    fleet=(1, 4), baselines=(4,), best_of=1, phases_nodes=2, phases_peers=1,
    stalls=((2, 1, 60.0),), view_nodes=16, export_nodes=16, paint_samples=1,
    nccl_lines=2_000, journal=100, hostile_bytes=100_000,
)  # fmt: skip


def fleet_rows(sizes: Sizes, tmp: Path) -> list[Row]:
    """Per-node cost of the wizard and the fair baselines, from benchmarks/fleet.py."""
    rows: list[Row] = []
    costs: dict[int, list[fleet_bench.Cost]] = {}
    starts: dict[int, float] = {}
    for n in sizes.fleet:
        repeat = sizes.best_of if n <= sizes.best_of_upto else 1
        starts[n], costs[n] = fleet_bench.fleet(
            n, tmp / f"fleet-{n}", baselines=n in sizes.baselines, repeat=repeat
        )
        for cost in costs[n]:
            if not cost.ok:
                raise RuntimeError(f"{cost.what} on {n} nodes failed: {cost.detail}")
    largest = max(sizes.fleet)
    rows.append(
        (f"lab of {largest} nodes: start", f"{starts[largest]:.1f} s", "", "bounded (seconds)")
    )
    base = costs[min(sizes.fleet)][0]
    for n in sizes.fleet:
        ours = costs[n][0]
        if n == base.nodes:
            rows.append((f"check, {n} node: wizard CPU / peak RSS", f"{ours.cpu_s:.2f} s / {ours.rss_kb / 1024:.0f} MB",
                         "fixed cost", ""))  # fmt: skip
            continue
        cpu_ms = (ours.cpu_s - base.cpu_s) / (n - base.nodes) * 1000
        rss_kb = (ours.rss_kb - base.rss_kb) / (n - base.nodes)
        goal = "<= 8 ms and 150 KB per node" if n == 1000 else ""
        rows.append((f"check, {n} nodes: wizard CPU / peak RSS", f"{ours.cpu_s:.2f} s / {ours.rss_kb / 1024:.0f} MB",
                     f"{cpu_ms:.1f} ms, {rss_kb:.0f} KB per node", goal))  # fmt: skip
    for n in sizes.baselines:
        ours, pssh, ansible = costs[n]
        best = f"best of {sizes.best_of}, " if n <= sizes.best_of_upto and sizes.best_of > 1 else ""
        for cost in (ours, pssh, ansible):
            how = best if cost is not ansible else ""
            rows.append((f"check probes, {n} nodes: {cost.what} wall (lower bound)",
                         f"{cost.wall_s:.2f} s ({cost.bound_s:.2f} s)",
                         f"{how}cpu {cost.cpu_s:.1f} s + lab {cost.lab_cpu_s:.1f} s", ""))  # fmt: skip
        rows.append((f"{n} nodes: wizard vs parallel-ssh, wall (lower bounds)",
                     f"{ours.wall_s / pssh.wall_s:.2f}x ({ours.bound_s / pssh.bound_s:.2f}x)",
                     "wizard / parallel-ssh", "within 1.5x"))  # fmt: skip
        rows.append((f"{n} nodes: wizard vs tuned Ansible, wall (lower bounds)",
                     f"{ansible.wall_s / ours.wall_s:.1f}x ({ansible.bound_s / ours.bound_s:.1f}x)",
                     "Ansible / wizard", "at least 5x"))  # fmt: skip
    if 64 in costs and 1 in costs:
        ratio = costs[64][0].wall_s / costs[1][0].wall_s
        rows.append(("check wall, 64 nodes vs 1", f"{costs[64][0].wall_s:.2f} / {costs[1][0].wall_s:.2f} s",
                     f"{ratio:.2f}x", "within 2x"))  # fmt: skip
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: every benchmark, smallest sizes"
    )
    args = parser.parse_args()
    sizes = QUICK if args.quick else Sizes()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="gnw-bench-") as name:
        tmp = Path(name)
        rows += fleet_rows(sizes, tmp)
        one = asyncio.run(measurement_phase.measure(1, 1))
        many = asyncio.run(measurement_phase.measure(sizes.phases_nodes, sizes.phases_peers))
        rows.append((f"measurement phases, {sizes.phases_nodes} nodes / {sizes.phases_peers} peers vs 1 node",
                     f"{many:.1f} / {one:.1f} s", f"{many / one:.2f}x", "within 3x"))  # fmt: skip
        for nodes, phases, timeout in sizes.stalls:
            stall = tui_stall(nodes, phases, timeout)
            reached = "" if stall["phases"] >= phases else f" (timeout: {stall['phases']} phases)"
            rows.append((f"TUI longest loop stall, {nodes}-node demo, phases 1-{phases}{reached}",
                         f"{stall['longest_ms']:.0f} ms", f"p99 {stall['p99_ms']:.0f} ms, "
                         f"{stall['over_50ms']} over 50 ms", "50 ms"))  # fmt: skip
        view = asyncio.run(fleet_view.measure(sizes.view_nodes, 5 if not args.quick else 1))
        rows.append((f"fleet view refresh, {sizes.view_nodes} nodes (a phase column changed)",
                     f"{view['changed_ms']:.1f} ms", f"loop stall {view['longest_stall_ms']:.1f} ms; "
                     f"{view['unchanged_ms']:.1f} ms unchanged", "30 ms"))  # fmt: skip
        one, many = export_time(1, tmp), export_time(sizes.export_nodes, tmp)
        rows.append(("export, 1 node", f"{one * 1000:.0f} ms", "", ""))
        rows.append((f"export, {sizes.export_nodes} nodes", f"{many * 1000:.0f} ms",
                     f"{many / one / sizes.export_nodes:.2f}x linear", "no worse than linear (<= 1x)"))  # fmt: skip
        wizard, minimal = first_paint(tmp, sizes.paint_samples)
        rows.append(("TUI first paint vs minimal app", f"{wizard * 1000:.0f} / {minimal * 1000:.0f} ms",
                     f"{wizard / minimal:.2f}x", "within 2x"))  # fmt: skip
        ours, grep = nccl_throughput(tmp, sizes.nccl_lines)
        rows.append((f"NCCL log ({sizes.nccl_lines * 2} lines) classification vs grep -c",
                     f"{ours:.2f} / {grep:.3f} s", f"{ours / grep:.1f}x", "within 10x"))  # fmt: skip
        rows += hostile_input.measure(sizes.hostile_bytes, 1 if args.quick else 3)
        empty, full = checkpoint_write(tmp, sizes.journal)
        rows.append((f"checkpoint step write, 0 vs {sizes.journal} journal entries",
                     f"{empty * 1000:.2f} / {full * 1000:.2f} ms",
                     f"{full / empty:.2f}x", "does not grow (~1x)"))  # fmt: skip
    cores = os.cpu_count()
    width = max(len(r[0]) for r in rows)
    print(f"{cores} cores ({platform.machine()}), Python {platform.python_version()}")
    for what, measured, ratio, goal in rows:
        print(f"{what:<{width}}  {measured:>22}  {ratio:>34}  goal: {goal or '-'}")
    if args.quick:
        print("\nquick run: every benchmark ran (times are not judged; RESULTS.md not written)")
        return 0
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT, check=False).stdout.strip()  # fmt: skip
    header = (
        f"# Benchmark results\n\nMachine: {platform.machine()}, {cores} cores, Python "
        f"{platform.python_version()}; date {datetime.now(UTC).date()}; commit {commit or 'unknown'}.\n"
        "Command: `python benchmarks/run.py`.\n\n| what | measured | ratio | goal |\n|---|---|---|---|\n"
    )
    table = "".join(f"| {a} | {b} | {c} | {d} |\n" for a, b, c, d in rows)
    results = ROOT / "benchmarks" / "RESULTS.md"
    kept = ""  # the hand-written sections after the table
    if results.exists() and "\n## " in (old := results.read_text()):
        kept = "\n" + old[old.index("\n## ") + 1 :]
    results.write_text(header + table + kept)
    print(f"\nwrote {results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
