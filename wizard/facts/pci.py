"""PCI facts: lspci -nn, ACS control from lspci -vvv, IOMMU mode from dmesg; device ids."""

from __future__ import annotations

import re
from dataclasses import dataclass

from wizard.facts import parser
from wizard.facts.base import Fact, ParseError, clean

INTEL = "8086"
NVIDIA = "10de"
# The Intel E810 family (ice driver, ice_devids.h): E810-C backplane/QSFP/SFP and
# E810-XXV backplane/QSFP/SFP. ibv_devinfo prints these as decimal vendor_part_id
# (0x159b = 5531).
E810_DEVICE_IDS = frozenset({"1591", "1592", "1593", "1599", "159a", "159b"})

_SLOT = r"(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
_LSPCI_NN = re.compile(
    rf"^(?P<slot>{_SLOT})\s+(?P<class_name>[^\[]+?)\s+\[(?P<class_id>[0-9a-fA-F]{{4}})\]:\s+"
    r"(?P<description>.*)\s+\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\]"
    r"(?:\s+\(rev\s+(?P<rev>[0-9a-fA-F]+)\))?(?:\s+\(prog-if[^)]*\))?\s*$"
)


@dataclass
class PciDevice(Fact):
    slot: str
    class_name: str
    class_id: str
    vendor_id: str
    device_id: str
    description: str
    rev: str | None

    @property
    def is_e810(self) -> bool:
        return is_e810(self.vendor_id, self.device_id)

    @property
    def is_nvidia_gpu(self) -> bool:
        return is_nvidia_gpu(self.vendor_id, self.class_id)

    @property
    def function_key(self) -> tuple[str, str]:
        """(domain:bus:device, function): two ports of one NIC share the first part."""
        return split_function(self.slot)


@dataclass
class Lspci(Fact):
    devices: list[PciDevice]

    def e810_ports(self) -> list[PciDevice]:
        return [d for d in self.devices if d.is_e810]

    def nvidia_gpus(self) -> list[PciDevice]:
        return [d for d in self.devices if d.is_nvidia_gpu]


def is_e810(vendor_id: str, device_id: str) -> bool:
    return vendor_id.lower() == INTEL and device_id.lower() in E810_DEVICE_IDS


def is_nvidia_gpu(vendor_id: str, class_id: str) -> bool:
    """NVIDIA display-class functions (VGA 0300, 3D 0302); not NVSwitch bridges or audio."""
    return vendor_id.lower() == NVIDIA and class_id.lower().startswith("03")


def split_function(slot: str) -> tuple[str, str]:
    """``0000:18:00.1`` -> (``0000:18:00``, ``1``); a slot without domain gets 0000."""
    slot = slot.lower()
    if slot.count(":") == 1:
        slot = "0000:" + slot
    base, _, function = slot.rpartition(".")
    return base, function


@parser("lspci", "lspci -nn")
def parse_lspci(text: str) -> Lspci:
    text = clean(text, "lspci")
    devices = []
    for line in text.splitlines():
        match = _LSPCI_NN.match(line.strip())
        if match:
            devices.append(
                PciDevice(
                    slot=match["slot"],
                    class_name=match["class_name"].strip(),
                    class_id=match["class_id"].lower(),
                    vendor_id=match["vendor"].lower(),
                    device_id=match["device"].lower(),
                    description=match["description"].strip(),
                    rev=match["rev"],
                )
            )
    if not devices:
        raise ParseError("lspci", "no 'slot class [cccc]: description [vvvv:dddd]' lines (-nn)")
    return Lspci(devices)


# -- ACS

_DEVICE_HEADER = re.compile(rf"^(?P<slot>{_SLOT})\s+\S")
_DETAIL = re.compile(r"^\s+(Control|Status|Capabilities|Subsystem|Kernel driver in use):")
_ACSCTL = re.compile(r"^\s*ACSCtl:\s*(?P<flags>.*)$")
_FLAG = re.compile(r"([A-Za-z]+)([+-])")


@dataclass
class AcsControl(Fact):
    slot: str | None
    src_valid: bool
    ctl: dict[str, bool]


@dataclass
class LspciAcs(Fact):
    acs: list[AcsControl]
    any_enabled: bool


@parser("lspci-acs", "lspci -vvv")
def parse_lspci_acs(text: str) -> LspciAcs:
    text = clean(text, "lspci-acs")
    slot: str | None = None
    seen_detail = False
    entries = []
    for line in text.splitlines():
        header = _DEVICE_HEADER.match(line)
        if header:
            slot = header["slot"]
            continue
        if _DETAIL.match(line):
            seen_detail = True
        match = _ACSCTL.match(line)
        if match:
            ctl = {name: sign == "+" for name, sign in _FLAG.findall(match["flags"])}
            entries.append(AcsControl(slot, ctl.get("SrcValid", False), ctl))
    if not entries and not seen_detail:
        raise ParseError("lspci-acs", "no ACSCtl lines and no lspci -vvv device details")
    return LspciAcs(entries, any(e.src_valid for e in entries))


# -- IOMMU

_DEFAULT_DOMAIN = re.compile(r"Default domain type:\s*(?P<type>[A-Za-z][\w-]*)(?P<rest>.*)$", re.I)
_IOMMU_LINE = re.compile(r"iommu|dmar|amd-vi", re.IGNORECASE)


@dataclass
class Iommu(Fact):
    default_domain: str | None
    set_via_cmdline: bool
    dmar_enabled: bool
    amd_iommu: bool = False

    @property
    def translated(self) -> bool:
        return self.default_domain == "translated"


@parser("iommu", 'dmesg | grep -i -E "iommu|dmar"')
def parse_iommu(text: str) -> Iommu:
    text = clean(text, "iommu")
    domain = None
    cmdline = False
    relevant = 0
    dmar = amd = False
    for line in text.splitlines():
        if not _IOMMU_LINE.search(line):
            continue
        relevant += 1
        match = _DEFAULT_DOMAIN.search(line)
        if match:
            domain = match["type"].lower()
            cmdline = "command line" in match["rest"].lower()
        if re.search(r"DMAR: IOMMU enabled", line):
            dmar = True
        if re.search(r"AMD-Vi:", line):
            amd = True
    if not relevant:
        raise ParseError("iommu", "no IOMMU or DMAR kernel messages")
    return Iommu(domain, cmdline, dmar, amd)
