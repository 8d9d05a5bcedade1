"""Phase 3, E810 and ice: the NIC, its driver and firmware, on both bond ports (T02)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from steps.common import read_lines
from steps.kernel_modules import KernelUpdates
from wizard.facts.nic import EthtoolInfo, parse_ethtool_i
from wizard.facts.pci import Lspci, parse_lspci
from wizard.facts.system import ModInfo, parse_modinfo
from wizard.model import Finding, StepKind
from wizard.plan import Phase, Step, StepContext
from wizard.probe import Probe, Read, Report, read_all
from wizard.result_keys import ResultKey
from wizard.site import Node, Site

IN_TREE_EXPLANATION = (
    "the kernel's own (in-tree) ice driver removes RDMA from a port when it joins a bond "
    "(ice_lag.c: ice_clear_rdma_cap), so RoCE over bond1 needs Intel's out-of-tree ice + irdma "
    "(Intel's README, 'Link Aggregation and RDMA': the latest drivers and NVM, RoCEv2, both "
    "ports on one NIC, identical QoS before bonding)"
)

# What the ice driver says about its DDP package in the kernel log (ice_main.c
# ice_log_pkg_init).
DDP_LOADED = re.compile(
    r"The DDP package was successfully loaded: (?P<name>.+?) version (?P<version>[\d.]+)"
)
SAFE_MODE = "Entering Safe Mode"
# The package the driver ships (lib/firmware/intel/ice/ddp/ice.pkg); it has no LAG.
DEFAULT_DDP = "ICE OS Default Package"


@dataclass(frozen=True)
class LagRefusal:
    """One reason Intel's LAG refuses RDMA on a bond: what ice logs, why, and the fix."""

    pattern: re.Pattern[str]
    cause: str
    remediation: str


# Intel's out-of-tree ice 2.x (intel/ethernet-linux-ice, src/ice_lag.c
# ice_is_bond_rdma_cap, called by ice_lag_chk_rdma for each NETDEV_BONDING_INFO event the
# bond's primary PF handles in ice_lag_process_event): a bond member that is no ice port,
# on another E810, or with a local DCBX config that differs (memcmp of struct
# ice_dcbx_cfg) is logged with netdev_info(lag->netdev, ...) and ice_lag_chk_rdma then
# clears the RDMA capability and unplugs the RDMA aux device: no RDMA device on the bond.
# netdev_info prints "<driver> <PCI address> <netdev>: " first (net/core/dev.c
# __netdev_printk), so dmesg shows e.g. "ice 0000:3b:00.0 ens5f0np0: Found netdev
# ens5f1np1 with different DCB config". (The SR-IOV LAG's "Found %s with different DCB in
# LAG - VF LAG disabled" of ice_lag_chk_comp is about VFs, not RDMA: not matched here.)
LAG_REFUSALS = (
    LagRefusal(
        re.compile(r"Found non-ice netdev \S+"),
        "a bond member is not an E810 (ice) port",
        "bond only the two ports of one E810",
    ),
    LagRefusal(
        re.compile(r"Found netdev \S+ on different device"),
        "the bond members are ports of two different E810 NICs",
        "bond the two ports of one E810 (the same PCI device, functions .0 and .1)",
    ),
    LagRefusal(
        re.compile(r"Found netdev \S+ with different DCB config"),
        "the bond members' DCB configs differ: ice compares both ports' local DCBX config "
        "byte for byte when they bond",
        "give both ports the same DCB (PFC, ETS, the DSCP APP table; the FW LLDP agent off "
        "on both: `dcb pfc show dev PORT`, `dcb app show dev PORT` on each), then take "
        "both out of the bond and rejoin them: ice checks again when they bond",
    ),
)


# `devlink dev info` names the active DDP package as long as ice runs (ice_devlink.c
# ice_info_ddp_pkg_name / ice_info_ddp_pkg_version: "fw.app.name", "fw.app"; the kernel's
# Documentation/networking/devlink/ice.rst), where the boot-time dmesg line may have
# rotated out of the ring buffer on a long uptime.
DEVLINK_INFO = ["devlink", "dev", "info"]


def ddp_from_devlink(text: str) -> tuple[str, str] | None:
    """(package name, version) from the first running ``fw.app.name`` / ``fw.app`` pair in
    ``devlink dev info``, else None (one pass over bounded lines)."""
    name = version = None
    for line in text.splitlines()[:5000]:
        key, _, value = line.strip()[:300].partition(" ")
        if key == "stored:" and name:
            break
        if key == "fw.app.name" and name is None:
            name = value.strip()
        elif key == "fw.app" and version is None:
            version = value.strip()
    return (name, version or "?") if name else None


