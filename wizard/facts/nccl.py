"""NCCL facts: the NCCL_DEBUG=INFO log (which path the data took) and nccl-tests tables."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

# typing_extensions (a pydantic dependency): pydantic reads typing.TypedDict only on 3.12+.
from typing_extensions import TypedDict

from wizard.facts import parser
from wizard.facts.base import Fact, ParseError, clean, one_stream, to_float, to_int

_VERSION = re.compile(r"NCCL version (?P<version>\d+\.\d+\.\d+)(?:\+cuda(?P<cuda>[\d.]+))?")
_NET_IB = re.compile(r"NET/IB : Using\s+(?P<devices>.*?)(?:;\s*OOB\s+(?P<oob>\S+))?\s*$")
_NET_DEVICE = re.compile(
    r"\[(?P<index>\d+)\](?P<name>[^:\s\[]+):(?P<port>\d+)/(?P<layer>[A-Za-z]+)"
)
_OOB = re.compile(r"^(?P<if>[^:]+):(?P<ip>[^<]+)")
_ENV = re.compile(r"\b(?P<name>[A-Z][A-Z0-9_]+) set by environment to (?P<value>.*?)\s*$")
_DMABUF = re.compile(r"DMA-BUF is available on GPU device (?P<gpu>\d+)")
_GDR_DISABLED = re.compile(
    r"GPU Direct RDMA Disabled for HCA (?P<index>\d+) '(?P<hca>[^']+)'(?:\s*\((?P<reason>[^)]+)\))?"
)
# Channel lines are found in the whole text at once, so no part may cross a line end. A
# network plugin's name may hold spaces ("via NET/AWS Libfabric/0", aws-ofi-nccl): after
# "NET/" the name runs to the next "/".
_CHANNEL = re.compile(
    r"Channel (?P<channel>\d+)(?:/\d+)?[ \t]*:[ \t]*\d+\[[^\]\n]*\][ \t]*->[ \t]*\d+\[[^\]\n]*\]"
    r"(?:[ \t]*\[(?P<direction>send|receive)\])?[ \t]+via[ \t]+"
    r"(?P<via>NET/[^/\n]{1,64}/\S*|\S+)"
)
# A cheap superset of channel lines ("Channel " to the end of the line): findall of this runs
# at about 1 GB/s; the full _CHANNEL pattern then reads each distinct text once.
_CHANNEL_CANDIDATE = re.compile(r"Channel [^\n]*")
_NETWORK = re.compile(r"Using network (\w+)")
# "Bootstrap : Using eth0:10.0.0.1<0>" (2.18-2.22) and "Bootstrap: Using [0]eth0:..." (newer).
_BOOTSTRAP = re.compile(r"Bootstrap\s*:\s*Using\s+(?:\[\d+\])?(?P<if>[^:\s\[]+):(?P<ip>[^<\s]+)")
# WARN(...) in NCCL's debug.cc prints "host:pid:tid [dev] file.cc:line NCCL WARN message".
_WARN = re.compile(r"NCCL WARN\s*(?P<message>.*?)\s*$")
# src/transport.cc selectTransport(): no transport's canConnect() accepted the peer.
NO_TRANSPORT = "No transport found"
MAX_WARNINGS = 100
_INFO = re.compile(r"NCCL (INFO|WARN)")
# A pasted excerpt may have lost the "host:pid:tid [dev] NCCL INFO" prefix (the reporters of
# ../shared/fixtures/nccl-log/07.txt and NVIDIA/nccl#1584 stripped it): NCCL's own phrases.
# Not the version banner alone: nccl-tests prints it without NCCL_DEBUG too.
_PREFIXLESS = re.compile(
    r"^(?:Bootstrap ?: Using |NET/(?:IB|Socket|Plugin) ?: |"
    r"Channel \d+/\d+ ?: \d+\[)",
    re.MULTILINE,
)


# An interface and its address as NCCL prints them ("eth0:10.0.0.1<0>"): the key is "if".
Endpoint = TypedDict("Endpoint", {"if": str, "ip": str})


class GdrDisabled(TypedDict):
    """``GPU Direct RDMA Disabled for HCA 0 'mlx5_0' (no module)``."""

    hca: str
    index: int
    reason: str | None


@dataclass
class NetDevice(Fact):
    index: int
    name: str
    port: int
    link_layer: str


@dataclass
class NcclChannel(Fact):
    channel: int
    direction: str | None
    transport: str
    device_index: int | None
    gdr: bool
    shared: bool

    @property
    def is_net(self) -> bool:
        return self.transport.startswith("NET/")


@dataclass
class NcclLog(Fact):
    version: str | None
    net_devices: list[NetDevice]
    oob: Endpoint | None
    socket_only: bool
    env: dict[str, str]
    dmabuf_gpus: list[int]
    gdr_disabled: list[GdrDisabled]
    channels: list[NcclChannel]
    verdict: str
    cuda: str | None = None
    # Every distinct "NCCL WARN" message (at most MAX_WARNINGS), in order of appearance.
    warnings: list[str] = field(default_factory=list)
    # NCCL said "No transport found for rank ..." (src/transport.cc): the job cannot run.
    no_transport: bool = False
    bootstrap: Endpoint | None = None


def _channel(match: re.Match[str]) -> NcclChannel:
    parts = match["via"].split("/")
    if parts[0] == "NET" and len(parts) > 1:
        transport = f"NET/{parts[1]}"
        rest = parts[2:]
        device = int(rest.pop(0)) if rest and rest[0].isdigit() else None
    else:
        transport = "/".join(parts[:2]) if len(parts) > 1 else parts[0]
        rest = parts[2:]
        device = None
    return NcclChannel(
        channel=int(match["channel"]),
        direction=match["direction"],
        transport=transport,
        device_index=device,
        gdr="GDRDMA" in rest,
        shared="Shared" in rest,
    )


def _verdict(socket_only: bool, channels: list[NcclChannel], no_transport: bool = False) -> str:
    """Depends only on which kinds of channel occur (all, none or some with /GDRDMA), so the
    distinct channels give the same answer as every line. A rank pair with no transport at
    all ends the communicator's setup: nothing after it was measured."""
    if no_transport:
        return "no-transport"
    net = [c for c in channels if c.is_net]
    if socket_only or (net and all(c.transport == "NET/Socket" for c in net)):
        return "socket"
    net = [c for c in net if c.transport != "NET/Socket"]
    if not net:
        return "no-net"
    with_gdr = sum(c.gdr for c in net)
    if with_gdr == len(net):
        return "gdr"
    return "host-memory" if with_gdr == 0 else "mixed"


