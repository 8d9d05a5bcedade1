"""The TUI's longest event-loop stall during a demo run over the lab.

    python benchmarks/tui_stall.py                      # 8 nodes, phases 1-11
    python benchmarks/tui_stall.py --tree /tmp/before   # the same probe over another checkout

A ``WizardApp`` under Textual's test harness (``run_test``) runs over ``open_lab(nodes=8)``
while a sampler on the UI loop sleeps ``--interval`` seconds at a time and records how late
each wake-up is: a late wake-up is a stall, a time in which the screen could neither repaint
nor read a key. Every review, maintenance, manual and rollback modal is answered as an
operator would (apply, type the node name, done) by dismissing it with that answer. The run
stops once phase ``--phases`` is over (by default 11, which holds the QoS maintenance
windows) or after ``--timeout`` seconds, whichever is first. ``--why MS`` also prints what
the UI thread was doing in each stall longer than MS (its stack, taken by a watchdog
thread); ``--json`` prints the numbers for benchmarks/run.py.

Only the public surface that both the old and new TUI have is used (``WizardApp(opener,
auto_start=True)``, ``app.finished``, ``app.main_screen.transcript``, the modals'
``decision``), so ``--tree`` can point at an export of an older commit.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Stalls:
    interval: float
    lags: list[float] = field(default_factory=list)
    worst: list[tuple[float, float, str]] = field(default_factory=list)  # (lag, at, where)

    def add(self, lag: float, at: float, where: str) -> None:
        self.lags.append(lag)
        self.worst = sorted([*self.worst, (lag, at, where)], reverse=True)[:5]

    @property
    def longest(self) -> float:
        return self.worst[0][0] if self.worst else 0.0

    @property
    def longest_at(self) -> str:
        return self.worst[0][2] if self.worst else ""

    def over(self, seconds: float) -> int:
        return sum(1 for lag in self.lags if lag > seconds)

    def percentile(self, p: float) -> float:
        ordered = sorted(self.lags)
        return ordered[min(len(ordered) - 1, int(len(ordered) * p))] if ordered else 0.0


@dataclass
class Result:
    stalls: Stalls
    wall_s: float
    phases_seen: int
    finished: bool
    answered: int
    stacks: collections.Counter[str] = field(default_factory=collections.Counter)


class Progress:
    """The phase the run is in, read from the main screen's transcript as it grows (the
    probe must not rescan a transcript of a hundred thousand lines on the UI loop)."""

    def __init__(self, app) -> None:
        self.app = app
        self.seen = 0  # transcript lines read
        self.phases = 0
        self.current = "opening the lab"

    def update(self) -> None:
        main = getattr(self.app, "main_screen", None)
        if main is None:
            return
        transcript = main.transcript
        for line in transcript[self.seen :]:
            if line.startswith("== "):
                self.phases += 1
                self.current = line[3:]
        self.seen = len(transcript)


class Watchdog:
    """With ``--why MS``: a thread that, whenever the UI loop has not ticked for MS, takes the
    UI thread's stack, so that a stall says what the loop was busy with."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.tick = time.perf_counter()
        self.ui_thread = threading.get_ident()
        self.stacks: collections.Counter[str] = collections.Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        caught = False  # one stack per stall
        while not self._stop.wait(self.threshold / 4):
            if time.perf_counter() - self.tick < self.threshold:
                caught = False
                continue
            frame = sys._current_frames().get(self.ui_thread)
            if frame is None or caught:
                continue
            caught = True
            frames = traceback.extract_stack(frame)
            # The innermost frames of the app and of Textual say what the loop was doing.
            mine = [
                f for f in frames if "/textual/" in f.filename or "/frontend/tui/" in f.filename
            ]
            self.stacks["\n".join(f"    {f.filename}:{f.lineno} {f.name}" for f in mine[-8:])] += 1


