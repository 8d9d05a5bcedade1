"""How fast the site loader and the output parsers meet hostile and oversized input.

    python benchmarks/hostile_input.py            # the table
    python benchmarks/hostile_input.py --quick    # smallest sizes (benchmarks/run.py --quick)

The unit tests (tests/facts/test_fuzz.py) prove the behaviour: every input is a result or
the tool's own error, with a bounded message, never a traceback. The speed is measured
here, where a loaded machine cannot fail a unit test:

- the site loader (wizard.site.parse_site: the strict YAML loader, then the model's
  validation) on 1 MB inputs against PyYAML's own SafeLoader on the same text, which the
  strict loader extends (wizard/yamlfile.py): the fair floor for reading that YAML at all.
  Goal: within 2x of it (or both under 10 ms: an input refused at its first bytes);
- every parser kind (wizard.facts) on the fuzz campaign's hostile shapes at 100 KB and at
  1 MB: the slowest kind's time, and how it grows. Goal: linear (10x the input within 15x
  the time; a quadratic parser takes 100x, as nvidia-smi's 41 s on 843 KB of digits did).

Each time is the best of ``--repeat`` runs (the machine is shared: the minimum is the cost).
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wizard.errors import SiteError  # noqa: E402
from wizard.facts import KINDS, ParseError, parse  # noqa: E402
from wizard.site import parse_site  # noqa: E402

Row = tuple[str, str, str, str]  # (what, measured, ratio, goal)


def _site(size: int) -> str:
    """A valid site file of about ``size`` bytes (nodes shaped as `init` writes them)."""
    head = "name: bench\naistor:\n  peers:\n    - {name: a1, host: 10.9.9.9, rdma_ip: 192.168.9.9}\nnodes:\n"
    entries, i = [], 0
    while sum(map(len, entries)) + len(head) < size:
        entries.append(
            f"  - name: gpu-{i:05d}\n    host: 10.{i // 250 % 250}.{i % 250}.1\n"
            f"    bond: {{ports: [ens5f0np0, ens5f1np1]}}\n"
            f"    rdma_ip: 192.{168 + i // 62500}.{i // 250 % 250}.{i % 250 + 1}\n"
        )
        i += 1
    return head + "".join(entries)


def shapes(size: int) -> dict[str, str]:
    """The fuzz campaign's hostile shapes (tests/facts/test_fuzz.py HOSTILE), ``size`` long."""
    rng = random.Random(18)
    return {
        "digits": "9" * size,
        "one long line": ("name: lab nodes: - {name: gpu-1, host: 10.0.0.1} " * size)[:size],
        "brackets": ("[" * 5000 + "x\n") * (size // 5001 + 1),
        "random table text": "".join(
            rng.choice('ab 0123456789:=|/.-[]{},"\n\t') for _ in range(size)
        ),
    }


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def _load_site(text: str) -> None:
    with contextlib.suppress(SiteError):
        parse_site(text)


def _safe_load(text: str) -> None:
    with contextlib.suppress(yaml.YAMLError, RecursionError, ValueError):
        yaml.load(text, Loader=yaml.SafeLoader)


def _every_kind(text: str) -> float:
    """The slowest kind's seconds on ``text``."""
    slowest = 0.0
    for kind in sorted(KINDS):
        started = time.perf_counter()
        with contextlib.suppress(ParseError):
            parse(kind, text)
        slowest = max(slowest, time.perf_counter() - started)
    return slowest


def measure(size: int = 1_000_000, repeat: int = 3) -> list[Row]:
    rows: list[Row] = []
    inputs = {"a valid site file": _site(size), **shapes(size)}
    for name, text in inputs.items():
        ours = best(lambda t=text: _load_site(t), repeat)
        floor = best(lambda t=text: _safe_load(t), repeat)
        rows.append((f"site loader, {len(text) / 1e6:.1f} MB {name}, vs PyYAML SafeLoader",
                     f"{ours * 1000:.0f} / {floor * 1000:.0f} ms", f"{ours / max(floor, 1e-6):.2f}x",
                     "within 2x (or both under 10 ms)"))  # fmt: skip
    small, large = shapes(size // 10), shapes(size)
    for name in large:
        one = min(_every_kind(small[name]) for _ in range(repeat))
        ten = min(_every_kind(large[name]) for _ in range(repeat))
        rows.append((f"slowest parser kind, {name}: {size // 10_000} KB vs {size // 1000} KB",
                     f"{one * 1000:.0f} / {ten * 1000:.0f} ms", f"{ten / max(one, 1e-6):.1f}x",
                     "linear: 10x input within 15x"))  # fmt: skip
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 KB inputs, one run each")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = measure(100_000, 1) if args.quick else measure(repeat=args.repeat)
    width = max(len(r[0]) for r in rows)
    for what, measured, ratio, goal in rows:
        print(f"{what:<{width}}  {measured:>18}  {ratio:>8}  goal: {goal}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
