"""Reading the real samples of tests/facts/samples and comparing a fact with what a person
wrote down from the same output.

Each sample is ``KIND/NN.txt``: a cut (never edited) of a real command output whose first
line is ``# source: ADDRESS`` (a ``# note:`` line may follow; the parsers skip both), and
``KIND/NN.json`` beside it with the values read off the output by eye:

- ``values``: a subset of the fact's JSON. A mapping matches when every key written down
  matches; a list matches when its first elements match the ones written down (a table
  of 24 rows need not be copied whole), so ``counts`` says how long each list must be.
- ``counts``: dotted path -> the exact length of that list (``gpus``, ``rows``).
- ``last``: dotted path -> what the list's last element holds (the largest message size,
  the last GPU).
- ``error``: instead of the three above, the reason the parser must refuse the text with.

The real outputs of ../shared/fixtures (the project's first samples) get the same treatment:
``tests/facts/shared_expected/KIND/NAME.json`` holds what a person reads off
``../shared/fixtures/KIND/NAME``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import FIXTURES

SAMPLES = Path(__file__).parent / "samples"
SHARED_EXPECTED = Path(__file__).parent / "shared_expected"


@dataclass(frozen=True)
class Sample:
    kind: str
    text_path: Path
    expected_path: Path

    @property
    def name(self) -> str:
        where = "shared/" if self.text_path.is_relative_to(FIXTURES) else ""
        return f"{where}{self.kind}/{self.text_path.name}"

    @property
    def expected(self) -> dict[str, Any]:
        return json.loads(self.expected_path.read_text())

    @property
    def source(self) -> str:
        return self.text_path.read_text().splitlines()[0]

    @property
    def test_derived(self) -> bool:
        """A string quoted in another project's unit test, not output captured from the
        tool: its values are still checked, but it does not count as a real output."""
        lines = self.text_path.read_text().splitlines()
        return len(lines) > 1 and lines[1].startswith("# note: test-derived")


def samples() -> list[Sample]:
    """The project's own samples (tests/facts/samples)."""
    return [
        Sample(path.parent.name, path, path.with_suffix(".json"))
        for path in sorted(SAMPLES.glob("*/*.txt"))
    ]


def shared_samples() -> list[Sample]:
    """The ../shared/fixtures outputs whose values are written down in shared_expected/."""
    found = []
    for expected in sorted(SHARED_EXPECTED.glob("*/*.json")):
        fixture = FIXTURES / expected.parent.name / f"{expected.stem}.txt"
        if fixture.is_file():
            found.append(Sample(expected.parent.name, fixture, expected))
    return found


def mismatches(actual: Any, expected: Any, path: str = "") -> list[str]:
    """Every place where ``actual`` disagrees with what was written down."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{path or '.'}: {actual!r} is not an object"]
        problems = []
        for key, value in expected.items():
            if key not in actual:
                problems.append(f"{path}.{key}: missing")
            else:
                problems += mismatches(actual[key], value, f"{path}.{key}")
        return problems
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return [f"{path}: {actual!r} is not a list"]
        if len(actual) < len(expected):
            return [f"{path}: {len(actual)} elements, {len(expected)} written down"]
        problems = []
        for index, value in enumerate(expected):
            problems += mismatches(actual[index], value, f"{path}[{index}]")
        return problems
    if isinstance(expected, float) and isinstance(actual, int | float):
        return [] if abs(actual - expected) < 1e-9 else [f"{path}: {actual!r} != {expected!r}"]
    if actual != expected or type(actual) is not type(expected):
        return [f"{path}: {actual!r} != {expected!r}"]
    return []


def at(data: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        data = data[part]
    return data


def compare(fact_json: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    problems = mismatches(fact_json, expected.get("values", {}))
    for dotted, length in expected.get("counts", {}).items():
        found = at(fact_json, dotted)
        if len(found) != length:
            problems.append(f"{dotted}: {len(found)} elements, {length} in the output")
    for dotted, last in expected.get("last", {}).items():
        found = at(fact_json, dotted)
        problems += mismatches(found[-1] if found else None, last, f"{dotted}[-1]")
    return problems
