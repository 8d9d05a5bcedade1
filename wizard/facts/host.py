"""Host facts the probes need beyond FACTS.md: ethtool private flags, `ip -j addr`, rpm -q."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from wizard.facts import parser
from wizard.facts.base import Fact, ParseError, clean

# -- ethtool --show-priv-flags ----------------------------------------------------------------

_FLAG_LINE = re.compile(r"^(?P<name>[A-Za-z0-9][\w-]*)\s*:\s*(?P<state>on|off)\s*$")


@dataclass
class PrivFlags(Fact):
    interface: str | None
    flags: dict[str, bool]


@parser("ethtool-priv-flags", "ethtool --show-priv-flags IF")
def parse_priv_flags(text: str) -> PrivFlags:
    text = clean(text, "ethtool-priv-flags")
    interface = None
    flags: dict[str, bool] = {}
    for line in text.splitlines():
        header = re.match(r"^Private flags for (?P<if>\S+?):\s*$", line.strip())
        if header:
            interface = header["if"]
            continue
        match = _FLAG_LINE.match(line.strip())
        if match:
            flags[match["name"]] = match["state"] == "on"
    if interface is None and not flags:
        raise ParseError("ethtool-priv-flags", "no 'Private flags for IF:' header or flag lines")
    return PrivFlags(interface, flags)


# -- ip -j addr show -------------------------------------------------------------------------


@dataclass
class Interface(Fact):
    name: str
    master: str | None
    operstate: str | None
    addresses: list[str] = field(default_factory=list)
    # The parent of a VLAN, macvlan or ipvlan (iproute2 ip/ipaddress.c print_linkinfo:
    # IFLA_LINK printed as "link": "bond1" in JSON, "bond1.100@bond1" in text).
    link: str | None = None


@dataclass
class IpAddr(Fact):
    interfaces: list[Interface]

    def owner_of(self, address: str) -> Interface | None:
        return next((i for i in self.interfaces if address in i.addresses), None)

    def by_name(self, name: str) -> Interface | None:
        return next((i for i in self.interfaces if i.name == name), None)

    def rides_on(self, name: str, lower: str) -> bool:
        """Whether traffic of interface ``name`` goes over ``lower``: it is ``lower`` or one
        of its ports, a VLAN/macvlan whose parent (``link``) rides on it, or a bridge (or
        bond) one of whose ports (``master``) does. Taking ``lower`` down cuts it."""
        seen: set[str] = set()

        def over(current: str) -> bool:
            if current == lower or current in seen:
                return current == lower
            seen.add(current)
            iface = self.by_name(current)
            if iface is None:
                return False
            if iface.master == lower or (iface.link is not None and over(iface.link)):
                return True
            return any(over(i.name) for i in self.interfaces if i.master == current)

        return over(name)


@parser("ip-addr", "ip -j addr show")
def parse_ip_addr(text: str) -> IpAddr:
    text = clean(text, "ip-addr")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError("ip-addr", f"not `ip -j addr` JSON: {exc.msg}") from None
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise ParseError("ip-addr", "JSON is not a list of interfaces with 'ifname'")
    # `ip --json --brief` of older iproute2 prints an empty object for each interface its
    # filter left out ([{"ifname": "lo", ...}, {}, {}]): nothing is there to read.
    data = [entry for entry in data if entry]
    if not all("ifname" in entry for entry in data):
        raise ParseError("ip-addr", "JSON is not a list of interfaces with 'ifname'")
    return IpAddr(
        [
            Interface(
                name=entry["ifname"],
                master=entry.get("master"),
                operstate=entry.get("operstate"),
                addresses=[a["local"] for a in entry.get("addr_info", []) if "local" in a],
                link=entry.get("link"),
            )
            for entry in data
        ]
    )


# -- rpm -q / dpkg-query ------------------------------------------------------------------------

_RPM_MISSING = re.compile(r"^package (?P<name>\S+) is not installed$")
# One line of `dpkg-query -W -f='${Package} ${Status}\n'`: the Status field is "want error
# status" (dpkg-query(1), deb-control(5)).
_DPKG = re.compile(
    r"^(?P<name>[a-z0-9][a-z0-9+.:-]*) (?P<status>(unknown|install|hold|deinstall|purge)"
    r" (ok|reinstreq) (not-installed|config-files|half-installed|unpacked|half-configured"
    r"|triggers-awaited|triggers-pending|installed))$"
)
# The one rule for "installed", here and in the Ansible play (steps/packages.py
# installed_line): wanted installed or held, no error flag, fully installed. Unpacked,
# half-configured, half-installed (an apt run killed mid-way), config-files (removed) and
# not-installed all need the install again.
DPKG_INSTALLED = r"^\S+ (install|hold) ok installed$"
# An installed package as `rpm -q NAME` prints it (NAME-VERSION-RELEASE.ARCH).
RPM_INSTALLED = r"^[A-Za-z0-9][\w.+-]*-[\w.+~^]+-[\w.+~^]+\.\w+$"


@dataclass
class Packages(Fact):
    installed: list[str]
    missing: list[str]


@parser("packages", "rpm -q PKG... | dpkg-query -W -f='${Package} ${Status}\\n' PKG...")
def parse_packages(text: str) -> Packages:
    text = clean(text, "packages")
    installed: list[str] = []
    missing: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if match := _RPM_MISSING.match(line):
            missing.append(match["name"])
        elif re.match(RPM_INSTALLED, line):
            installed.append(line)
        elif line.startswith("dpkg-query: no packages found matching "):
            missing.append(line.rsplit(" ", 1)[-1])
        elif match := _DPKG.match(line):
            (installed if re.match(DPKG_INSTALLED, line) else missing).append(match["name"])
    if not installed and not missing:
        raise ParseError("packages", "no 'NAME-VERSION' or 'package NAME is not installed' lines")
    return Packages(installed, missing)
