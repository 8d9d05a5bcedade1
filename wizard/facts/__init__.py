"""Facts: one pure parser per command output, typed; docs/FACTS.md is generated from the types.

``parse(parse_lsmod, text)`` returns the parser's own type (an ``Lsmod``): a registered parser
is the typed key of its kind, as a ``ResultKey`` is of a step's result, so a read of a fact
is typed where it is made. ``parse("lsmod", text)`` (a kind by its name, returning the base
``Fact``) is for what picks the kind at run time: ``gpu-node-wizard parse KIND``, the facts
contract, the sample tests. ``KINDS`` lists what exists. Parser modules register themselves
with ``@parser``; importing this package imports them all.
A ``Command`` (wizard/facts/command.py) is a remote command and its parser declared once,
next to the parser: the step runs it, the runbook prints it, the lab answers it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, overload

from wizard.facts.base import Fact, ParseError

F = TypeVar("F", bound=Fact)


@dataclass(frozen=True)
class ParserInfo:
    kind: str
    command: str  # the command whose output it reads, as the facts contract shows it
    function: Callable[[str], Fact]


KINDS: dict[str, ParserInfo] = {}


def parser(kind: str, command: str = "") -> Callable[[Callable[[str], F]], Callable[[str], F]]:
    """Register ``function`` as the parser of ``kind`` (the output of ``command``; left
    out when a ``Command`` declares the command line, which then fills it in)."""

    def register(function: Callable[[str], F]) -> Callable[[str], F]:
        if kind in KINDS:
            raise RuntimeError(f"parser kind {kind} registered twice")
        KINDS[kind] = ParserInfo(kind, command, function)
        function.fact_kind = kind  # type: ignore[attr-defined]  # Command.kind reads it
        return function

    return register


# No command the wizard reads prints this much; more is a mistake or hostile, refused
# before any parser looks at it.
MAX_INPUT_BYTES = 64 << 20


def kind_of(function: Callable[[str], Fact]) -> str:
    """The kind a registered parser reads (its ``@parser`` name); TypeError for anything
    else, a kind's name among it: a read names its parser, whose return type is the fact's."""
    kind = getattr(function, "fact_kind", None)
    if not isinstance(kind, str) or kind not in KINDS or KINDS[kind].function is not function:
        raise TypeError(f"{function!r} is not a registered parser (wizard.facts)")
    return kind


@overload
def parse(kind: Callable[[str], F], text: str) -> F: ...
@overload
def parse(kind: str, text: str) -> Fact: ...
def parse(kind: str | Callable[[str], F], text: str) -> Fact:
    """Parse ``text`` as the output of ``kind`` (a registered parser: its fact typed; or a
    kind's name, picked at run time); raise ParseError if it is not.

    Hostile input only ever raises ParseError: too large, nested deeper than Python's
    recursion (a JSON ``[[[[...``), numbers beyond int's digit limit (4300 digits).
    """
    if not isinstance(kind, str):
        kind = kind_of(kind)
    try:
        info = KINDS[kind]
    except KeyError:
        raise ParseError(kind, f"unknown kind; known: {', '.join(sorted(KINDS))}") from None
    if len(text) > MAX_INPUT_BYTES:
        raise ParseError(
            kind, f"{len(text) >> 20} MB of output is more than {MAX_INPUT_BYTES >> 20} MB"
        )
    try:
        return info.function(text)
    except RecursionError:
        raise ParseError(kind, "nested too deeply to be this command's output") from None
    except (ValueError, OverflowError) as exc:
        if isinstance(exc, ParseError):
            raise
        raise ParseError(kind, f"a value out of range ({str(exc)[:80]})") from None


def unregister(kind: str) -> None:
    """Forget a parser (a test that registered its own)."""
    KINDS.pop(kind, None)


# Importing the modules registers their parsers.
from wizard.facts import (  # noqa: E402
    dcb,
    dcgm,
    gpu,
    host,
    kube,
    nccl,
    nic,
    pci,
    perftest,
    rdma,
    system,
)
from wizard.facts.command import Command  # noqa: E402

__all__ = [
    "KINDS",
    "Command",
    "Fact",
    "ParseError",
    "dcb",
    "dcgm",
    "gpu",
    "host",
    "kind_of",
    "kube",
    "nccl",
    "nic",
    "parse",
    "parser",
    "pci",
    "perftest",
    "rdma",
    "system",
]
