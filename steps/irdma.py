"""Phase 5, irdma: the host RDMA stack, loaded, persistent and in RoCEv2 mode (T02)."""

from __future__ import annotations

import ipaddress

from steps.common import (
    LSMOD,
    RDMA_LINKS,
    check_host_files,
    host_file_changes,
    host_file_lines,
    priv_flags_command,
    read_lines,
    shown,
    write_host_files,
)
from steps.packages import evaluate_packages, packages_read
from wizard.artifacts import Artifact, Target, host_file, render
from wizard.facts.host import PrivFlags, parse_priv_flags
from wizard.facts.rdma import IbvDevinfo, RdmaLinks, parse_ibv_devinfo
from wizard.facts.system import Lsmod, parse_lsmod
from wizard.model import Finding, StepKind
from wizard.plan import Change, Phase, Step, StepContext
from wizard.probe import Read, Report, probe, read_all
from wizard.result_keys import ResultKey
from wizard.site import Node, Site

MODULES_LOAD = "/etc/modules-load.d/irdma.conf"
MODPROBE_OPTIONS = "/etc/modprobe.d/irdma.conf"
REQUIRED_MODULES = ("ice", "irdma", "ib_core", "ib_uverbs", "rdma_cm", "rdma_ucm", "ib_umad")
# Loaded and persisted by irdma.enable: irdma, and the user-space device modules rdma-core
# does not load on a RoCE host (ib_umad) but the shared RDMA device plugin needs.
LOADED_BY_WIZARD = ("irdma", "ib_uverbs", "rdma_ucm", "ib_umad")
LOAD = ["modprobe", "irdma"]
UNLOAD = ["modprobe", "-r", "irdma"]
# The character devices the shared RDMA device plugin requires (rdma_device_spec.go:
# requiredRdmaDevices = rdma_cm, umad, uverbs): without one it skips the device.
INFINIBAND_DEVICES = ["ls", "/dev/infiniband"]
PLUGIN_NEEDS = ("rdma_cm", "umad", "uverbs")
# rdma-core's dracut module puts irdma into the initramfs, which loads it at boot with the
# options it was built with (kernel-boot/dracut/50rdma/module-setup.sh): after a new
# modprobe option the initramfs is rebuilt, or irdma comes back in iWARP mode.
INITRAMFS_OPTIONS = {"rhel-10.2": ["lsinitrd", "-f", "/etc/modprobe.d/irdma.conf"]}
REBUILD_INITRAMFS = {"rhel-10.2": ["dracut", "-f"], "ubuntu-24.04": ["update-initramfs", "-u"]}


def modprobe_command(modules: list[str]) -> list[str]:
    return ["modprobe", "-a", *modules]


def irdma_artifacts(node: Node) -> list[Artifact]:
    return [
        host_file(
            node.name, MODULES_LOAD, render("host/irdma-modules-load.conf.j2"), "load irdma at boot"
        ),
        host_file(
            node.name,
            MODPROBE_OPTIONS,
            render("host/irdma-modprobe.conf.j2"),
            "RoCEv2 mode for Intel's irdma",
        ),
    ]


def irdma_enable_verify_lines(node: Node) -> list[str]:
    """The runbook lines of ``EnableIrdma.verify`` (run again after a reboot)."""
    reads, _ = host_file_lines(irdma_artifacts(node))
    initramfs = INITRAMFS_OPTIONS.get(node.os)
    return [shown(LSMOD), *reads, *([shown(initramfs)] if initramfs else [])]


