"""Several read-only commands in one SSH exec, each with its own exit status and output.

A fleet check runs about 26 probes per node; as separate channels that is 1,700 channel
opens for 64 nodes, which is most of the wizard's CPU on a jump host. A step's independent
reads therefore go in one exec of a fixed POSIX sh script. The commands are the script's
arguments (shell-quoted like any argv), never pasted into its text.

Wire format, per command, in order: a header line ``GNW-BATCH <index> <status> <stdout
bytes> <stderr bytes>``, then exactly that many bytes of stdout and of stderr. Byte counts
rather than delimiters, so any output (no trailing newline, a line that looks like a
header, binary) is split correctly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

HEADER = b"GNW-BATCH"
# Exit status of the script itself when it cannot make its scratch directory: the caller
# then runs the commands one by one.
NO_SCRATCH_STATUS = 125

BATCH_SCRIPT = (
    "d=$(mktemp -d) || exit 125; trap 'rm -rf \"$d\"' EXIT; i=0; "
    'for c in "$@"; do '
    'sh -c "$c" </dev/null >"$d/o" 2>"$d/e"; r=$?; '
    'printf "GNW-BATCH %s %s %s %s\\n" "$i" "$r" "$(wc -c <"$d/o")" "$(wc -c <"$d/e")"; '
    'cat "$d/o" "$d/e"; i=$((i+1)); '
    "done"
)


class BatchFormatError(ValueError):
    """The output does not follow the wire format (e.g. it was cut off)."""


@dataclass(frozen=True)
class BatchPart:
    """One command's share of a batch's output."""

    index: int
    exit_status: int
    stdout: bytes
    stderr: bytes


def batch_command(commands: Sequence[str]) -> list[str]:
    """The argv that runs ``commands`` (shell command lines) one after another."""
    return ["sh", "-c", BATCH_SCRIPT, "sh", *commands]


def encode_batch_output(parts: Sequence[BatchPart]) -> bytes:
    """What the script prints for these results (the lab plays the shell with this)."""
    chunks = []
    for part in parts:
        header = f"GNW-BATCH {part.index} {part.exit_status} {len(part.stdout)} {len(part.stderr)}"
        chunks += [header.encode(), b"\n", part.stdout, part.stderr]
    return b"".join(chunks)


def decode_batch_output(data: bytes) -> list[BatchPart]:
    """Split a batch's stdout into its parts; the complete ones when the output was cut off.

    Raises BatchFormatError when the data is not in the wire format at all.
    """
    parts: list[BatchPart] = []
    position = 0
    while position < len(data):
        end = data.find(b"\n", position)
        if end == -1:
            break  # a header cut off mid-line
        fields = data[position:end].split()
        if len(fields) != 5 or fields[0] != HEADER:
            raise BatchFormatError(f"unexpected line in batch output: {data[position:end][:80]!r}")
        try:
            index, status, out_size, err_size = (int(f) for f in fields[1:])
        except ValueError:
            raise BatchFormatError(f"bad batch header: {data[position:end][:80]!r}") from None
        if index != len(parts):
            raise BatchFormatError(f"batch part {index} arrived where {len(parts)} was due")
        out_start = end + 1
        err_start = out_start + out_size
        stop = err_start + err_size
        if stop > len(data):
            break  # output cut off inside this part
        parts.append(BatchPart(index, status, data[out_start:err_start], data[err_start:stop]))
        position = stop
    return parts
