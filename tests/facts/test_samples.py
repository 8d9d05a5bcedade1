"""Every parser kind on real outputs found in public issues, docs and repositories
(tests/facts/samples, see samples_check.py): `parse KIND FILE` gives the values a person
reading the output writes down."""

from __future__ import annotations

import json

import pytest

from tests.conftest import fixture_files, run_cli
from tests.facts.samples_check import SAMPLES, SHARED_EXPECTED, compare, samples, shared_samples
from wizard.facts import KINDS, ParseError, parse
from wizard.facts.contract import SCARCE

SAMPLES_FOUND = samples()
SHARED_FOUND = shared_samples()


@pytest.mark.parametrize("sample", SAMPLES_FOUND + SHARED_FOUND, ids=lambda s: s.name)
def test_sample_gives_the_values_written_down(sample):
    expected = sample.expected
    if "error" in expected:
        with pytest.raises(ParseError, match=expected["error"]):
            parse(sample.kind, sample.text_path.read_text())
        return
    fact = parse(sample.kind, sample.text_path.read_text())
    problems = compare(json.loads(json.dumps(fact.to_json())), expected)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("sample", SAMPLES_FOUND, ids=lambda s: s.name)
def test_sample_names_its_source_on_the_first_line(sample):
    assert sample.source.startswith("# source: ")
    assert len(sample.source) > len("# source: ") + 10
    assert sample.kind in KINDS, f"{sample.kind} is not a parser kind"


def test_parse_command_on_a_sample_prints_the_same_fact():
    sample = next(s for s in SAMPLES_FOUND if s.kind == "nccl-tests")
    result = run_cli("parse", sample.kind, str(sample.text_path))
    assert result.returncode == 0, result.stderr
    assert not compare(json.loads(result.stdout), sample.expected)


def test_samples_folder_is_beside_this_test():
    assert SAMPLES.is_dir() and SAMPLES_FOUND


def test_every_written_down_shared_fixture_exists():
    """A values file under shared_expected/ names a fixture that exists (a typo would
    silently test nothing)."""
    from tests.conftest import FIXTURES

    if not FIXTURES.is_dir():
        pytest.skip("../shared is not beside the repository")
    for expected in SHARED_EXPECTED.glob("*/*.json"):
        assert (FIXTURES / expected.parent.name / f"{expected.stem}.txt").is_file(), expected


PREFIXES = {
    "kubectl logs --timestamps": "2026-06-07T08:16:57.123456789Z ",
    "kubectl logs --prefix": "[pod/nccl-launcher-x7k2p/launcher] ",
    "mpirun --tag-output": "[1,0]<stdout>:",
    "SkyPilot on top of mpirun": "(head, rank=0, pid=3808) [1,0]<stdout>:",
}


@pytest.mark.parametrize("name", sorted(PREFIXES))
@pytest.mark.parametrize("kind", ["nvidia-smi", "nccl-tests", "perftest", "nvidia-smi-topo"])
def test_line_prefixes_are_stripped_by_rule_with_crlf_too(kind, name):
    """Every line of a real sample behind each launcher's prefix, with Windows line ends:
    the same fact as the sample itself."""
    sample = next(
        s for s in SAMPLES_FOUND + SHARED_FOUND if s.kind == kind and "error" not in s.expected
    )
    plain = parse(kind, sample.text_path.read_text()).to_json()
    body = [line for line in sample.text_path.read_text().splitlines() if not line.startswith("# ")]
    tagged = "\r\n".join(PREFIXES[name] + line for line in body)
    assert parse(kind, tagged).to_json() == plain


def real_outputs(kind: str) -> int:
    shared = [path for other, path in fixture_files() if other == kind]
    own = [s for s in SAMPLES_FOUND if s.kind == kind and not s.test_derived]
    return len(own) + len(shared)


def written_down(kind: str) -> int:
    return len([s for s in SAMPLES_FOUND + SHARED_FOUND if s.kind == kind and not s.test_derived])


def test_test_derived_samples_are_marked_and_not_counted():
    derived = sorted(s.name for s in SAMPLES_FOUND if s.test_derived)
    assert derived == [
        "containerd-version/03.txt",
        "ethtool-priv-flags/03.txt",
        "rdma-hw-counters/02.txt",
    ]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_has_three_real_outputs_or_says_why_not(kind):
    found = real_outputs(kind)
    if kind in SCARCE:
        count, _ = SCARCE[kind]
        assert found < 3, f"{kind} has {found} real outputs now: drop it from SCARCE"
        assert found == count, f"{kind}: {found} real outputs, SCARCE says {count}"
    else:
        assert found >= 3, f"{kind}: {found} real outputs (samples and ../shared/fixtures)"
        assert written_down(kind) >= 3, f"{kind}: values written down for {written_down(kind)}"
