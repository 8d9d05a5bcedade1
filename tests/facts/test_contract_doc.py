"""One typed contract: every parser declares its fact type, docs/FACTS.md is generated from
those types (wizard/facts/contract.py), and every real output's fact fits its schema."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
from pydantic import TypeAdapter

from tests.conftest import FIXTURES, fixture_files
from tests.facts.samples_check import samples
from wizard.facts import KINDS, Fact, parse
from wizard.facts.contract import (
    SHARED_KEYS,
    fact_type,
    main,
    render,
    schema,
    undeclared_differences,
)

DOCUMENT = Path(__file__).parents[2] / "docs" / "FACTS.md"
REAL_OUTPUTS = [(s.kind, s.text_path) for s in samples() if "error" not in s.expected] + [
    (kind, path) for kind, path in fixture_files()
]


def test_committed_contract_is_the_generated_one():
    assert DOCUMENT.read_text() == render(), (
        "docs/FACTS.md is out of date: python -m wizard.facts.contract --write docs/FACTS.md"
    )


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_parser_declares_a_fact_type_with_a_schema(kind):
    declared = fact_type(kind)
    assert issubclass(declared, Fact)
    assert schema(kind)["type"] == "object"
    assert f"## {kind}\n" in render()


@pytest.mark.parametrize(("kind", "path"), REAL_OUTPUTS, ids=lambda v: getattr(v, "name", v))
def test_every_real_output_fits_its_declared_type(kind, path):
    """The JSON printed is valid against the schema the document shows, and the declared
    type reads it back (pydantic) into the same JSON: the type is what runs."""
    data = json.loads(json.dumps(parse(kind, path.read_text()).to_json()))
    jsonschema.validate(data, schema(kind))
    adapter = TypeAdapter(fact_type(kind))
    assert json.loads(adapter.dump_json(adapter.validate_python(data))) == data


def test_a_wrong_type_is_caught_by_the_schema():
    data = parse("nvidia-smi", next(p for k, p in REAL_OUTPUTS if k == "nvidia-smi").read_text())
    wrong = data.to_json()
    wrong["gpus"][0]["memory_total_mib"] = "81920MiB"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wrong, schema("nvidia-smi"))


def test_every_difference_from_the_first_contract_says_why():
    assert undeclared_differences() == []


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="../shared is not beside the repository")
def test_shared_keys_are_what_the_first_contract_says():
    text = (FIXTURES.parent / "FACTS.md").read_text()
    rows = {m[1]: m[2] for m in re.finditer(r"^\| `([a-z0-9-]+)` \|[^|]*\|(.*)$", text, re.M)}
    assert set(rows) == set(SHARED_KEYS)
    for kind, keys in SHARED_KEYS.items():
        for key in keys:
            assert f"`{key}`" in rows[kind], f"{kind}: {key} is not in ../shared/FACTS.md"


def test_check_command_reports_a_stale_document(tmp_path, capsys):
    stale = tmp_path / "FACTS.md"
    stale.write_text(render().replace("## nvidia-smi\n", "## nvidia-smi (edited)\n"))
    assert main(["--check", str(stale)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert main(["--write", str(stale)]) == 0
    assert main(["--check", str(stale)]) == 0


def _against(kind: str) -> str:
    section = render().split(f"\n## {kind}\n", 1)[1]
    return next(line for line in section.splitlines() if line.startswith("Against ../shared"))


def test_a_nested_key_the_first_contract_lacks_is_named_and_explained():
    """ibv-devinfo's HCAs carry board_id, which ../shared/FACTS.md does not list: the
    document said 'the same keys' (only top-level keys were compared)."""
    assert "ibv-devinfo: IbvHca.board_id" not in undeclared_differences()
    line = _against("ibv-devinfo")
    assert "`IbvHca.board_id`" in line and "the same keys" not in line


def test_the_found_additions_are_printed_beside_the_written_reason():
    """A kind with a written reason still shows every key found beyond the first contract:
    a key added later cannot hide behind an older explanation."""
    line = _against("nvidia-smi")
    assert "`GpuStatus.bus_id`" in line and "KMD Version" in line


def test_an_added_key_the_reason_does_not_name_is_undeclared(monkeypatch):
    from wizard.facts import contract

    monkeypatch.setitem(contract.DIFFERENCES, "perftest", "adds `kind` (which table).")
    assert undeclared_differences() == ["perftest: PerftestRow.cpu_util_percent"]


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="../shared is not beside the repository")
def test_shared_nested_keys_are_what_the_first_contract_says():
    from wizard.facts.contract import SHARED_NESTED

    text = (FIXTURES.parent / "FACTS.md").read_text()
    rows = {m[1]: m[2] for m in re.finditer(r"^\| `([a-z0-9-]+)` \|[^|]*\|(.*)$", text, re.M)}
    assert set(SHARED_NESTED) <= set(SHARED_KEYS)
    for kind, types in SHARED_NESTED.items():
        for keys in types.values():
            for key in keys:
                assert re.search(rf"[{{, ]{key}\b", rows[kind]), f"{kind}: {key} is not there"


def test_the_header_names_the_scarce_kinds_with_their_counts():
    from wizard.facts.contract import SCARCE

    header = render().split("| kind |", 1)[0]
    assert SCARCE
    for kind, (count, _) in SCARCE.items():
        assert f"`{kind}` ({count} real" in header
