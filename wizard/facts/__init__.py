"""Facts: one pure parser per command output, the JSON contract of ../shared/FACTS.md.

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


def parse(kind: str, text: str) -> Fact:
    """Parse ``text`` as the output of ``kind``; raise ParseError if it is not."""
    try:
        info = KINDS[kind]
    except KeyError:
        raise ParseError(kind, f"unknown kind; known: {', '.join(sorted(KINDS))}") from None
    return info.function(text)


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
