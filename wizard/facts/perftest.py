"""perftest facts: ib_write_bw / ib_read_bw / ib_send_bw / ib_*_lat client or server output."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

# typing_extensions (a pydantic dependency): pydantic reads typing.TypedDict only on 3.12+.
from typing_extensions import TypedDict

from wizard.facts import parser
from wizard.facts.base import Fact, ParseError, clean, one_stream, to_int

_TITLE = re.compile(r"^\s*(?P<title>[A-Za-z_ ]+?(?:BW|Latency|Lat)[A-Za-z ]*Test)\s*$")
MAX_PAIR_LINE = 512
_PAIR = re.compile(r"(?P<key>[A-Za-z][A-Za-z0-9_.* -]*?)\s*:\s*(?P<value>[^\s:]+)")
_ERROR = re.compile(
    r"couldn't|failed|unable|error|cannot|invalid|refused|not supported|unrecognized|"
    r"timed out|mismatch|not found",
    re.IGNORECASE,
)
# Lines perftest prints when a run cannot start or fails: enough to recognise its output
# when there is no test header or result table at all.
_PERFTEST_FAILURE = re.compile(
    r"^(Couldn't connect to|Unable to init the socket connection|Unable to open file descriptor"
    r"|Failed to modify QP|Failed to create QP|Couldn't get device|IB device \S+ not found"
    r"|Parser function exited with Error|.*cannot be used without CUDA|Couldn't allocate"
    r"|Unable to find the Infiniband|Couldn't create|Failed to deallocate|Couldn't listen|Unable to create the CUDA"
    r"|Completion with error|Problems with warm up)",
    re.IGNORECASE,
)
_WARNING = re.compile(
    r"perftest doesn't|requested mtu|conflicting cpu frequency|warning|inline size set",
    re.IGNORECASE,
)
# Header column -> result key.
_BW_COLUMNS = {
    "#bytes": "bytes",
    "#iterations": "iterations",
    "BW peak": "bw_peak",
    "BW average": "bw_average",
    "MsgRate": "msg_rate_mpps",
    "CPU_Util": "cpu_util_percent",  # --cpu_util in duration mode adds this column
}
_LAT_COLUMNS = {
    "#bytes": "bytes",
    "#iterations": "iterations",
    "t_min": "t_min_us",
    "t_max": "t_max_us",
    "t_typical": "t_typical_us",
    "t_avg": "t_avg_us",
    "t_stdev": "t_stdev_us",
    "99% percentile": "p99_us",
    "99.9% percentile": "p99_9_us",
}


class PerftestRow(TypedDict, total=False):
    """A result row: the bandwidth keys or the latency keys, those the header announced
    (null where a row has fewer numbers than the header has columns)."""

    bytes: int | None
    iterations: int | None
    bw_peak: float | int | None
    bw_average: float | int | None
    msg_rate_mpps: float | int | None
    cpu_util_percent: float | int | None
    t_min_us: float | int | None
    t_max_us: float | int | None
    t_typical_us: float | int | None
    t_avg_us: float | int | None
    t_stdev_us: float | int | None
    p99_us: float | int | None
    p99_9_us: float | int | None


@dataclass
class Perftest(Fact):
    test: str | None
    device: str | None
    link_type: str | None
    transport: str | None
    mtu: int | None
    gid_index: int | None
    qps: int | None
    rdma_cm: bool | None
    tos: int | None
    units: str | None
    results: list[PerftestRow]
    error: str | None
    warnings: list[str] = field(default_factory=list)
    kind: str | None = None  # "bw" or "lat"

    @property
    def best_bw_gbps(self) -> float | None:
        """The highest average bandwidth in Gb/s (MB/sec converted), or None."""
        values = [r["bw_average"] for r in self.results if r.get("bw_average") is not None]
        if not values:
            return None
        best = max(values)
        return best * 8 / 1000 if self.units == "MB/sec" else best


def _header_columns(line: str) -> tuple[str, list[str], str | None] | None:
    """Recognise a result table header; return (kind, keys, units)."""
    if "#bytes" not in line:
        return None
    units = None
    unit = re.search(r"BW peak\[(?P<u>[^\]]+)\]", line)
    if unit:
        units = unit["u"]
        mapping = _BW_COLUMNS
        kind = "bw"
    else:
        mapping = _LAT_COLUMNS
        kind = "lat"
    positions = []
    for label, key in mapping.items():
        index = line.find(label)
        if index >= 0:
            positions.append((index, key))
    # "99% percentile" is also a prefix position inside "99.9% percentile": keep distinct.
    positions.sort()
    return kind, [key for _, key in positions], units


def _number(token: str) -> float | int | None:
    try:
        return int(token)
    except ValueError:
        try:
            return float(token)
        except ValueError:
            return None


def _is_perftest_line(line: str) -> bool:
    """The test title or the result header, for picking one rank's lines."""
    line = line.strip()
    return len(line) <= MAX_PAIR_LINE and bool(_TITLE.match(line) or _header_columns(line))


@parser("perftest", "ib_write_bw | ib_read_bw | ib_send_bw | ib_*_lat")
def parse_perftest(text: str) -> Perftest:
    # kubectl logs --prefix / --timestamps or mpirun tags in front of the lines are not its own.
    lines = one_stream("perftest", clean(text, "perftest"), _is_perftest_line)
    values: dict[str, str] = {}
    title = None
    kind = None
    columns: list[str] = []
    units = None
    results: list[PerftestRow] = []
    errors: list[str] = []
    warnings: list[str] = []
    for raw in lines:
        line = raw.strip()
        if not line or set(line) <= {"-", "*"}:
            continue
        if title is None and (match := _TITLE.match(line)):
            title = match["title"].strip()
            continue
        header = _header_columns(line)
        if header:
            kind, columns, units = header
            continue
        if columns and re.match(r"^\d", line):
            numbers = [_number(t) for t in line.split()]
            if len(numbers) >= 2 and all(n is not None for n in numbers):
                row: dict[str, Any] = dict.fromkeys(columns)
                row.update(zip(columns, numbers, strict=False))
                results.append(row)
                continue
        if _WARNING.search(line):
            warnings.append(line)
            continue
        if _ERROR.search(line):
            errors.append(line)
            continue
        # perftest's "key : value" lines are short; the pair pattern backtracks on a long
        # line without a colon (quadratic), so only short lines with a colon are scanned.
        if (
            ":" in raw
            and len(raw) <= MAX_PAIR_LINE
            and not line.startswith(("local address", "remote address", "GID:"))
        ):
            for match in _PAIR.finditer(raw):
                values.setdefault(match["key"].strip(), match["value"])
    if title is None and not results and not any(_PERFTEST_FAILURE.match(e) for e in errors):
        raise ParseError("perftest", "no test title, result table or perftest error message")
    mtu = values.get("Mtu")
    rdma_cm = values.get("rdma_cm QPs")
    return Perftest(
        test=title,
        device=values.get("Device"),
        link_type=values.get("Link type"),
        transport=values.get("Transport type"),
        mtu=to_int(mtu.split("[")[0]) if mtu else None,
        gid_index=to_int(values.get("GID index")),
        qps=to_int(values.get("Number of qps")),
        rdma_cm=None if rdma_cm is None else rdma_cm.upper() == "ON",
        tos=to_int(values.get("TOS")),
        units=units,
        results=results,
        error="; ".join(errors) if errors else None,
        warnings=warnings,
        kind=kind,
    )
