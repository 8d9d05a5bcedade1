"""The QoS change as commands: per port (for the live apply and the rollback, computed from
the live state), for the bond's manager, for the ToS and DCQCN, and the scripts exported
and installed for boot (templates/host/qos/), which discover what is only known at run
time (the RDMA device Intel's LAG registers, the NetworkManager port profiles)."""

from __future__ import annotations

import shlex

from steps.common import shown
from steps.qos.model import FACTORY, PortQos, desired_bandwidth, desired_port
from wizard.artifacts import render
from wizard.site import Node, Site
from wizard.transports.base import write_value_command

DCB_UNIT = "gpu-node-wizard-roce-qos.service"
DCB_UNIT_PATH = f"/etc/systemd/system/{DCB_UNIT}"
DCB_SCRIPT_PATH = "/usr/local/sbin/gpu-node-wizard-roce-qos"
TOS_UNIT = "gpu-node-wizard-roce-tos.service"
TOS_UNIT_PATH = f"/etc/systemd/system/{TOS_UNIT}"
TOS_SCRIPT_PATH = "/usr/local/sbin/gpu-node-wizard-roce-tos"
LACP_WAIT_S = 60  # the bond and its RDMA device back after the change
BOOT_WAIT_S = 120  # the same at boot, when the network may still be coming up

# Who manages the bond (the same probes the scripts' bond_manager() makes).
NM_DEVICES = ["nmcli", "-t", "-f", "DEVICE,STATE,CONNECTION", "device", "status"]
NETWORKD_LINKS = ["networkctl", "list", "--no-legend", "--no-pager"]
NETWORK_MANAGER, NETWORKD, UNMANAGED = "NetworkManager", "networkd", "none"


def _pfc_map(pfc: tuple[int, ...]) -> list[str]:
    return [f"{p}:{'on' if p in pfc else 'off'}" for p in range(8)]


def _bw_map(bw: tuple[int, ...]) -> list[str]:
    return [f"{i}:{b}" for i, b in enumerate(bw)]


def lldp_command(port: str, on: bool) -> list[str]:
    return ["ethtool", "--set-priv-flags", port, "fw-lldp-agent", "on" if on else "off"]


def ets_command(port: str, bw: tuple[int, ...]) -> list[str]:
    """ETS by bandwidth only: no prio-tc (ignored in DSCP mode; with gaps it disables DCB)."""
    return ["dcb", "ets", "set", "dev", port, "tc-tsa", "all:ets", "tc-bw", *_bw_map(bw)]


def port_commands(site: Site, port: str, live: PortQos) -> list[list[str]]:
    """The ordered commands that take one port from ``live`` to the desired QoS, only what
    is missing (each can run twice: every one is a set, or guarded by the live state).

    The ice driver's order: the firmware LLDP agent off first (software DCB needs it off);
    the DSCP entry next, because the first one switches the port to L3 (DSCP) mode, which
    resets ETS to TC0 = 100 % and maps priority n to TC n (ice_dcbnl_setapp); then PFC;
    ETS last. A DSCP value mapped to another priority is deleted first: ``dcb app replace``
    cannot move it (ice refuses the add: "DSCP value ... already user mapped").
    """
    qos = site.qos
    wanted = desired_port(site)
    commands: list[list[str]] = []
    if live.lldp_agent is not False:
        commands.append(lldp_command(port, False))
    mode_switch = not live.dscp_prio
    for dscp, prio in live.dscp_prio:
        if dscp == qos.dscp and prio != qos.priority:
            commands.append(["dcb", "app", "del", "dev", port, "dscp-prio", f"{dscp}:{prio}"])
            mode_switch = mode_switch or len(live.dscp_prio) == 1
    if (qos.dscp, qos.priority) not in live.dscp_prio:
        commands.append(
            ["dcb", "app", "add", "dev", port, "dscp-prio", f"{qos.dscp}:{qos.priority}"]
        )
    # Only what differs from the state after the DSCP step (the switch to DSCP mode resets
    # ETS, not PFC): Intel's out-of-tree ice answers a set that changes nothing with
    # ICE_DCB_NO_HW_CHG, an error to `dcb` (wizard/lab/dcb.py).
    if live.pfc != wanted.pfc:
        commands.append(["dcb", "pfc", "set", "dev", port, "prio-pfc", *_pfc_map(wanted.pfc)])
    if (FACTORY.tc_bw if mode_switch else live.tc_bw) != wanted.tc_bw:
        commands.append(ets_command(port, desired_bandwidth(site)))
    return commands


