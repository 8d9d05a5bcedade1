"""Facts: one pure parser per command output, typed; docs/FACTS.md is generated from the types.

``parse(kind, text)`` returns a typed ``Fact``; ``KINDS`` lists what exists. Parser
modules register themselves with ``@parser``; importing this package imports them all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from wizard.facts.base import Fact, ParseError

F = TypeVar("F", bound=Fact)


@dataclass(frozen=True)
class ParserInfo:
    kind: str
    command: str
    function: Callable[[str], Fact]


KINDS: dict[str, ParserInfo] = {}


def parser(kind: str, command: str) -> Callable[[Callable[[str], F]], Callable[[str], F]]:
    """Register ``function`` as the parser of ``kind`` (the output of ``command``)."""

    def register(function: Callable[[str], F]) -> Callable[[str], F]:
        if kind in KINDS:
            raise RuntimeError(f"parser kind {kind} registered twice")
        KINDS[kind] = ParserInfo(kind, command, function)
        return function

    return register


# No command the wizard reads prints this much; more is a mistake or hostile, refused
# before any parser looks at it.
MAX_INPUT_BYTES = 64 << 20


def parse(kind: str, text: str) -> Fact:
    """Parse ``text`` as the output of ``kind``; raise ParseError if it is not.

    Hostile input only ever raises ParseError: too large, nested deeper than Python's
    recursion (a JSON ``[[[[...``), numbers beyond int's digit limit (4300 digits).
    """
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


# Importing the modules registers their parsers.
from wizard.facts import (  # noqa: E402
    dcb,
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

__all__ = [
    "KINDS",
    "Fact",
    "ParseError",
    "dcb",
    "gpu",
    "host",
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