def _lines_with(text: str, needle: str) -> Iterator[str]:
    """Every line of `text` that contains `needle`, in order, each once.

    str.find runs at memchr speed, so a 25 MB log with a handful of interesting lines costs a
    few scans instead of a Python loop over every line (the benchmark goal is within 10x of
    `grep -c`).
    """
    position = text.find(needle)
    while position != -1:
        start = text.rfind("\n", 0, position) + 1
        end = text.find("\n", position)
        end = len(text) if end == -1 else end
        yield text[start:end]
        position = text.find(needle, end)


def _channels(text: str) -> tuple[list[NcclChannel], list[NcclChannel]]:
    """Every channel line in order, and the distinct ones.

    A multi-rank log repeats the same few "Channel NN/.. via NET/IB/0/GDRDMA" texts thousands
    of times, so each distinct text is parsed once (identical lines share one NcclChannel) and
    the ordered list is rebuilt by lookup.
    """
    found = _CHANNEL_CANDIDATE.findall(text)
    parsed = {key: _CHANNEL.match(key) for key in dict.fromkeys(found)}
    distinct = {key: _channel(match) for key, match in parsed.items() if match}
    if len(distinct) == len(parsed):
        return [distinct[key] for key in found], list(distinct.values())
    return [distinct[key] for key in found if key in distinct], list(distinct.values())


