"""Shared plumbing for the parsers: the error, input cleaning, the Fact base class.

Every parser is a pure function ``str -> Fact``: no network, no file system. Input that is
not the expected command's output at all raises ``ParseError`` with a one-line reason.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
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


# Rank labels that cannot be told from content line by line, so they count only when every
# line carries one: `srun --label` (Slurm's _build_label: "%*d: ", the task id padded to
# the widest id, "P1 0: " for a heterogeneous job's component) and MPICH/Intel MPI
# `-prepend-rank` / `-l` ("[0] "). A "0: " at the start of
# some lines is content (/proc/interrupts prints the same "%*d: "); srun's own messages
# ("srun: error: ...") are not labelled and do not count against it.
_SRUN_LABEL = re.compile(r"(?:P\d{1,6} )? {0,6}\d{1,7}:(?: |$)")
_PREPEND_RANK = re.compile(r"\[\d{1,7}\] ")
_LAUNCHER_OWN = "srun: "


def _whole_text_label(lines: list[str]) -> re.Pattern[str] | None:
    """The rank label every non-blank line starts with (launcher messages excepted)."""
    labelled = [line for line in lines if line.strip() and not line.startswith(_LAUNCHER_OWN)]
    for label in (_SRUN_LABEL, _PREPEND_RANK):
        if labelled and all(label.match(line) for line in labelled):
            return label
    return None


# The parts of a tag that do not name the stream a line came from: a timestamp changes on
# every line, and stdout and stderr of one rank are the same program.
_NOT_STREAM = re.compile(
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:?\d\d) "
    r"|<(?:stdout|stderr|stddiag)>: ?"
)
# How many stream names an error message lists at most.
_SHOWN_STREAMS = 4


def strip_line_tags(text: str) -> list[tuple[str, str]]:
    """Each line of ``text`` as (stream, line without the launcher prefixes of _LINE_TAG).

    For the parsers that read a table line by line (nccl-tests, nvidia-smi): a rule, not a
    case per launcher, so output captured through mpirun, a Kubernetes log or SkyPilot reads
    as the program printed it. The stream names where the line came from ("[1,0]" for rank 0
    of mpirun, "" for a line without a prefix): the prefix is the only record of it, and two
    ranks' tables interleaved line by line must not be read as one table. srun's and
    MPICH's rank labels are stripped only when every line carries one (see _SRUN_LABEL).
    """
    tagged = []
    for line in text.splitlines():
        tag = _LINE_TAG.match(line)
        if tag is None:
            tagged.append(("", line))
        else:
            tagged.append((_NOT_STREAM.sub("", tag[0]).strip(), line[tag.end() :]))
    label = _whole_text_label([line for _, line in tagged])
    if label is None:
        return tagged
    relabelled = []
    for stream, line in tagged:
        found = label.match(line)
        if found is None:  # a blank line or the launcher's own message
            relabelled.append((stream, line))
        else:
            name = " ".join(found[0].split())
            relabelled.append((f"{stream} {name}".strip(), line[found.end() :]))
    return relabelled


def one_stream(kind: str, text: str, is_content: Callable[[str], bool]) -> list[str]:
    """The lines of the one stream (rank, pod, untagged) whose lines hold the table, tags
    stripped. Lines of the other streams (a launcher's warnings, other ranks' log lines
    without table content) are left out. Table content in more than one stream is output
    of more than one program (every rank ran nvidia-smi, every rank printed its own
    table): ParseError, never a table mixed from several."""
    tagged = strip_line_tags(text)
    streams: dict[str, list[str]] = {}
    for stream, line in tagged:
        streams.setdefault(stream, []).append(line)
    holding = [stream for stream, lines in streams.items() if any(map(is_content, lines))]
    if len(holding) > 1:
        names = ", ".join(repr(stream or "untagged") for stream in holding[:_SHOWN_STREAMS])
        more = f" and {len(holding) - _SHOWN_STREAMS} more" if len(holding) > _SHOWN_STREAMS else ""
        raise ParseError(
            kind,
            f"table lines from {len(holding)} launcher streams ({names}{more}): the output of"
            " more than one program; give the lines of one rank only",
        )
    if holding:
        return streams[holding[0]]
    return [line for _, line in tagged]


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