class EnableIrdma(Step):
    id = "irdma.enable"
    title = "irdma loaded at boot, in RoCEv2 mode"
    kind = StepKind.APPLY
    gates = ("T02",)
    reads = ("node.os", "nic")
    explain = (
        "irdma is listed in modules-load.d so it loads at boot, and RoCE is enabled through "
        "the driver's own mechanism: `options irdma roce_ena=1` for Intel's irdma (the "
        "in-tree driver uses devlink `enable_roce` instead). Files are diffed against the host; "
        "when the options change, irdma is reloaded so they take effect."
    )

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        return irdma_artifacts(node) if node else []

    def commands(self, site: Site, node: Node | None) -> list[str]:
        if node is None:
            return []
        reads, writes = host_file_lines(irdma_artifacts(node))
        initramfs = INITRAMFS_OPTIONS.get(node.os)
        return [
            *reads,
            shown(LSMOD),
            *([shown(initramfs, "the irdma options inside the initramfs")] if initramfs else []),
            *writes,
            shown(UNLOAD, "only when irdma is loaded and its options changed"),
            shown(LOAD, "when irdma is not loaded"),
            shown(modprobe_command(list(LOADED_BY_WIZARD[1:])), "those of them not loaded"),
            shown(REBUILD_INITRAMFS[node.os], "when the initramfs holds other irdma options"),
        ]

    async def changes(self, ctx: StepContext) -> list[Change]:
        assert ctx.node is not None
        artifacts = irdma_artifacts(ctx.node)
        result = await host_file_changes(ctx, artifacts)
        lsmod = await probe(ctx, LSMOD, parse_lsmod)
        missing = [m for m in LOADED_BY_WIZARD if lsmod.ok and not lsmod.fact.loaded(m)]
        if missing:
            # The files may be in place while the modules are not loaded: still a change.
            result.append(
                Change(
                    _module_state_artifact(ctx.node), "".join(f"{m}: not loaded\n" for m in missing)
                )
            )
        options = next(a.content for a in artifacts if a.host_path == MODPROBE_OPTIONS)
        in_initramfs = await self._initramfs_options(ctx)
        options_change = any(c.artifact.host_path == MODPROBE_OPTIONS and c.changed for c in result)
        if in_initramfs != options or (in_initramfs is None and options_change):
            result.append(
                Change(_initramfs_artifact(ctx.node, options), in_initramfs or "(not readable)\n")
            )
        return result

    async def _initramfs_options(self, ctx: StepContext) -> str | None:
        """The irdma options file as the initramfs holds it (None where it cannot be read)."""
        assert ctx.node is not None
        command = INITRAMFS_OPTIONS.get(ctx.node.os)
        if command is None:
            return None
        result = await ctx.run(command)
        return result.stdout if result.ok else ""

    async def apply(self, ctx: StepContext, changes: list[Change]) -> None:
        assert ctx.node is not None
        options_changed = MODPROBE_OPTIONS in await write_host_files(ctx, changes)
        lsmod = await probe(ctx, LSMOD, parse_lsmod)
        loaded = lsmod.ok and lsmod.fact.loaded("irdma")
        if loaded and options_changed:
            await ctx.run(UNLOAD, check=True)
            loaded = False
        if not loaded:
            await ctx.run(LOAD, check=True)
        others = [m for m in LOADED_BY_WIZARD[1:] if not (lsmod.ok and lsmod.fact.loaded(m))]
        if others:
            await ctx.run(modprobe_command(others), check=True)
        if any(c.artifact.path.endswith("/initramfs") for c in changes if c.changed):
            await ctx.run(REBUILD_INITRAMFS[ctx.node.os], check=True, timeout=900)

    async def verify(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        report = Report("T02")
        lsmod = await probe(ctx, LSMOD, parse_lsmod)
        if lsmod.ok and lsmod.fact.loaded("irdma"):
            report.ok(
                "irdma-loaded", "irdma is loaded", lsmod.evidence(lambda line: "irdma" in line)
            )
        else:
            report.fail(
                "irdma-loaded", "irdma is not loaded", "modprobe irdma; check dmesg for errors"
            )
        missing = [m for m in LOADED_BY_WIZARD[1:] if not (lsmod.ok and lsmod.fact.loaded(m))]
        if missing:
            report.fail(
                "rdma-modules",
                f"not loaded: {', '.join(missing)} (the RDMA device plugin needs their devices)",
                f"modprobe -a {' '.join(missing)}; irdma.enable lists them in {MODULES_LOAD}",
            )
        else:
            report.ok("rdma-modules", f"{', '.join(LOADED_BY_WIZARD[1:])} loaded")
        artifacts = irdma_artifacts(ctx.node)
        await check_host_files(ctx, report, "irdma-persistent", artifacts)
        options = next(a.content for a in artifacts if a.host_path == MODPROBE_OPTIONS)
        in_initramfs = await self._initramfs_options(ctx)
        if in_initramfs is not None and in_initramfs != options:
            report.fail(
                "initramfs",
                "the initramfs holds other irdma options than /etc/modprobe.d/irdma.conf: irdma "
                "loads from it at boot and would come back in iWARP mode",
                " ".join(REBUILD_INITRAMFS[ctx.node.os]),
            )
        elif in_initramfs is not None:
            report.ok("initramfs", "the initramfs loads irdma with roce_ena=1")
        return report.findings


def _module_state_artifact(node: Node) -> Artifact:
    return Artifact(
        f"nodes/{node.name}/host/irdma-module-state",
        "".join(f"{m}: loaded\n" for m in LOADED_BY_WIZARD),
        Target.SCRIPT,
        f"kernel modules on {node.name}",
        "irdma and the RDMA device modules loaded now (modprobe)",
    )


def _initramfs_artifact(node: Node, options: str) -> Artifact:
    return Artifact(
        f"nodes/{node.name}/host/initramfs",
        options,
        Target.SCRIPT,
        f"{MODPROBE_OPTIONS} inside the initramfs on {node.name}",
        f"the initramfs rebuilt ({' '.join(REBUILD_INITRAMFS[node.os])}) so irdma boots in RoCEv2 mode",
    )


def _ipv4_gid_suffix(address: str) -> tuple[str, str]:
    """The two spellings of an IPv4-mapped GID's tail: ``::ffff:a.b.c.d`` and hex groups."""
    packed = ipaddress.IPv4Address(address).packed
    hex_tail = f"ffff:{packed[0]:02x}{packed[1]:02x}:{packed[2]:02x}{packed[3]:02x}"
    return f"::ffff:{address}", hex_tail


def evaluate_rdma(
    node: Node,
    lsmod: Lsmod,
    links: RdmaLinks | None,
    devinfo: IbvDevinfo | None,
    flags: dict[str, PrivFlags | None],
    report: Report,
    aux: list[str] | None = None,
) -> dict[str, object]:
    """Judge the host RDMA stack; return what later phases need (device, GID index)."""
    discovered: dict[str, object] = {}
    missing = [m for m in REQUIRED_MODULES if not lsmod.loaded(m)]
    if missing:
        report.fail(
            "modules",
            f"kernel modules not loaded: {', '.join(missing)}",
            "run the irdma.enable step (modprobe irdma) and check dmesg for ice/irdma errors",
        )
    else:
        report.ok("modules", f"{', '.join(REQUIRED_MODULES)} loaded")
    bond_ports = set(node.bond.ports) | {node.bond.name}
    on_bond = [link for link in (links.links if links else []) if link.netdev in bond_ports]
    if not on_bond:
        report.fail(
            "rdma-device",
            f"no RDMA device on the {node.bond.name} ports ({', '.join(node.bond.ports)})",
            "with the in-tree ice the RDMA device disappears when the ports join the bond: install "
            "Intel's ice + irdma; otherwise check `modprobe irdma` and dmesg",
        )
        return discovered
    if not roce_lag_active(node, on_bond, report, aux):
        return discovered
    link = on_bond[0]
    discovered[RDMA_DEVICE.name] = link.device
    discovered[RDMA_NETDEV.name] = link.netdev
    if link.state == "ACTIVE":
        report.ok(
            "rdma-device", f"{link.device} on {link.netdev} is ACTIVE ({link.physical_state})"
        )
    else:
        report.fail(
            "rdma-device",
            f"{link.device} on {link.netdev} is {link.state} ({link.physical_state})",
            "check the link and the switch port",
        )
    hca = next((d for d in (devinfo.devices if devinfo else []) if d.hca_id == link.device), None)
    if hca is None:
        report.fail(
            "roce", f"ibv_devinfo does not show {link.device}", "check rdma-core is installed"
        )
        return discovered
    port = hca.ports[0] if hca.ports else None
    if hca.transport and "iwarp" in hca.transport.lower():
        report.fail(
            "roce",
            f"{link.device} runs iWARP, not RoCEv2",
            "set `options irdma roce_ena=1` (the irdma.enable step does) and reload irdma",
        )
        return discovered
    if port is None or port.link_layer != "Ethernet" or port.state != "PORT_ACTIVE":
        report.fail(
            "roce",
            f"{link.device} port: link layer {port.link_layer if port else '?'}, "
            f"state {port.state if port else '?'}",
            "expect link_layer Ethernet and PORT_ACTIVE",
        )
        return discovered
    v2 = [g for g in port.gids if g.type and "v2" in g.type.lower()]
    if not v2:
        report.fail("roce", f"{link.device} has no RoCE v2 GIDs", "check irdma runs in RoCE mode")
        return discovered
    dotted, hexed = _ipv4_gid_suffix(node.rdma_ip)
    mine = next((g for g in v2 if g.gid.endswith(dotted) or g.gid.lower().endswith(hexed)), None)
    if mine is None:
        report.warn(
            "roce",
            f"RoCE v2 GIDs exist on {link.device} but none for {node.rdma_ip}",
            f"check {node.rdma_ip} is configured on {node.bond.name} (nodes[].rdma_ip)",
        )
    else:
        discovered[GID_INDEX.name] = mine.index
        report.ok(
            "roce",
            f"{link.device}: RoCE v2, GID index {mine.index} for {node.rdma_ip}, link layer Ethernet",
        )
    for port_name, fact in flags.items():
        if fact is None:
            continue
        lldp = fact.flags.get("fw-lldp-agent")
        discovered.setdefault("fw_lldp_agent", {})[port_name] = lldp  # type: ignore[index]
        if lldp:
            report.ok(
                f"lldp-{port_name}",
                f"{port_name}: firmware LLDP agent is on (the QoS phase turns it off for DCB)",
            )
    return discovered


# ice's auxiliary device per PF for irdma (ice_idc.c ice_plug_aux_dev: adev->name "roce" or
# "iwarp", on the auxiliary bus as ice.roce.<aux_idx>). With RoCE LAG, ice_lag unplugs the
# secondary PF's (ice_lag.c, ice_lag_link / ice_lag_chk_rdma: ice_unplug_aux_dev).
AUX_DEVICES = ["ls", "/sys/bus/auxiliary/devices"]


def roce_lag_active(
    node: Node, on_bond: list, report: Report, aux: list[str] | None = None
) -> bool:
    """RoCE over the bond needs one RDMA device for both of its ports.

    Intel's ice with RoCE LAG (ICE_F_ROCE_LAG: the NVM's roce_lag capability and a DDP
    package with lport extraction, src/ice_lag.c ``ice_lag_init_feature_support_flag``)
    keeps the RDMA device on the bond's primary port and forwards the secondary's RoCEv2
    traffic to it. Without the feature ``ice_init_lag`` sets up nothing: each PF keeps its
    own device, and whichever one a client picks, the flows the switch hashes onto the other
    port reach a device that has no such QP. Taking the first device would hide that.
    """
    devices = sorted({link.device for link in on_bond})
    if len(devices) > 1:
        where = ", ".join(f"{link.device} on {link.netdev}" for link in on_bond)
        report.fail(
            "roce-lag",
            f"RoCE LAG is not active on {node.bond.name}: both bonded ports still have their "
            f"own RDMA device ({where}), so ice did not take the bond for RDMA (no roce_lag "
            "capability in the E810 NVM or no lport extraction in the DDP package) and RoCE "
            "flows hashed onto the other port are lost",
            "update the E810 NVM to Intel's latest (nvmupdate64e) and load the comms DDP "
            "package (see e810.ice's ddp), reboot, and verify `rdma link` shows one device",
        )
        return False
    roce_aux = sorted(a for a in (aux or []) if a.startswith("ice.roce."))
    if len(roce_aux) > 1:
        report.fail(
            "roce-lag",
            f"one RDMA device ({devices[0]}) on {node.bond.name} but {len(roce_aux)} ice RoCE "
            f"auxiliary devices ({', '.join(roce_aux)}): with RoCE LAG ice unplugs the "
            "secondary PF's, so this is no LAG; irdma failed to probe the other PF (dmesg "
            "names why) and RoCE flows hashed onto that port are lost",
            "read `dmesg | grep -i irdma` for the failed probe; update the NVM and the comms "
            "DDP package (see e810.ice's ddp), reboot, and verify one ice.roce.* device",
        )
        return False
    seen = ("; auxiliary devices not readable" if aux is None
            else f"; {len(roce_aux)} ice.roce auxiliary device")  # fmt: skip
    report.ok(
        "roce-lag",
        f"one RDMA device ({devices[0]} on {on_bond[0].netdev}) for both ports of "
        f"{node.bond.name}{seen}: the NIC's LAG carries RDMA on the bond",
    )
    return True


def rdma_reads(node: Node) -> list[Read]:
    """The host RDMA stack in one batch: modules, devices, GIDs, packages, LLDP flags."""
    return [
        Read(LSMOD, parse_lsmod),
        Read(RDMA_LINKS),
        Read(["ibv_devinfo", "-v"], parse_ibv_devinfo),
        Read(INFINIBAND_DEVICES, None),
        Read(AUX_DEVICES, None),
        packages_read(node),
        *(Read(priv_flags_command(port), parse_priv_flags) for port in node.bond.ports),
    ]


# What irdma.verify discovers, for the steps after it (wizard/result_keys.py).
RDMA_DEVICE = ResultKey(
    "irdma.verify", "rdma_device", str, "the one RDMA device of the bond ports (`rdma link`)"
)
RDMA_NETDEV = ResultKey("irdma.verify", "rdma_netdev", str, "the PF netdev that device sits on")
GID_INDEX = ResultKey("irdma.verify", "gid_index", int, "the RoCEv2 GID of the node's rdma_ip")


class VerifyRdma(Step):
    id = "irdma.verify"
    title = "RDMA devices up, RoCEv2, link layer Ethernet"
    kind = StepKind.CHECK
    gates = ("T02",)
    requires = ("irdma.enable",)
    reads = ("node.bond", "node.rdma_ip")
    provides = (RDMA_DEVICE, RDMA_NETDEV, GID_INDEX)
    explain = (
        "Modules ice, irdma, ib_core, ib_uverbs and rdma_cm are loaded; `rdma link` shows "
        "the E810 ports ACTIVE; ibv_devinfo shows link_layer Ethernet and PORT_ACTIVE; RoCE "
        "v2 GIDs exist (not iWARP); one RDMA device for both bond ports (RoCE LAG active: "
        "two mean ice did not take the bond for RDMA, and none is picked). The firmware LLDP "
        "agent flag is recorded for the QoS phase; rdma-core and perftest are installed. If "
        "this fails, stop: nothing in Kubernetes is touched until host RDMA works."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return read_lines(rdma_reads(node)) if node else []

    async def verify(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        report = Report("T02")
        ports = list(ctx.node.bond.ports)
        lsmod, links, devinfo, devices, aux_read, package_list, *flag_reads = await read_all(
            ctx, *rdma_reads(ctx.node)
        )
        aux = aux_read.result.stdout.split()[:256] if aux_read.result.ok else None
        if not lsmod.ok:
            report.unreadable("modules", lsmod, "the loaded modules")
            return report.findings
        flags = {port: p.fact for port, p in zip(ports, flag_reads, strict=True)}
        discovered = evaluate_rdma(
            ctx.node, lsmod.fact, links.fact, devinfo.fact, flags, report, aux
        )
        ctx.data.update(discovered)
        names = devices.result.stdout.split() if devices.result.ok else []
        absent = [need for need in PLUGIN_NEEDS if not any(n.startswith(need) for n in names)]
        if RDMA_DEVICE.name not in discovered:
            pass  # no RDMA device at all: reported above, its character devices follow from it
        elif absent:
            report.fail(
                "devices",
                f"/dev/infiniband lacks {', '.join(absent)} ({' '.join(names) or 'empty'}): the "
                "shared RDMA device plugin would advertise 0 devices",
                "modprobe -a ib_uverbs rdma_ucm ib_umad (irdma.enable loads and persists them)",
                devices.evidence(),
            )
        else:
            report.ok("devices", f"/dev/infiniband: {' '.join(names)}")
        _, packages = evaluate_packages(ctx.node, package_list)
        report.findings.extend(packages.findings)
        return report.findings


PHASE = Phase(
    read_only=True,
    id="irdma",
    number=5,
    title="irdma (host RDMA)",
    summary="Load and persist irdma in RoCEv2 mode, then prove the host RDMA stack works.",
    steps=(EnableIrdma(), VerifyRdma()),
)
