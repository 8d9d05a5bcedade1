"""Reads of facts are typed where they are made (#23, "reads that return typed facts"): a
read names the registered parser its output is read by, whose return type is the fact's, as
a ResultKey names a result's type. A kind's name in its place returned a bare Fact (a
``Probe[Any]`` through ``probe``), so a step reading a field its fact does not have showed
nowhere before a run; now the read's type is the parser's, and a name is refused."""

from __future__ import annotations

import ast
import typing

import pytest

from tests.conftest import REPO
from wizard import probe as probe_module
from wizard.facts import kind_of, parse
from wizard.facts.system import Lsmod, parse_lsmod
from wizard.probe import Probe, Read

LSMOD_OUTPUT = "Module                  Size  Used by\nirdma                 123456  0\n"


def test_a_read_by_its_parser_has_the_parsers_type():
    fact = parse(parse_lsmod, LSMOD_OUTPUT)
    assert isinstance(fact, Lsmod) and fact.loaded("irdma")
    assert kind_of(parse_lsmod) == "lsmod"
    assert Read(["lsmod"], parse_lsmod).kind == "lsmod"


def test_a_kind_by_its_name_or_an_unregistered_function_is_refused_at_the_read():
    with pytest.raises(TypeError, match="not a registered parser"):
        Read(["lsmod"], "lsmod")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a registered parser"):
        Read(["lsmod"], lambda text: Lsmod([]))


def test_no_overload_of_probe_returns_an_untyped_probe():
    """The kind-string overload returned ``Probe[Any]``; every overload now returns the
    ``Probe[F]`` of the parser (or the Command) it is given."""
    overloads = typing.get_overloads(probe_module.probe)
    assert overloads
    for overload in overloads:
        hints = typing.get_type_hints(overload, vars(probe_module))
        assert hints["return"] == Probe[probe_module.F], overload
        assert str not in typing.get_args(hints.get("parser", type(None)))


def _kind_names_read(path) -> list[str]:
    """Calls that read a fact by a kind's name: ``parse("k", ...)``, ``probe(ctx, c, "k")``,
    ``Read(c, "k")`` (or ``parser="k"``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        name = getattr(node.func, "id", getattr(node.func, "attr", ""))
        position = {"parse": 0, "probe": 2, "Read": 1}.get(name)
        if position is None:
            continue
        args = [
            *node.args[position : position + 1],
            *(k.value for k in node.keywords if k.arg == "parser"),
        ]
        if any(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in args):
            found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    return found


def test_no_step_or_core_module_reads_a_fact_by_a_kind_name():
    """The CLI's `parse KIND FILE`, the facts contract and the sample tests pick a kind at
    run time and read it by name; what the procedure reads, it reads by its parser."""
    files = sorted((REPO / "steps").rglob("*.py")) + sorted((REPO / "wizard").rglob("*.py"))
    assert [hit for path in files for hit in _kind_names_read(path)] == []