def evaluate_lag_log(node: Node, dmesg: str, report: Report, devlink: str = "") -> None:
    """The DDP package the ice driver loaded (devlink's fw.app.name, else ice's boot
    message), and whether Intel's LAG refused RDMA on the bond (each refusal names its
    cause)."""
    from_devlink = ddp_from_devlink(devlink)
    logged = DDP_LOADED.search(dmesg)
    package = from_devlink or ((logged["name"], logged["version"]) if logged else None)
    source = "devlink dev info" if from_devlink else "the kernel log"
    if SAFE_MODE in dmesg and from_devlink is None:
        report.fail(
            "ddp",
            "the ice driver runs in Safe Mode: no DDP package was loaded, so DCB and RDMA are "
            "unavailable",
            "install the ice DDP package (lib/firmware/intel/ice/ddp/ice.pkg) and reload ice",
        )
    elif package is None:
        report.warn(
            "ddp",
            "neither `devlink dev info` (fw.app.name) nor dmesg (rotated out on a long "
            "uptime?) names the DDP package ice loaded: the default package, which has no LAG, "
            "cannot be ruled out here",
            "run `devlink dev info` on the node (devlink from iproute2) and check fw.app.name "
            "is not 'ICE OS Default Package'; RoCE LAG itself is proven by irdma.verify",
        )
    else:
        name, version = package
        if name.strip() == DEFAULT_DDP:
            report.fail(
                "ddp",
                f"ice loaded the {name} {version} ({source}), which does not support LAG (Intel's ice "
                "README, 'Link Aggregation': the default DDP package installed by the driver "
                f"does not support LAG): without lport extraction ice sets no RoCE LAG, both "
                f"PFs of {node.bond.name} keep their own RDMA device and RoCE flows the switch "
                "hashes onto the second port are lost",
                "install Intel's comms DDP package (ice_comms-*.pkg) as "
                "/lib/firmware/updates/intel/ice/ddp/ice.pkg, rebuild the initramfs, reboot; "
                "then irdma.verify proves RoCE LAG (one RDMA device for both ports)",
            )
        else:
            report.ok(
                "ddp",
                f"ice loaded the DDP package {name} {version} ({source}; not the default package, which "
                "has no LAG); RoCE LAG itself is proven by irdma.verify's roce-lag",
            )
    refusals = sorted({m.group(0) for r in LAG_REFUSALS for m in r.pattern.finditer(dmesg)})
    if refusals:
        report.fail(
            "lag-rdma",
            f"Intel's LAG turned RDMA off for {node.bond.name}: {'; '.join(refusals)}",
            "both bond ports must be the two ports of one E810 with identical QoS before they "
            "bond: leave the bond, apply the same DCB to both (phase 11), bond again",
        )
    else:
        report.ok("lag-rdma", f"no RDMA-over-LAG refusal for {node.bond.name} in the kernel log")


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def evaluate_e810(
    site: Site,
    node: Node,
    pci: Lspci,
    infos: dict[str, tuple[EthtoolInfo | None, Probe]],
    modinfo: dict[str, ModInfo | None],
    report: Report,
) -> None:
    e810 = pci.e810_ports()
    if len(e810) >= 2:
        report.ok(
            "e810-present", f"{len(e810)} Intel E810 ports ({', '.join(d.slot for d in e810)})"
        )
    else:
        report.fail(
            "e810-present",
            f"{len(e810)} Intel E810 ports on the PCI bus; the bond needs two",
            "check the NIC is seated and enabled in the BIOS; `lspci -nn | grep -i ethernet`",
        )
    for port, (info, p) in infos.items():
        if info is None:
            report.unreadable(f"driver-{port}", p, f"the driver of {port}")
            continue
        evidence = p.evidence()
        if info.driver != "ice":
            report.fail(
                f"driver-{port}",
                f"{port} is driven by {info.driver}, not ice: it is not an E810 port",
                "check nodes[].bond.ports names the two E810 ports",
                evidence,
            )
            continue
        if info.in_tree:
            report.fail(
                f"driver-{port}",
                f"{port} uses the in-tree ice {info.version}: {IN_TREE_EXPLANATION}",
                "install Intel's ice and irdma drivers (kmod packages from your mirror), reboot, "
                "and confirm `ethtool -i` shows a plain version such as 1.16.3",
                evidence,
            )
        else:
            report.ok(f"driver-{port}", f"{port}: Intel's ice {info.version}", evidence)
        minimum = site.nic.min_firmware
        if (
            info.nvm_version
            and minimum
            and _version_tuple(info.nvm_version) < _version_tuple(minimum)
        ):
            report.warn(
                f"firmware-{port}",
                f"{port} NVM {info.nvm_version} is below the site's minimum {minimum}",
                "update the E810 NVM with Intel's nvmupdate64e in a maintenance window",
                evidence,
            )
        else:
            report.ok(f"firmware-{port}", f"{port} firmware {info.firmware_version}")
    for module, fact in modinfo.items():
        if fact is None:
            continue
        if fact.in_tree is False:
            report.ok(
                f"module-{module}", f"{module} {fact.version or ''} from {fact.filename}".strip()
            )
        elif fact.in_tree:
            report.warn(
                f"module-{module}",
                f"{module} is the kernel's own module ({fact.filename})",
                "Intel's out-of-tree driver installs under /lib/modules/<kernel>/updates/",
            )