def restore_commands(port: str, current: PortQos, previous: PortQos) -> list[list[str]]:
    """Commands that put one port back to a captured state: the DSCP entries first (the
    last one deleted switches the port back to VLAN mode and resets DCB to its default),
    then PFC, then ETS (with the previous priority map only in VLAN mode), LLDP last.
    The PFC and ETS sets are those of the state after the DSCP step as the driver leaves
    it (``after_dscp``); the live undo reads that state instead (``settle_commands``)."""
    return dscp_restore_commands(port, current, previous) + settle_commands(
        port, previous, after_dscp(current, previous)
    )


def after_dscp(current: PortQos, previous: PortQos) -> PortQos:
    """What a port holds once its DSCP entries are as captured: the last one deleted
    switches it back to VLAN mode, which resets DCB to the default (ice_dcb_sw_dflt_cfg)
    with the LLDP agent as it was; the first one added resets ETS (ice_dcbnl_setapp)."""
    pfc, prio_tc, bw = current.pfc, current.prio_tc, current.tc_bw
    kept = [entry for entry in current.dscp_prio if entry in previous.dscp_prio]
    vlan = not current.dscp_prio
    if current.dscp_prio and not kept:  # the last entry deleted: VLAN mode, DCB default
        pfc, prio_tc, bw, vlan = (), FACTORY.prio_tc, FACTORY.tc_bw, True
    if previous.dscp_prio and vlan:  # the first entry added: DSCP mode, ETS reset
        prio_tc, bw = tuple(range(8)), FACTORY.tc_bw
    return PortQos(False, pfc, previous.dscp_prio, prio_tc, bw)


def dscp_restore_commands(port: str, current: PortQos, previous: PortQos) -> list[list[str]]:
    """The LLDP agent off (DCB changes need it), then the DSCP entries as captured."""
    commands: list[list[str]] = []
    if current.lldp_agent is not False:
        commands.append(lldp_command(port, False))  # DCB changes need it off
    for d, p in current.dscp_prio:
        if (d, p) not in previous.dscp_prio:
            commands.append(["dcb", "app", "del", "dev", port, "dscp-prio", f"{d}:{p}"])
    for d, p in previous.dscp_prio:
        if (d, p) not in current.dscp_prio:
            commands.append(["dcb", "app", "add", "dev", port, "dscp-prio", f"{d}:{p}"])
    return commands


def settle_commands(port: str, previous: PortQos, now: PortQos) -> list[list[str]]:
    """After the DSCP entries are as captured (``now``, read back): PFC, ETS and the LLDP
    agent as captured, each only where it differs (ice refuses a set that changes
    nothing: ICE_DCB_NO_HW_CHG)."""
    commands = []
    if now.pfc != previous.pfc:
        commands.append(["dcb", "pfc", "set", "dev", port, "prio-pfc", *_pfc_map(previous.pfc)])
    bw = previous.tc_bw or FACTORY.tc_bw
    prio_tc = previous.prio_tc if not previous.dscp_prio else None
    if now.tc_bw != bw or (prio_tc is not None and now.prio_tc != prio_tc):
        ets = ets_command(port, bw)  # type: ignore[arg-type]
        if prio_tc is not None:
            ets += ["prio-tc", *_bw_map(prio_tc)]
        commands.append(ets)
    if previous.lldp_agent:
        commands.append(lldp_command(port, True))
    return commands


# -- the bond, through whoever manages it --------------------------------------------------


def leave_bond_commands(
    manager: str, node: Node, profiles: dict[str, str], ports: list[str] | None = None
) -> list[list[str]]:
    """Release the ports (default: both) from the bond (Intel's LAG refuses DCB changes on
    bonded ports). Under NetworkManager through its port profiles: `ip link set nomaster`
    is undone by it. Give only the ports still in the bond: NetworkManager refuses to take
    down a profile that is not active ("is not an active connection")."""
    ports = list(node.bond.ports) if ports is None else ports
    if manager == NETWORK_MANAGER:
        return [["nmcli", "connection", "down", profiles[port]] for port in ports]
    return [
        ["ip", "link", "set", "dev", port, state]
        for port in ports
        for state in ("down", "nomaster")
    ]


def join_bond_commands(
    manager: str, node: Node, profiles: dict[str, str], ports: list[str] | None = None
) -> list[list[str]]:
    """Put the ports (default: both; give those not in the bond) back into it."""
    ports = list(node.bond.ports) if ports is None else ports
    if manager == NETWORK_MANAGER:
        return [["nmcli", "connection", "up", profiles[port]] for port in ports]
    if manager == NETWORKD:
        return [["networkctl", "reconfigure", port] for port in ports]
    return [
        command
        for port in ports
        for command in (
            ["ip", "link", "set", "dev", port, "master", node.bond.name],
            ["ip", "link", "set", "dev", port, "up"],
        )
    ]


# -- ToS and DCQCN ------------------------------------------------------------------------


def tos_path(device: str) -> str:
    return f"/sys/kernel/config/rdma_cm/{device}/ports/1/default_roce_tos"