@parser("nccl-log", "NCCL_DEBUG=INFO output")
def parse_nccl_log(text: str) -> NcclLog:
    text = clean(text, "nccl-log")
    if not (_INFO.search(text) or _PREFIXLESS.search(text)):
        raise ParseError("nccl-log", "no 'NCCL INFO' lines: run with NCCL_DEBUG=INFO")
    version = cuda = None
    for line in _lines_with(text, "NCCL version"):
        if m := _VERSION.search(line):
            version, cuda = m["version"], m["cuda"]
            break
    devices: dict[tuple[int, str], NetDevice] = {}
    oob = None
    # The whole phrase NCCL prints, not "NET/IB": every channel line of a large log says NET/IB.
    for line in _lines_with(text, "NET/IB : Using"):
        if " via " in line or not (m := _NET_IB.search(line)):
            continue
        for d in _NET_DEVICE.finditer(m["devices"]):
            key = (int(d["index"]), d["name"])
            devices.setdefault(
                key, NetDevice(int(d["index"]), d["name"], int(d["port"]), d["layer"])
            )
        if oob is None and m["oob"] and (o := _OOB.match(m["oob"])):
            oob = {"if": o["if"], "ip": o["ip"]}
    network = {m[1] for line in _lines_with(text, "Using network") if (m := _NETWORK.search(line))}
    env: dict[str, str] = {}
    for line in _lines_with(text, " set by environment to "):
        if m := _ENV.search(line):
            value = m["value"]
            env[m["name"]] = value[:-1] if value.endswith(".") else value
    dmabuf = {
        int(m["gpu"])
        for line in _lines_with(text, "DMA-BUF is available")
        if (m := _DMABUF.search(line))
    }
    disabled: dict[str, GdrDisabled] = {}
    for line in _lines_with(text, "Disabled for HCA"):
        if m := _GDR_DISABLED.search(line):
            disabled.setdefault(
                m["hca"], {"hca": m["hca"], "index": int(m["index"]), "reason": m["reason"]}
            )
    warnings: dict[str, None] = {}
    for line in _lines_with(text, "NCCL WARN"):
        if len(warnings) >= MAX_WARNINGS:
            break
        if (m := _WARN.search(line)) and m["message"]:
            warnings.setdefault(m["message"][:500])
    no_transport = any(NO_TRANSPORT in w for w in warnings)
    bootstrap = None
    for line in _lines_with(text, "Bootstrap"):
        if m := _BOOTSTRAP.search(line):
            bootstrap = {"if": m["if"], "ip": m["ip"]}
            break
    channels, distinct_channels = _channels(text)
    # "Using network Socket" says it outright; an excerpt without that line still shows it:
    # NET/IB found no device (or listed none) and NET/Socket listed its interfaces.
    socket_listed = next(_lines_with(text, "NET/Socket : Using"), None) is not None
    socket_only = ("Socket" in network and not (network - {"Socket"})) or (
        not network and not devices and socket_listed
    )
    return NcclLog(
        version=version,
        net_devices=sorted(devices.values(), key=lambda d: (d.index, d.name)),
        oob=oob,
        socket_only=socket_only,
        env=env,
        dmabuf_gpus=sorted(dmabuf),
        gdr_disabled=list(disabled.values()),
        channels=channels,
        verdict=_verdict(socket_only, distinct_channels, no_transport),
        cuda=cuda,
        warnings=list(warnings),
        no_transport=no_transport,
        bootstrap=bootstrap,
    )


# -- nccl-tests ----------

_METRIC_KEYS = (
    "oop_time_us", "oop_algbw", "oop_busbw", "oop_wrong",
    "ip_time_us", "ip_algbw", "ip_busbw", "ip_wrong",
)  # fmt: skip
_ROW_KEYS_ROOT = ("size", "count", "type", "redop", "root", *_METRIC_KEYS)
_ROW_KEYS_NO_ROOT = ("size", "count", "type", "redop", *_METRIC_KEYS)
# Tests without a reduction (broadcast, all_gather of older nccl-tests) print root only.
_ROW_KEYS_NO_REDOP = ("size", "count", "type", "root", *_METRIC_KEYS)
_INT_KEYS = {"size", "count", "root"}
_STR_KEYS = {"type", "redop"}


def _header_layout(body: str) -> tuple[str, ...]:
    """The row layout a table header announces: ``redop`` and ``root`` come and go between
    nccl-tests versions and tests (an old all_gather header: ``size count type root time``)."""
    words = body.split()
    middle = words[words.index("type") + 1 :] if "type" in words else []
    extra = tuple(w for w in middle[:2] if w in ("redop", "root"))
    return ("size", "count", "type", *extra, *_METRIC_KEYS)


_ROW_KEYS_NEITHER = ("size", "count", "type", *_METRIC_KEYS)
# Cells in a result row: both redop and root, one of them, neither (nccl-tests of NCCL 2.6).
_ROW_LENGTHS = (11, 12, 13)


