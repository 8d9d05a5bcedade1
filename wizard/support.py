"""Versioned compatibility data the T00 checks enforce, with where each row comes from.

Kept as data (not logic) so that a new GPU Operator release is one new entry.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OperatorSupport:
    operator: str  # major.minor of the GPU Operator chart
    operating_systems: tuple[tuple[str, str], ...]  # (os-release ID, VERSION_ID prefix)
    kubernetes: tuple[str, str]  # validated minor range, inclusive
    containerd_min: tuple[int, int]
    driver: str
    source: str


SUPPORT = {
    "26.7": OperatorSupport(
        operator="26.7",
        operating_systems=(("rhel", "10."), ("ubuntu", "24.04"), ("ubuntu", "22.04")),
        kubernetes=("1.33", "1.36"),
        containerd_min=(2, 0),
        driver="595.91.07",
        source=(
            "GPU Operator 26.x platform support (validated K8s 1.32-1.36 on Ubuntu 22.04/24.04 "
            "and RHEL 10); 26.7 requires containerd >= 2.0 (design notes, file 002); the "
            "issue tracker pins 1.33-1.36 for 26.7"
        ),
    ),
}


@dataclass(frozen=True)
class ReleaseNote:
    """Something an operator must know about a GPU Operator release that no gate checks."""

    topic: str
    text: str
    source: str


RELEASE_NOTES = {
    "26.7": (
        ReleaseNote(
            "DCGM Exporter metrics",
            "GPU Operator 26.7 ships DCGM Exporter 4.6.0-4.8.3 on DCGM 4.6.0-1: map Prometheus "
            "dashboards and alerts to the metric names that exporter publishes (its counters "
            "CSV, e.g. `curl -s NODE:9400/metrics`), not to names from earlier releases. The "
            "wizard's gates read no DCGM metric.",
            "seed 003 section 7 (the 26.7 component versions from NVIDIA's docs)",
        ),
    ),
}


def release_notes(chart_version: str) -> tuple[ReleaseNote, ...]:
    """The notes for a chart version such as ``v26.7.0`` (major.minor)."""
    major_minor = ".".join(chart_version.lstrip("v").split(".")[:2])
    return RELEASE_NOTES.get(major_minor, ())


def support_for(chart_version: str) -> OperatorSupport | None:
    """The entry for a chart version such as ``v26.7.0`` (matched on major.minor)."""
    major_minor = ".".join(chart_version.lstrip("v").split(".")[:2])
    return SUPPORT.get(major_minor)


def minor_tuple(version: str) -> tuple[int, int]:
    parts = version.lstrip("v").split(".")
    return int(parts[0]), int(parts[1].rstrip("+"))
