"""NCCL facts: the NCCL_DEBUG=INFO log (which path the data took) and nccl-tests tables."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from wizard.facts import parser
from wizard.facts.base import Fact, ParseError, clean, to_float, to_int

_VERSION = re.compile(r"NCCL version (?P<version>\d+\.\d+\.\d+)(?:\+cuda(?P<cuda>[\d.]+))?")
_NET_IB = re.compile(r"NET/IB\s*:\s*Using\s+(?P<devices>.*?)(?:;\s*OOB\s+(?P<oob>\S+))?\s*$")
_NET_DEVICE = re.compile(
    r"\[(?P<index>\d+)\](?P<name>[^:\s\[]+):(?P<port>\d+)/(?P<layer>[A-Za-z]+)"
)
_OOB = re.compile(r"^(?P<if>[^:]+):(?P<ip>[^<]+)")
_ENV = re.compile(r"\b(?P<name>[A-Z][A-Z0-9_]+) set by environment to (?P<value>.*?)\s*$")
_DMABUF = re.compile(r"DMA-BUF is available on GPU device (?P<gpu>\d+)")
_GDR_DISABLED = re.compile(
    r"GPU Direct RDMA Disabled for HCA (?P<index>\d+) '(?P<hca>[^']+)'(?:\s*\((?P<reason>[^)]+)\))?"
)
_CHANNEL = re.compile(
    r"Channel (?P<channel>\d+)(?:/\d+)?\s*:\s*\d+\[[^\]]*\]\s*->\s*\d+\[[^\]]*\]"
    r"(?:\s*\[(?P<direction>send|receive)\])?\s+via\s+(?P<via>\S+)"
)
_INFO = re.compile(r"NCCL (INFO|WARN)")


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
    oob: dict[str, str] | None
    socket_only: bool
    env: dict[str, str]
    dmabuf_gpus: list[int]
    gdr_disabled: list[dict[str, Any]]
    channels: list[NcclChannel]
    verdict: str
    cuda: str | None = None


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


def _verdict(socket_only: bool, channels: list[NcclChannel]) -> str:
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


@parser("nccl-log", "NCCL_DEBUG=INFO output")
def parse_nccl_log(text: str) -> NcclLog:
    text = clean(text, "nccl-log")
    if not _INFO.search(text):
        raise ParseError("nccl-log", "no 'NCCL INFO' lines: run with NCCL_DEBUG=INFO")
    version = cuda = None
    devices: dict[tuple[int, str], NetDevice] = {}
    oob = None
    env: dict[str, str] = {}
    dmabuf: set[int] = set()
    disabled: dict[str, dict[str, Any]] = {}
    channels: list[NcclChannel] = []
    network: set[str] = set()
    for line in text.splitlines():
        # Cheap substring tests first: most log lines match none of the patterns below.
        if "NCCL" not in line and " via " not in line:
            continue
        if version is None and "NCCL version" in line and (m := _VERSION.search(line)):
            version, cuda = m["version"], m["cuda"]
        if " via " in line:
            if m := _CHANNEL.search(line):
                channels.append(_channel(m))
            continue
        if "NET/IB" not in line and "Using network" not in line and "environment" not in line \
                and "DMA-BUF" not in line and "Disabled for HCA" not in line:  # fmt: skip
            continue
        if m := _NET_IB.search(line):
            for d in _NET_DEVICE.finditer(m["devices"]):
                key = (int(d["index"]), d["name"])
                devices.setdefault(
                    key, NetDevice(int(d["index"]), d["name"], int(d["port"]), d["layer"])
                )
            if oob is None and m["oob"] and (o := _OOB.match(m["oob"])):
                oob = {"if": o["if"], "ip": o["ip"]}
        if m := re.search(r"Using network (\w+)", line):
            network.add(m.group(1))
        if m := _ENV.search(line):
            value = m["value"]
            env[m["name"]] = value[:-1] if value.endswith(".") else value
        if m := _DMABUF.search(line):
            dmabuf.add(int(m["gpu"]))
        if m := _GDR_DISABLED.search(line):
            disabled.setdefault(
                m["hca"], {"hca": m["hca"], "index": int(m["index"]), "reason": m["reason"]}
            )
    socket_only = "Socket" in network and not (network - {"Socket"})
    return NcclLog(
        version=version,
        net_devices=sorted(devices.values(), key=lambda d: (d.index, d.name)),
        oob=oob,
        socket_only=socket_only,
        env=env,
        dmabuf_gpus=sorted(dmabuf),
        gdr_disabled=list(disabled.values()),
        channels=channels,
        verdict=_verdict(socket_only, channels),
        cuda=cuda,
    )


# -- nccl-tests ----------

_ROW_KEYS_ROOT = (
    "size", "count", "type", "redop", "root",
    "oop_time_us", "oop_algbw", "oop_busbw", "oop_wrong",
    "ip_time_us", "ip_algbw", "ip_busbw", "ip_wrong",
)  # fmt: skip
_ROW_KEYS_NO_ROOT = tuple(k for k in _ROW_KEYS_ROOT if k != "root")
_INT_KEYS = {"size", "count", "root"}
_STR_KEYS = {"type", "redop"}


@dataclass
class NcclTests(Fact):
    rows: list[dict[str, Any]]
    avg_busbw: float | None
    out_of_bounds: int | None
    test: str | None = None


def _cell(key: str, token: str) -> Any:
    if key in _STR_KEYS:
        return token
    if key in _INT_KEYS or key.endswith("_wrong"):
        return to_int(token)
    return to_float(token)


@parser("nccl-tests", "all_reduce_perf (nccl-tests)")
def parse_nccl_tests(text: str) -> NcclTests:
    text = clean(text, "nccl-tests")
    keys: tuple[str, ...] | None = None
    seen_header = False
    rows: list[dict[str, Any]] = []
    avg = None
    oob = None
    test = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            body = stripped.lstrip("#").strip()
            if body.startswith("size") and "count" in body:
                seen_header = True
                keys = _ROW_KEYS_ROOT if " root " in f" {body} " else _ROW_KEYS_NO_ROOT
            elif m := re.match(r"Avg bus bandwidth\s*:\s*([\d.]+)", body):
                avg = float(m.group(1))
            elif m := re.match(r"Out of bounds values\s*:\s*(\d+)", body):
                oob = int(m.group(1))
            elif m := re.match(r"Collective test starting:\s*(\S+)", body):
                test = m.group(1)
            elif body.startswith("nThread"):
                seen_header = True
            continue
        tokens = stripped.split()
        if not tokens or not tokens[0].isdigit() or len(tokens) not in (12, 13):
            continue
        layout = keys or (_ROW_KEYS_ROOT if len(tokens) == 13 else _ROW_KEYS_NO_ROOT)
        if len(layout) != len(tokens):
            continue
        rows.append({k: _cell(k, t) for k, t in zip(layout, tokens, strict=True)})
    if not rows and not seen_header and avg is None:
        raise ParseError("nccl-tests", "no nccl-tests header, result rows or 'Avg bus bandwidth'")
    if "root" not in (keys or ()):
        for row in rows:
            row.setdefault("root", None)
    return NcclTests(rows, avg, oob, test)
