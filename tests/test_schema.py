"""`gpu-node-wizard schema`: the site file's JSON Schema, for editors (issue #18)."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from frontend.cli import build_parser, main
from tests.conftest import MINIMAL_SITE
from wizard.artifacts import render


def schema_from_cli(capsys) -> dict:
    capsys.readouterr()
    assert main(["schema"]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_init_example_and_a_minimal_site_validate(capsys):
    schema = schema_from_cli(capsys)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    example = yaml.safe_load(render("site/example-site.yaml.j2", name="b300-rollout"))
    assert list(validator.iter_errors(example)) == []
    assert list(validator.iter_errors(yaml.safe_load(MINIMAL_SITE))) == []


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"qos": {"pfc_prioritys": [3]}}, "pfc_prioritys"),  # a typo'd key
        ({"qos": {"dscp": 64}}, "64"),
        ({"qos": {"dscp": "24"}}, "'24'"),  # strict: no coercion
        ({"qos": {"ecn": 1}}, "1"),
        ({"ssh": {"port": 0}}, "0"),
    ],
)
def test_what_the_loader_refuses_the_schema_flags(capsys, change, where):
    validator = jsonschema.Draft202012Validator(schema_from_cli(capsys))
    site = {**yaml.safe_load(MINIMAL_SITE), **change}
    errors = list(validator.iter_errors(site))
    assert errors and any(where in e.message for e in errors)


def test_out_writes_the_file_and_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "site.schema.json"
    assert main(["schema", "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == schema_from_cli(capsys)
    capsys.readouterr()
    assert main(["schema", "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main(["schema", "--out", str(out), "--force"]) == 0
    assert main(["schema", "--out", str(tmp_path)]) == 2


def test_schema_is_in_the_help():
    assert "schema" in build_parser().format_help()