def _guess_layout(tokens: list[str]) -> tuple[str, ...]:
    """A row without its header: 13 cells have both, 12 miss one, 11 neither (nccl-tests
    of the NCCL 2.6 days, NVIDIA/nccl#340); a number in the fourth cell of 12 is a root
    (-1 or a rank), a word is a reduction."""
    if len(tokens) == 11:
        return _ROW_KEYS_NEITHER
    if len(tokens) == 13:
        return _ROW_KEYS_ROOT
    return _ROW_KEYS_NO_REDOP if tokens[3].lstrip("-").isdigit() else _ROW_KEYS_NO_ROOT


class NcclTestsRow(TypedDict):
    """One row of the result table; ``redop`` and ``root`` are null where the table has no
    such column (older nccl-tests, tests without a reduction)."""

    size: int | None
    count: int | None
    type: str
    redop: str | None
    root: int | None
    oop_time_us: float | None
    oop_algbw: float | None
    oop_busbw: float | None
    oop_wrong: int | None
    ip_time_us: float | None
    ip_algbw: float | None
    ip_busbw: float | None
    ip_wrong: int | None


@dataclass
class NcclTests(Fact):
    rows: list[NcclTestsRow]
    avg_busbw: float | None
    out_of_bounds: int | None
    test: str | None = None


def _cell(key: str, token: str) -> Any:
    if key in _STR_KEYS:
        return token
    if key in _INT_KEYS or key.endswith("_wrong"):
        return to_int(token)
    return to_float(token)


def _is_table_line(line: str) -> bool:
    """A header, a result row or the average of an nccl-tests table, for picking one
    rank's lines."""
    stripped = line.strip()
    if stripped.startswith("#"):
        body = stripped.lstrip("#").strip()
        return (body.startswith("size") and "count" in body) or body.startswith("Avg bus")
    tokens = stripped.split(maxsplit=13)
    return len(tokens) in _ROW_LENGTHS and tokens[0].isdigit() and not tokens[2][:1].isdigit()


@parser("nccl-tests", "all_reduce_perf (nccl-tests)")
def parse_nccl_tests(text: str) -> NcclTests:
    """The one test's table. A log of several tests (all_reduce_perf, then all_gather_perf)
    holds one table per test: a second ``Collective test starting:`` or a second header
    after rows is refused, so that no row or average is credited to the wrong test."""
    # mpirun --tag-output, SkyPilot and kubectl prefixes are not part of the table.
    lines = one_stream("nccl-tests", clean(text, "nccl-tests"), _is_table_line)
    keys: tuple[str, ...] | None = None
    seen_header = False
    rows: list[NcclTestsRow] = []
    avg = None
    oob = None
    test = None

    def second_test(name: str | None) -> ParseError:
        names = ", ".join(n for n in (test, name) if n) or "no test names printed"
        return ParseError(
            "nccl-tests", f"more than one test in one log ({names}): give each test's output alone"
        )

    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#"):
            body = stripped.lstrip("#").strip()
            if body.startswith("size") and "count" in body:
                if rows or avg is not None:
                    raise second_test(None)
                seen_header = True
                keys = _header_layout(body)
            elif m := re.match(r"Avg bus bandwidth\s*:\s*([\d.]+)", body):
                avg = float(m.group(1))
            elif m := re.match(r"Out of bounds values\s*:\s*(\d+)", body):
                oob = int(m.group(1))
            elif m := re.match(r"Collective test starting:\s*(\S+)", body):
                if test is not None or rows or avg is not None:
                    raise second_test(m.group(1))
                test = m.group(1)
            elif body.startswith("nThread"):
                seen_header = True
            continue
        tokens = stripped.split()
        if len(tokens) not in _ROW_LENGTHS or not tokens[0].isdigit() or tokens[2][:1].isdigit():
            continue
        layout = keys or _guess_layout(tokens)
        if len(layout) != len(tokens):
            continue
        rows.append({k: _cell(k, t) for k, t in zip(layout, tokens, strict=True)})
    if not rows and not seen_header and avg is None:
        raise ParseError("nccl-tests", "no nccl-tests header, result rows or 'Avg bus bandwidth'")
    for row in rows:  # the contract has both columns, null where the table has none
        row.setdefault("root", None)
        row.setdefault("redop", None)
    return NcclTests(rows, avg, oob, test)