def tos_commands(device: str, tos: str | int) -> list[list[str]]:
    """The RoCE ToS of the device's connection manager (configfs: the folder first)."""
    return [
        ["mkdir", "-p", f"/sys/kernel/config/rdma_cm/{device}"],
        write_value_command(tos_path(device), str(tos)),
    ]


def dcqcn_path(device: str) -> str:
    return f"/sys/kernel/config/irdma/{device}/roce_dcqcn_enable"


def dcqcn_commands(device: str) -> list[list[str]]:
    """DCQCN (ECN) on in irdma's configfs for the device (the folder first)."""
    return [
        ["mkdir", "-p", f"/sys/kernel/config/irdma/{device}"],
        write_value_command(dcqcn_path(device), "1"),
    ]


# -- scripts --------------------------------------------------------------------------------


def _context(site: Site, node: Node) -> dict:
    wanted = desired_port(site)
    return {
        "node": node,
        "qos": site.qos,
        "pfc_map": " ".join(_pfc_map(wanted.pfc)),
        "tc_bw": " ".join(_bw_map(desired_bandwidth(site))),
        "lacp_wait": LACP_WAIT_S,
        "boot_wait": BOOT_WAIT_S,
        "dcb_unit": DCB_UNIT,
        "tos_unit": TOS_UNIT,
    }


def procedure(site: Site, node: Node) -> str:
    """The whole ordered change for one node, as the operator would run it by hand."""
    return render("host/qos/apply.sh.j2", **_context(site, node))


def rollback_script(
    site: Site, node: Node, previous: dict[str, PortQos] | None, tos: str | None
) -> str:
    """Restore ``previous`` (the capture; None: a port in factory state, for the export)."""
    wanted = desired_port(site)
    restore, checks = {}, {}
    for port in node.bond.ports:
        before = (previous or {}).get(port, FACTORY)
        name = shown([port])
        lines = [f"lldp_off {name}"]
        lines += [f"app_del {name} {d}:{p}" for d, p in wanted.dscp_prio
                  if (d, p) not in before.dscp_prio]  # fmt: skip
        lines += [f"app_add {name} {d}:{p}" for d, p in before.dscp_prio]
        # Each set guarded by the live state in the script (ice: ICE_DCB_NO_HW_CHG).
        lines.append(f"pfc_set {name} {' '.join(_pfc_map(before.pfc))}")
        bw = " ".join(_bw_map(before.tc_bw or FACTORY.tc_bw))  # type: ignore[arg-type]
        prio_tc = before.prio_tc if not before.dscp_prio and before.prio_tc else None
        lines.append(
            f"ets_set {name} '{bw}'" + (f" '{' '.join(_bw_map(prio_tc))}'" if prio_tc else "")
        )
        if before.lldp_agent:
            lines.append(f"lldp_on {name}")
        restore[port] = lines
        # The same target as one check, so that a rerun with nothing to restore leaves
        # the bond up (lib.sh restore_differs).
        absent = " ".join(f"{d}:{p}" for d, p in wanted.dscp_prio if (d, p) not in before.dscp_prio)
        present = " ".join(f"{d}:{p}" for d, p in before.dscp_prio)
        check = [port, "on" if before.lldp_agent else "off", absent, present,
                 " ".join(_pfc_map(before.pfc)), bw, " ".join(_bw_map(prio_tc)) if prio_tc else ""]  # fmt: skip
        checks[port] = "restore_differs " + " ".join(shlex.quote(w) for w in check)
    return render(
        "host/qos/rollback.sh.j2",
        **_context(site, node),
        restore=restore,
        checks=checks,
        previous_tos=tos or "0",
        captured=previous is not None,
    )


def boot_dcb_script(site: Site, node: Node) -> str:
    return render("host/qos/boot-dcb.sh.j2", **_context(site, node))


def boot_tos_script(site: Site, node: Node) -> str:
    return render("host/qos/boot-tos.sh.j2", **_context(site, node))


def dcb_unit(node: Node) -> str:
    return render("host/roce-qos.service.j2", node=node, script=DCB_SCRIPT_PATH)


def tos_unit(site: Site, node: Node) -> str:
    return render(
        "host/roce-tos.service.j2",
        node=node,
        script=TOS_SCRIPT_PATH,
        ecn=site.qos.ecn,
        dcb_unit=DCB_UNIT,
        boot_wait=BOOT_WAIT_S,
    )


def dcb_batch(commands: list[list[str]], port: str) -> str:
    """The dcb commands of a port as a `dcb -b` batch file (one command per line)."""
    lines = [
        f"# gpu-node-wizard: RoCE QoS for {port}; apply with `dcb -b FILE` (LLDP agent off first)"
    ]
    lines += [" ".join(c[1:]) for c in commands if c[0] == "dcb"]
    return "\n".join(lines) + "\n"
