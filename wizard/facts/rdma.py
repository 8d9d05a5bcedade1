"""RDMA facts: rdma link / rdma dev (text and -j JSON), ibv_devices, ibv_devinfo, show_gids."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from wizard.facts import parser
from wizard.facts.base import Fact, ParseError, clean, to_int
from wizard.facts.command import Command

# `rdma -j` prints one array of objects ("[{...},...]" or "[]"); a pasted shell prompt
# ("[user@host ~]$ rdma dev") also starts with "[" but is text.
_JSON_ARRAY_START = re.compile(r"\s*\[\s*[{\]]")


def _json_array(text: str, kind: str) -> list[dict[str, Any]] | None:
    """The parsed JSON array when ``text`` is `rdma -j` output, else None."""
    stripped = text.strip()
    if not _JSON_ARRAY_START.match(stripped):
        return None
    try:
        data = json.loads(stripped)
    except json.JSONDecodeError as exc:
        raise ParseError(kind, f"looks like JSON but does not parse: {exc.msg}") from None
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise ParseError(kind, "JSON is not a list of objects")
    return data


# -- rdma link

# "link mlx5_0/1 state ACTIVE ..." in today's iproute2; the first releases of the rdma tool
# (2017-2018, linux-rdma mails in tests/facts/samples/rdma-link/03.txt) printed
# "0/1: mlx5_0/1: state ACTIVE ..." (device index/port, then the name).
_LINK = re.compile(
    r"^(?:link\s+|\d{1,9}/\d{1,9}:\s+)(?P<device>[^/\s]+)/(?P<port>\d+):?\s+(?P<rest>.*)$"
)


@dataclass
class RdmaLink(Fact):
    device: str
    port: int
    state: str | None
    physical_state: str | None
    netdev: str | None


@dataclass
class RdmaLinks(Fact):
    links: list[RdmaLink]

    def by_netdev(self, netdev: str) -> RdmaLink | None:
        return next((link for link in self.links if link.netdev == netdev), None)


@parser("rdma-link")
def parse_rdma_link(text: str) -> RdmaLinks:
    text = clean(text, "rdma-link")
    data = _json_array(text, "rdma-link")
    if data is not None:
        links = [
            RdmaLink(
                device=str(d.get("ifname", "")),
                port=int(d.get("port", 0)),
                state=d.get("state"),
                physical_state=d.get("physical_state"),
                netdev=d.get("netdev"),
            )
            for d in data
        ]
        if any(not link.device for link in links):
            raise ParseError("rdma-link", "JSON entry without 'ifname'")
        return RdmaLinks(links)
    links = []
    for line in text.splitlines():
        match = _LINK.match(line.strip())
        if not match:
            continue
        words = match["rest"].split()
        attrs = dict(zip(words[0::2], words[1::2], strict=False))
        links.append(
            RdmaLink(
                device=match["device"],
                port=int(match["port"]),
                state=attrs.get("state"),
                physical_state=attrs.get("physical_state"),
                netdev=attrs.get("netdev"),
            )
        )
    if not links:
        raise ParseError("rdma-link", "no 'link DEV/PORT ...' lines")
    return RdmaLinks(links)


# The RDMA devices, their ports' states and netdevs, as JSON (iproute2's rdma -j).
RDMA_LINK = Command(("rdma", "-j", "link", "show"), parse_rdma_link)


# -- rdma dev

_DEV = re.compile(r"^(?P<index>\d+):\s+(?P<name>\S+):\s+(?P<rest>.*)$")


@dataclass
class RdmaDevice(Fact):
    index: int
    name: str
    node_type: str | None
    fw: str | None
    node_guid: str | None
    sys_image_guid: str | None


@dataclass
class RdmaDevices(Fact):
    devices: list[RdmaDevice]


@parser("rdma-dev", "rdma dev")
def parse_rdma_dev(text: str) -> RdmaDevices:
    text = clean(text, "rdma-dev")
    data = _json_array(text, "rdma-dev")
    if data is not None:
        return RdmaDevices(
            [
                RdmaDevice(
                    index=int(d.get("ifindex", 0)),
                    name=str(d.get("ifname")),
                    node_type=d.get("node_type"),
                    fw=d.get("fw"),
                    node_guid=d.get("node_guid"),
                    sys_image_guid=d.get("sys_image_guid"),
                )
                for d in data
            ]
        )
    devices = []
    for line in text.splitlines():
        match = _DEV.match(line.strip())
        if not match:
            continue
        words = match["rest"].split()
        attrs = dict(zip(words[0::2], words[1::2], strict=False))
        if "node_type" not in attrs:
            continue
        devices.append(
            RdmaDevice(
                index=int(match["index"]),
                name=match["name"],
                node_type=attrs.get("node_type"),
                fw=attrs.get("fw"),
                node_guid=attrs.get("node_guid"),
                sys_image_guid=attrs.get("sys_image_guid"),
            )
        )
    if not devices:
        raise ParseError("rdma-dev", "no 'N: DEV: node_type ...' lines")
    return RdmaDevices(devices)


# -- ibv_devices

_IBV_DEVICE = re.compile(r"^\s*(?P<name>[A-Za-z0-9_.-]+)\s+(?P<guid>[0-9a-fA-F]{16})\s*$")


@dataclass
class IbvDevice(Fact):
    name: str
    node_guid: str


@dataclass
class IbvDevices(Fact):
    devices: list[IbvDevice]


@parser("ibv-devices", "ibv_devices")
def parse_ibv_devices(text: str) -> IbvDevices:
    text = clean(text, "ibv-devices")
    header = False
    devices = []
    for line in text.splitlines():
        if re.match(r"^\s*device\s+node GUID\s*$", line):
            header = True
            continue
        match = _IBV_DEVICE.match(line)
        if match:
            devices.append(IbvDevice(match["name"], match["guid"].lower()))
    if not header and not devices:
        raise ParseError("ibv-devices", "no 'device  node GUID' header and no device lines")
    return IbvDevices(devices)


# -- ibv_devinfo

_GID = re.compile(r"^GID\[\s*(?P<index>\d+)\]:\s*(?P<gid>[^,\s]+)(?:,\s*(?P<type>.+?))?\s*$")
# What ibv_devinfo itself prints when it cannot report (rdma-core's ibv_devinfo.c).
_ERROR = re.compile(
    r"^(Failed to (open|query|get|init)\b.*|No IB devices found.*|IB device .* not found.*"
    r"|.*ibv_get_device_list.*failed.*)$",
    re.IGNORECASE,
)


@dataclass
class Gid(Fact):
    index: int
    gid: str
    type: str | None


@dataclass
class IbvPort(Fact):
    port: int
    state: str | None
    max_mtu: int | None
    active_mtu: int | None
    link_layer: str | None
    gids: list[Gid] = field(default_factory=list)


@dataclass
class IbvHca(Fact):
    hca_id: str
    transport: str | None
    fw_ver: str | None
    node_guid: str | None
    vendor_id: str | None
    vendor_part_id: int | None
    hw_ver: str | None
    phys_port_cnt: int | None
    ports: list[IbvPort] = field(default_factory=list)
    board_id: str | None = None


@dataclass
class IbvDevinfo(Fact):
    devices: list[IbvHca]
    errors: list[str]


def _strip_code(value: str | None) -> str | None:
    """``PORT_ACTIVE (4)`` -> ``PORT_ACTIVE``; ``InfiniBand (0)`` -> ``InfiniBand``."""
    if value is None:
        return None
    return re.sub(r"\s*\(\d+\)$", "", value).strip() or None


@parser("ibv-devinfo", "ibv_devinfo [-v]")
def parse_ibv_devinfo(text: str) -> IbvDevinfo:
    text = clean(text, "ibv-devinfo")
    devices: list[IbvHca] = []
    errors: list[str] = []
    device_fields: dict[str, str] = {}
    port: IbvPort | None = None
    port_fields: dict[str, str] = {}

    def close_port() -> None:
        nonlocal port, port_fields
        if port is not None and devices:
            port.state = _strip_code(port_fields.get("state"))
            port.max_mtu = to_int((port_fields.get("max_mtu") or "").split(" ")[0])
            port.active_mtu = to_int((port_fields.get("active_mtu") or "").split(" ")[0])
            port.link_layer = port_fields.get("link_layer")
            devices[-1].ports.append(port)
        port, port_fields = None, {}

    def close_device() -> None:
        close_port()
        if devices:
            d = devices[-1]
            f = device_fields
            d.transport = _strip_code(f.get("transport"))
            d.fw_ver = f.get("fw_ver")
            d.node_guid = f.get("node_guid")
            d.vendor_id = f.get("vendor_id")
            d.vendor_part_id = to_int(f.get("vendor_part_id"))
            d.hw_ver = f.get("hw_ver")
            d.phys_port_cnt = to_int(f.get("phys_port_cnt"))
            d.board_id = f.get("board_id")

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        key, found, value = line.partition(":")
        key, value = key.strip(), value.strip()
        gid = _GID.match(line)
        if key == "hca_id" and found:
            close_device()
            device_fields = {}
            devices.append(IbvHca(value, None, None, None, None, None, None, None))
        elif key == "port" and found and devices and value.isdigit():
            close_port()
            port = IbvPort(int(value), None, None, None, None)
        elif gid and port is not None:
            port.gids.append(Gid(int(gid["index"]), gid["gid"], gid["type"]))
        elif found and port is not None and re.fullmatch(r"[a-z_]+", key):
            port_fields.setdefault(key, value)
        elif found and devices and re.fullmatch(r"[a-z_]+", key):
            device_fields.setdefault(key, value)
        elif _ERROR.match(line):
            errors.append(line)
    close_device()
    if not devices and not errors:
        raise ParseError("ibv-devinfo", "no 'hca_id:' lines and no error message")
    return IbvDevinfo(devices, errors)


# -- show_gids

_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")


@dataclass
class ShowGid(Fact):
    dev: str
    port: int
    index: int
    gid: str
    ipv4: str | None
    ver: str
    netdev: str | None


@dataclass
class ShowGids(Fact):
    gids: list[ShowGid]

    def roce_v2_ipv4(self) -> list[ShowGid]:
        return [g for g in self.gids if g.ver == "v2" and g.ipv4]


@parser("show-gids", "show_gids")
def parse_show_gids(text: str) -> ShowGids:
    text = clean(text, "show-gids")
    gids = []
    header = False
    for line in text.splitlines():
        words = line.split()
        if words[:3] == ["DEV", "PORT", "INDEX"]:
            header = True
            continue
        if len(words) < 5 or not (words[1].isdigit() and words[2].isdigit()):
            continue
        dev, port, index, gid, *rest = words
        if ":" not in gid:
            continue
        ipv4 = rest.pop(0) if rest and _IPV4.match(rest[0]) else None
        ver = rest.pop(0) if rest and re.fullmatch(r"v\d", rest[0]) else None
        if ver is None:
            continue
        gids.append(ShowGid(dev, int(port), int(index), gid, ipv4, ver, rest[0] if rest else None))
    if not gids and not header:
        raise ParseError("show-gids", "no 'DEV PORT INDEX GID ...' table")
    return ShowGids(gids)


# -- RDMA device hardware counters ----------------------------------------------------------

# `grep -H . /sys/class/infiniband/DEV/ports/N/hw_counters/NAME ...`: one "path:value" line
# per counter file (grep -H names the file). ib_core exposes the driver's hw stats there;
# irdma's names include cnpSent, cnpHandled, cnpIgnored and RxECNMrkd (the congestion
# notification and ECN counters of DCQCN), ip4InDiscards. The same files are reached
# through the device's own sysfs path (/sys/devices/pci.../infiniband/DEV/...), and the
# port's PMA counters (ports/N/counters/) print the same way; a file whose value is not a
# number ("N/A (no PMA)" on Intel's iWARP devices, prometheus/node_exporter#966) is named in
# ``unreadable``, never given a number.
_HW_COUNTER = re.compile(
    r"^(?:/sys/class|/sys/devices/\S{1,400}?)/infiniband/(?P<device>[^/\s]+)/ports/"
    r"(?P<port>\d{1,5})/(?:hw_)?counters/(?P<name>[A-Za-z0-9_]+):(?P<value>[^\n]{0,200})$",
    re.MULTILINE,
)
_COUNTER_VALUE = re.compile(r"\s*(\d{1,20})\s*")


@dataclass
class RdmaHwCounters(Fact):
    device: str | None
    port: int | None
    counters: dict[str, int]
    # Counter files that printed something other than a number (e.g. "N/A (no PMA)").
    unreadable: list[str] = field(default_factory=list)


@parser("rdma-hw-counters", "grep -H . /sys/class/infiniband/DEV/ports/N/hw_counters/*")
def parse_rdma_hw_counters(text: str) -> RdmaHwCounters:
    text = clean(text, "rdma-hw-counters")
    counters: dict[str, int] = {}
    unreadable: list[str] = []
    device = port = None
    for match in _HW_COUNTER.finditer(text):
        if device is None:
            device, port = match["device"], int(match["port"])
        elif (match["device"], int(match["port"])) != (device, port):
            # One fact is one device's port (steps/perf/counters.py greps one at a time):
            # a second one's counters under the first's name would be the wrong numbers.
            raise ParseError(
                "rdma-hw-counters",
                f"counters of more than one device port ({device} port {port},"
                f" {match['device']} port {int(match['port'])}): give one port's files",
            )
        if value := _COUNTER_VALUE.fullmatch(match["value"]):
            counters[match["name"]] = int(value[1])
        elif match["name"] not in unreadable:
            unreadable.append(match["name"])
    if not counters and not unreadable:
        raise ParseError(
            "rdma-hw-counters", "no /sys/class/infiniband/DEV/ports/N/hw_counters/NAME:VALUE lines"
        )
    return RdmaHwCounters(device, port, counters, unreadable)
