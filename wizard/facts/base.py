"""Shared plumbing for the parsers: the error, input cleaning, the Fact base class.

Every parser is a pure function ``str -> Fact``: no network, no file system. Input that is
not the expected command's output at all raises ``ParseError`` with a one-line reason.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

_HEADER = re.compile(r"^# (source|note):")
# Control characters that mark binary input; tab, \n, \v, \f, \r and ESC (colour codes) are
# text.
_BINARY_CHARACTERS = "".join(
    map(chr, [*range(0x00, 0x09), *range(0x0E, 0x1B), *range(0x1C, 0x20), 0x7F])
)


class ParseError(ValueError):
    """The text is not the output this parser reads. The message is one line."""

    def __init__(self, kind: str, reason: str) -> None:
        self.kind = kind
        self.reason = reason
        super().__init__(f"{kind}: {reason}")


@dataclasses.dataclass
class Fact:
    """Base of every parsed fact: a dataclass that serialises to the FACTS.md JSON."""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def clean(text: str, kind: str) -> str:
    """Normalise line ends, drop fixture header lines, refuse empty or binary input.

    Written with whole-text str operations (memchr speed): logs of tens of MB pass through here.
    """
    if not isinstance(text, str):
        raise ParseError(kind, "input is not text")
    if any(character in text for character in _BINARY_CHARACTERS):
        raise ParseError(kind, "input contains binary data")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    while _HEADER.match(text):
        end = text.find("\n")
        text = "" if end == -1 else text[end + 1 :]
    if not text or text.isspace():
        raise ParseError(kind, "input is empty")
    return text


# What launchers and log collectors put in front of every line of a program's output, none
# of it the program's: Open MPI's `mpirun --tag-output` ("[1,0]<stdout>:", orte/prte
# iof), SkyPilot/Ray's per-node "(head, rank=0, pid=3808) ", `kubectl logs --prefix`
# ("[pod/NAME/CONTAINER] ") and `kubectl logs --timestamps` (RFC 3339, "2024-05-01T12:00:00.
# 123456789Z "). They stack ("(head, ...) [1,0]<stdout>:"), so the group repeats; every
# alternative is bounded, so one line costs at most a few hundred steps.
_LINE_TAG = re.compile(
    r"^(?:\[\d{1,9},\d{1,9}\]<(?:stdout|stderr|stddiag)>: ?"
    r"|\([\w.-]{1,64}(?:, [\w.=-]{1,64}){0,8}\) "
    r"|\[pod/[^\]\s]{1,300}\] "
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:?\d\d) )+",
    re.MULTILINE,
)


def strip_line_tags(text: str) -> str:
    """``text`` without the launcher prefixes of _LINE_TAG at the start of each line.

    For the parsers that read a table line by line (nccl-tests, nvidia-smi): a rule, not a
    case per launcher, so output captured through mpirun, a Kubernetes log or SkyPilot reads
    as the program printed it. Lines without a prefix stay as they are.
    """
    return _LINE_TAG.sub("", text)


def to_int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value.strip())
    except ValueError:
        return None


def to_float(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value.strip())
    except ValueError:
        return None


def key_values(text: str, sep: str = ":") -> dict[str, str]:
    """``key: value`` lines into a dict (first occurrence wins, both sides stripped)."""
    result: dict[str, str] = {}
    for line in text.splitlines():
        key, found, value = line.partition(sep)
        if found and key.strip() and key.strip() not in result:
            result[key.strip()] = value.strip()
    return result