MODULES = ("ice", "irdma")


def ice_reads(node: Node) -> list[Read]:
    """The PCI devices (the E810's Ethernet functions), each bond port's driver, the modules."""
    return [
        Read(["lspci", "-nn"], parse_lspci, note="the Ethernet controllers"),
        *(Read(["ethtool", "-i", port], parse_ethtool_i) for port in node.bond.ports),
        *(Read(["modinfo", module], parse_modinfo) for module in MODULES),
        Read(DEVLINK_INFO, None, note="fw.app.name: the DDP package ice loaded"),
        Read(DMESG, None, note="the DDP package and RDMA-over-LAG messages of ice"),
    ]


DMESG = ["dmesg"]
# The timestamp at the start of a dmesg line: "[%5ld.%06ld] " (util-linux dmesg's default
# time format, as printk's print_time), seconds since boot on the kernel's own clock, so
# later lines have later stamps; absent where printk.time is off.
_STAMP = re.compile(r"\[\s*(\d+\.\d+)\]\s?")


def _stamped(dmesg: str) -> list[tuple[float, str]]:
    """(timestamp, message) of each dmesg line that has a timestamp (bounded)."""
    lines = []
    for line in dmesg.splitlines()[-20000:]:
        stamp = _STAMP.match(line)
        if stamp:
            lines.append((float(stamp[1]), line[stamp.end() :].strip()[:500]))
    return lines


def newest_stamp(dmesg: str) -> float | None:
    """The newest timestamp in the kernel log: a later line is a later event. None when the
    log has no timestamps (then nothing can be told apart as newer)."""
    return max((stamp for stamp, _ in _stamped(dmesg)), default=None)


def lag_refusal(message: str) -> LagRefusal | None:
    """The LAG refusal a kernel message is, if it is one."""
    return next((r for r in LAG_REFUSALS if r.pattern.search(message)), None)


def lag_refusals_after(dmesg: str, mark: float) -> list[tuple[str, LagRefusal]]:
    """ice's RDMA-over-LAG refusals logged after ``mark`` (a ``newest_stamp`` taken before
    the bond changed), each line once with its reason: an older refusal is history."""
    found: dict[str, LagRefusal] = {}
    for stamp, message in _stamped(dmesg):
        refusal = lag_refusal(message) if stamp > mark else None
        if refusal is not None:
            found.setdefault(message, refusal)
    return list(found.items())


# Each bond port's PCI address (`ethtool -i`: bus-info, None when unread): the bond check
# after the QoS change tells one E810's two functions from two NICs with it.
BUS_INFO = ResultKey("e810.ice", "bus_info", dict, "bond port -> PCI address")


class IceDriver(Step):
    id = "e810.ice"
    title = "Intel E810 with the ice driver on both bond ports"
    provides = (BUS_INFO,)
    kind = StepKind.CHECK
    gates = ("T02",)
    reads = ("node.bond", "nic")
    explain = (
        "An Intel E810 is present (PCI 8086:1591/1592/1593/159b...), both bond ports are "
        "driven by ice, and the driver is Intel's out-of-tree build: the in-tree ice removes "
        "RDMA from a port that joins a bond, so RoCE over the bond needs Intel's ice + irdma. "
        "Firmware (NVM) is recorded; below the site's minimum it warns. The DDP package must "
        "not be the driver's default one, which has no LAG (ice README, 'Link Aggregation')."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return read_lines(ice_reads(node)) if node else []

    async def verify(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        report = Report("T02")
        ports = list(ctx.node.bond.ports)
        modules = MODULES
        pci, *rest = await read_all(ctx, *ice_reads(ctx.node))
        if not pci.ok:
            report.unreadable("e810-present", pci, "the PCI devices")
            return report.findings
        infos = {port: (p.fact, p) for port, p in zip(ports, rest[: len(ports)], strict=True)}
        ctx.provide(
            BUS_INFO, {port: (info.bus_info if info else None) for port, (info, _) in infos.items()}
        )
        module_reads, devlink, dmesg = rest[len(ports) : -2], rest[-2], rest[-1]
        modinfo = {m: p.fact for m, p in zip(modules, module_reads, strict=True)}
        evaluate_e810(ctx.site, ctx.node, pci.fact, infos, modinfo, report)
        evaluate_lag_log(
            ctx.node,
            dmesg.result.stdout if dmesg.result.ok else "",
            report,
            devlink=devlink.result.stdout if devlink.result.ok else "",
        )
        return report.findings


PHASE = Phase(
    read_only=True,
    id="e810",
    number=3,
    title="E810 and ice",
    summary="Identify the E810, its driver (in-tree or Intel's) and firmware on both ports.",
    steps=(IceDriver(), KernelUpdates()),
)
