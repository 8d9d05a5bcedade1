"""At run time odd output from a host never crashes a live run (issue #18): a parser's
refusal and a parser's bug both become a probe without a fact, with the reason."""

from __future__ import annotations

import wizard.facts as facts
from wizard.facts import ParserInfo
from wizard.facts.system import parse_lsmod
from wizard.probe import _parsed
from wizard.transports.base import CommandResult


def result(stdout: str, status: int = 0) -> CommandResult:
    return CommandResult("gpu-1", "lsmod", status, stdout, "")


def test_hostile_output_is_a_probe_problem_not_an_exception():
    probe = _parsed(result("[" * 5000), parse_lsmod, None)
    assert not probe.ok and probe.problem.startswith("could not read the output")


def test_a_parser_bug_is_a_probe_problem_naming_it(monkeypatch):
    def broken(text: str):
        raise ZeroDivisionError("division by zero")

    broken.fact_kind = "lsmod"  # what @parser marks a registered parser with
    monkeypatch.setitem(facts.KINDS, "lsmod", ParserInfo("lsmod", "lsmod", broken))
    probe = _parsed(result("Module Size Used by\n"), broken, None)
    assert not probe.ok
    assert "lsmod parser failed: ZeroDivisionError" in probe.problem and "bug" in probe.problem
