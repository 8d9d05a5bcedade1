"""NIC facts: ethtool -i, ethtool -S, /proc/net/bonding/BOND."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from wizard.facts import parser
from wizard.facts.base import Fact, ParseError, clean, key_values, to_int

# -- ethtool -i ----------

# An in-tree driver reports the kernel release: 5.19.4-100.fc35.x86_64, 6.8.0-86-generic,
# 5.14.0-427.13.1.el9_4.x86_64; older in-tree Intel drivers end in "-k" (2.8.20-k).
_KERNEL_RELEASE = re.compile(r"^\d+\.\d+\.\d+(?:\.\d+)?-\S*[A-Za-z_]\S*$")
_PLAIN_VERSION = re.compile(r"^\d+(?:\.\d+){1,3}$")


# Intel's own out-of-tree releases of these drivers are numbered below 3 (ice 0.x-2.x,
# i40e 2.x: Intel's release notes); since the kernel fills in its own release for a driver
# that sets no version (net/ethtool/ioctl.c, ethtool_get_drvinfo: UTS_RELEASE), a plain
# version from 3 up on them is a mainline kernel without a distribution suffix ("6.8.2",
# the intel-wired-lan E810 report in tests/facts/samples/ethtool-i/01.txt).
_OUT_OF_TREE_MAJOR_BELOW = {"ice": 3, "i40e": 3}


def driver_in_tree(version: str | None, driver: str | None = None) -> bool | None:
    """True when ``ethtool -i``'s version is a kernel release (in-tree driver)."""
    if not version:
        return None
    if version.endswith("-k") or _KERNEL_RELEASE.match(version):
        return True
    if _PLAIN_VERSION.match(version):
        # Only for a driver whose own release numbers are known: elsewhere "6.8.2" may be
        # a kernel's or the driver's own (unknown, not a confident false).
        below = _OUT_OF_TREE_MAJOR_BELOW.get(driver or "")
        return None if below is None else int(version.split(".")[0]) >= below
    return None


@dataclass
class EthtoolInfo(Fact):
    driver: str
    version: str | None
    firmware_version: str | None
    bus_info: str | None
    in_tree: bool | None
    nvm_version: str | None = None  # Intel: the first token of firmware-version
    supports_priv_flags: bool | None = None


@parser("ethtool-i", "ethtool -i IF")
def parse_ethtool_i(text: str) -> EthtoolInfo:
    text = clean(text, "ethtool-i")
    values = key_values(text)
    if not values.get("driver"):
        raise ParseError("ethtool-i", "no 'driver:' line: not ethtool -i output")

    def value(key: str) -> str | None:
        found = values.get(key)
        return found if found and found.upper() != "N/A" else None

    firmware = value("firmware-version")
    nvm = None
    if firmware and re.match(r"^\d+\.\d+$", firmware.split()[0]):
        nvm = firmware.split()[0]
    flags = values.get("supports-priv-flags")
    return EthtoolInfo(
        driver=values["driver"],
        version=value("version"),
        firmware_version=firmware,
        bus_info=value("bus-info"),
        in_tree=driver_in_tree(value("version"), values["driver"]),
        nvm_version=nvm,
        supports_priv_flags=None if flags is None else flags == "yes",
    )


# -- ethtool -S ----------

_COUNTER = re.compile(r"^\s*(?P<name>[^:\s][^:]*?):\s+(?P<value>-?\d+)\s*$")
# ice: rx_priority_3_xoff.nic; i40e: port.rx_priority_3_xoff; mlx5: rx_prio3_pause.
_PRIO_PAUSE = re.compile(
    r"^(?:port\.)?(?P<dir>rx|tx)_(?:priority_(?P<a>[0-7])_xoff|prio(?P<b>[0-7])_pause)(?:\.nic)?$"
)


@dataclass
class PauseCounts(Fact):
    rx: int = 0
    tx: int = 0


@dataclass
class EthtoolStats(Fact):
    counters: dict[str, int]
    prio_pause: dict[str, PauseCounts] = field(default_factory=dict)


