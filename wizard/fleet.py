"""Saying one thing about many nodes: text output that stays readable on a fleet.

On 64 nodes a line per node per step is 1,000 lines that all say "done". The command-line
views (status, check, headless progress) group the nodes that share an outcome and list
each node that differs.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TypeVar

# Up to this many names are written out; more become a count.
NAMES_SHOWN = 3
# Up to this many nodes are shown one by one (a TUI column, a line of output each); a larger
# site is a fleet, shown grouped by outcome.
LISTED_NODES = 6

K = TypeVar("K", bound=Hashable)


def is_fleet(node_count: int) -> bool:
    return node_count > LISTED_NODES


def targets_text(targets: list[str]) -> str:
    """``gpu-1``, ``gpu-1, gpu-2`` or ``64 nodes (gpu-01 ... gpu-64)``."""
    if len(targets) <= NAMES_SHOWN:
        return ", ".join(targets)
    return f"{len(targets)} nodes ({targets[0]} ... {targets[-1]})"


def group_targets(items: Iterable[tuple[K, str]]) -> list[tuple[K, list[str]]]:
    """(outcome, target) pairs grouped by outcome, in order of first appearance."""
    groups: dict[K, list[str]] = {}
    for outcome, target in items:
        groups.setdefault(outcome, []).append(target)
    return list(groups.items())