async def probe(
    nodes: int, phases: int, timeout: float, interval: float, why: float | None = None
) -> Result:
    from frontend.lab_session import open_lab
    from frontend.tui.app import WizardApp
    from wizard.events import Answer, Reply

    with tempfile.TemporaryDirectory(prefix="gnw-stall-") as tmp:
        app = WizardApp(lambda: open_lab((), nodes, Path(tmp) / "state"), auto_start=True)
        stalls = Stalls(interval)
        progress = Progress(app)
        answered: list = []  # the screens themselves: an id() is reused once one is freed
        watchdog = Watchdog(why) if why else None
        started = time.perf_counter()
        async with app.run_test(size=(160, 45)):
            loop = asyncio.get_running_loop()
            if watchdog is not None:
                watchdog.start()

            async def sampler() -> None:
                while True:
                    before = loop.time()
                    await asyncio.sleep(interval)
                    if watchdog is not None:
                        watchdog.tick = time.perf_counter()
                    lag = loop.time() - before - interval
                    where = f"{progress.current}, {type(app.screen).__name__}"
                    stalls.add(lag, time.perf_counter() - started, where)

            task = asyncio.create_task(sampler())
            deadline = time.monotonic() + timeout
            try:
                while time.monotonic() < deadline and not app.finished:
                    progress.update()
                    if progress.phases > phases:  # phase N+1 has started: phase N is over
                        break
                    screen = app.screen
                    decision = getattr(screen, "decision", None)
                    if (
                        decision is not None
                        and screen.is_mounted
                        and all(a is not screen for a in answered)
                    ):
                        answered.append(screen)
                        name = type(screen).__name__
                        if name == "MaintenanceScreen":
                            reply = Reply(Answer.PROCEED, typed=decision.confirm_text or "")
                        elif name == "ReviewScreen" and decision.other_nodes:
                            reply = Reply(Answer.PROCEED_SAME)
                        else:
                            reply = Reply(Answer.PROCEED)
                        screen.dismiss(reply)
                    await asyncio.sleep(
                        0.02
                    )  # not pilot.pause: its idle wait posts to every widget
            finally:
                task.cancel()
                if watchdog is not None:
                    watchdog.stop()
            wall = time.perf_counter() - started
            progress.update()
            seen = min(progress.phases, phases)
            finished = app.finished
            app.exit(0)
        result = Result(stalls, wall, seen, finished, len(answered))
        result.stacks = watchdog.stacks if watchdog else collections.Counter()
        return result


def describe(result: Result) -> str:
    s = result.stalls
    return (
        f"longest stall {s.longest * 1000:.0f} ms (in {s.longest_at}); "
        f"p99 {s.percentile(0.99) * 1000:.1f} ms; {s.over(0.1)} stalls over 100 ms, "
        f"{s.over(0.05)} over 50 ms; {len(s.lags)} samples every {s.interval * 1000:.0f} ms; "
        f"{result.phases_seen} phase(s) in {result.wall_s:.1f} s, {result.answered} modal(s) answered"
    )


def numbers(result: Result) -> dict[str, float | int | bool]:
    s = result.stalls
    return {
        "longest_ms": round(s.longest * 1000, 1),
        "p99_ms": round(s.percentile(0.99) * 1000, 1),
        "over_100ms": s.over(0.1),
        "over_50ms": s.over(0.05),
        "samples": len(s.lags),
        "phases": result.phases_seen,
        "wall_s": round(result.wall_s, 1),
        "modals": result.answered,
        "finished": result.finished,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--phases", type=int, default=11, help="stop once this phase is over")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds at most")
    parser.add_argument("--interval", type=float, default=0.01, help="sampler period, seconds")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout to measure")
    parser.add_argument(
        "--why", type=float, metavar="MS", help="print the UI stack of stalls over MS"
    )
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.tree.resolve()))
    why = args.why / 1000 if args.why else None
    result = asyncio.run(probe(args.nodes, args.phases, args.timeout, args.interval, why))
    if args.json:
        print(json.dumps(numbers(result)))
        return 0
    print(f"TUI over a {args.nodes}-node lab ({args.tree}): {describe(result)}")
    for lag, at, where in result.stalls.worst:
        print(f"  {lag * 1000:6.0f} ms at {at:6.1f} s: {where}")
    for stack, count in result.stacks.most_common(12):
        print(f"{count} stall(s) over {args.why:.0f} ms in:\n{stack}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
