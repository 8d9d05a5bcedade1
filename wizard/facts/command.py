"""A remote command and the parser of its output, declared once, next to the parser.

``Command(argv, parser)`` is what a step runs (``probe(ctx, COMMAND)``, ``Read(COMMAND)``
in ``read_all``), what the runbook and the export print (``read_lines``), and what the
lab's simulated host answers (``@lab_tool(COMMAND)`` in simulator/host/dispatch.py): one
object, so a new check with a new command is written in three places (the step, the parser
with its samples, the lab tool) and its command line in one of them. The parser's kind
(``@parser(kind)``) documents the command from here (``ParserInfo.command``), so the
facts contract (docs/FACTS.md) shows the same line.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from wizard.facts.base import Fact

F = TypeVar("F", bound=Fact)


@dataclass(frozen=True)
class Command(Generic[F]):
    """``argv`` as sent to the host (every word quoted by the transport), whose output
    ``parser`` reads into an ``F``."""

    argv: tuple[str, ...]
    parser: Callable[[str], F]
    note: str = ""  # shown after the command in the runbook

    def __post_init__(self) -> None:
        from wizard.facts import KINDS  # the registry of parsers (this module is below it)

        kind = self.kind
        info = KINDS.get(kind)
        if info is None or info.function is not self.parser:
            raise RuntimeError(f"{self.parser.__name__} is not a registered parser")
        if not self.argv or not all(isinstance(word, str) and word for word in self.argv):
            raise ValueError(f"{kind}: a command is a non-empty argv of non-empty words")
        if not info.command:
            KINDS[kind] = type(info)(kind, self.text, info.function)

    @property
    def kind(self) -> str:
        """The parser's kind (its ``@parser`` name): the facts contract's key."""
        return getattr(self.parser, "fact_kind", "")

    @property
    def tool(self) -> str:
        """The program the host runs: what the lab's tool for it is keyed by."""
        return self.argv[0]

    @property
    def text(self) -> str:
        """The command line as the runbook shows it and the transport sends it."""
        return shlex.join(self.argv)

    def parse(self, output: str) -> F:
        """The typed fact of ``output`` (ParseError when it is not this command's)."""
        from wizard.facts import parse

        fact = parse(self.kind, output)
        return fact  # type: ignore[return-value]  # parse returns what self.parser returns