@parser("ethtool-s", "ethtool -S IF")
def parse_ethtool_s(text: str) -> EthtoolStats:
    text = clean(text, "ethtool-s")
    counters: dict[str, int] = {}
    other_lines = 0
    for line in text.splitlines():
        match = _COUNTER.match(line)
        if match:
            counters[match["name"].strip()] = int(match["value"])
        elif line.strip() and line.strip() != "NIC statistics:":
            other_lines += 1
    if not counters:
        raise ParseError("ethtool-s", "no 'counter: number' lines: not ethtool -S output")
    # ethtool -S prints nothing but counters; a few stray lines (a prompt, a warning) are
    # tolerated, a block of other text means this is some other command's output.
    if other_lines > max(2, len(counters) // 10):
        raise ParseError("ethtool-s", f"{other_lines} lines are not 'counter: number' lines")
    pause: dict[str, PauseCounts] = {}
    for name, count in counters.items():
        match = _PRIO_PAUSE.match(name)
        if match:
            prio = match["a"] or match["b"]
            entry = pause.setdefault(prio, PauseCounts())
            if match["dir"] == "rx":
                entry.rx += count
            else:
                entry.tx += count
    return EthtoolStats(counters, dict(sorted(pause.items())))


# -- /proc/net/bonding


@dataclass
class BondSlave(Fact):
    name: str
    mii_status: str | None
    speed_mbps: int | None
    duplex: str | None
    permanent_hw_addr: str | None
    aggregator_id: int | None
    link_failure_count: int | None


@dataclass
class Bonding(Fact):
    mode: str
    is_8023ad: bool
    transmit_hash_policy: str | None
    mii_status: str | None
    lacp_rate: str | None
    active_aggregator_id: int | None
    slaves: list[BondSlave]
    active_slave: str | None = None

    def slave(self, name: str) -> BondSlave | None:
        return next((s for s in self.slaves if s.name == name), None)


@parser("bonding", "cat /proc/net/bonding/BOND")
def parse_bonding(text: str) -> Bonding:
    text = clean(text, "bonding")
    sections = re.split(r"^\s*Slave Interface:\s*", text, flags=re.MULTILINE)
    head = _bond_fields(sections[0])
    if "Bonding Mode" not in head:
        raise ParseError("bonding", "no 'Bonding Mode:' line: not /proc/net/bonding output")
    active_aggregator = None
    info = re.search(r"Active Aggregator Info:(.*)", sections[0], re.DOTALL)
    if info:
        active_aggregator = to_int(_bond_fields(info.group(1)).get("Aggregator ID"))
    slaves = []
    for section in sections[1:]:
        name, _, body = section.partition("\n")
        fields = _bond_fields(body)
        speed = re.match(r"(\d+)\s*Mbps", fields.get("Speed", ""))
        slaves.append(
            BondSlave(
                name=name.strip(),
                mii_status=fields.get("MII Status") or None,
                speed_mbps=int(speed.group(1)) if speed else None,
                duplex=_known(fields.get("Duplex")),
                permanent_hw_addr=fields.get("Permanent HW addr") or None,
                aggregator_id=to_int(fields.get("Aggregator ID")),
                link_failure_count=to_int(fields.get("Link Failure Count")),
            )
        )
    mode = head["Bonding Mode"]
    policy = head.get("Transmit Hash Policy")
    return Bonding(
        mode=mode,
        is_8023ad="802.3ad" in mode,
        transmit_hash_policy=policy.split()[0] if policy else None,
        mii_status=head.get("MII Status") or None,
        lacp_rate=head.get("LACP rate") or None,
        active_aggregator_id=active_aggregator,
        slaves=slaves,
        active_slave=head.get("Currently Active Slave") or None,
    )


def _bond_fields(text: str) -> dict[str, str]:
    """Top-level ``Key: value`` lines of a block, stopping at the LACP pdu detail blocks."""
    result: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip().startswith("details "):
            break
        key, found, value = line.partition(":")
        key = key.strip()
        if found and key and key not in result:
            result[key] = value.strip()
    return result


def _known(value: str | None) -> str | None:
    return None if not value or value.lower() == "unknown" else value
