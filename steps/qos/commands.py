"""The QoS change's commands beside the per-port operations (steps/qos/operations.py): for
the bond's manager, for the ToS and DCQCN, and the scripts exported and installed for boot
(templates/host/qos/), rendered from the operations, which discover what is only known at
run time (the RDMA device Intel's LAG registers, the NetworkManager port profiles)."""

from __future__ import annotations

import shlex

from steps.qos.operations import (
    CAPTURE_FILE,
    apply_targets,
    restore_targets,
    shell_capture,
    shell_capture_gaps,
    shell_converge,
    shell_firmware_owned,
    shell_pending,
)
from wizard.artifacts import render
from wizard.drain import back_in_service, out_of_service
from wizard.site import Node, Site
from wizard.transports.base import write_value_command

DCB_UNIT = "gpu-node-wizard-roce-qos.service"
DCB_UNIT_PATH = f"/etc/systemd/system/{DCB_UNIT}"
DCB_SCRIPT_PATH = "/usr/local/sbin/gpu-node-wizard-roce-qos"
TOS_UNIT = "gpu-node-wizard-roce-tos.service"
TOS_UNIT_PATH = f"/etc/systemd/system/{TOS_UNIT}"
TOS_SCRIPT_PATH = "/usr/local/sbin/gpu-node-wizard-roce-tos"
UNITS = (DCB_UNIT, TOS_UNIT)
IS_ENABLED = ["systemctl", "is-enabled", *UNITS]
# A rollback turns them off, or the next boot applies the change again (host-r2 B2). Not
# --now: they are oneshot units whose work is done; the rollback undoes that work itself.
DISABLE = ["systemctl", "disable", *UNITS]
LACP_WAIT_S = 60  # the bond and its RDMA device back after the change
BOOT_WAIT_S = 120  # the same at boot, when the network may still be coming up

# Who manages the bond (the same probes the scripts' bond_manager() makes).
NM_DEVICES = ["nmcli", "-t", "-f", "DEVICE,STATE,CONNECTION", "device", "status"]
# Each port's profile by UUID: nmcli(1) selects `id` (a name, which need not be unique: the
# first profile of that name wins, NetworkManager src/nmcli/common.c nmc_find_connection)
# or `uuid` (unique). UUIDs and device names hold no ':', so a terse line is read from the
# right (a name's ':' is escaped as '\:', src/nmcli/utils.c escape_values).
NM_CONNECTIONS = ["nmcli", "-t", "-f", "NAME,UUID,TYPE,DEVICE", "connection", "show"]


def port_uuids(output: str) -> dict[str, str]:
    """{device: UUID of the profile active on it} from ``NM_CONNECTIONS``' output (the
    scripts' port_profile reads the same line the same way)."""
    found: dict[str, str] = {}
    for line in output.splitlines():
        rest, _, device = line.rpartition(":")
        rest, _, _kind = rest.rpartition(":")
        _, _, uid = rest.rpartition(":")
        if device and uid:
            found.setdefault(device, uid)
    return found


NETWORKD_LINKS = ["networkctl", "list", "--no-legend", "--no-pager"]
NETWORK_MANAGER, NETWORKD, UNMANAGED = "NetworkManager", "networkd", "none"


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
        return [["nmcli", "connection", "down", "uuid", profiles[port]] for port in ports]
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
        return [["nmcli", "connection", "up", "uuid", profiles[port]] for port in ports]
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


_PROFILE = "@PROFILE@"  # stands for the port's NetworkManager profile, found at run time


def _bond_lines(node: Node, join: bool) -> dict[str, dict[str, list[str]]]:
    """``leave_bond_commands`` / ``join_bond_commands`` per port and manager, as the
    scripts run them (the NetworkManager profile read on the node: lib.sh port_profile)."""
    commands = join_bond_commands if join else leave_bond_commands
    result: dict[str, dict[str, list[str]]] = {}
    for port in node.bond.ports:
        profile = f'"$(port_profile {shlex.quote(port)})"'
        result[port] = {
            manager: [
                shlex.join(c).replace(_PROFILE, profile)
                for c in commands(manager, node, {port: _PROFILE}, [port])
            ]
            for manager in (NETWORK_MANAGER, NETWORKD, UNMANAGED)
        }
    return result


def _context(site: Site, node: Node) -> dict:
    """What the scripts render from the operations (steps/qos/operations.py)."""
    ports = node.bond.ports
    apply = {port: apply_targets(site, port) for port in ports}
    restore = {port: restore_targets(site, port) for port in ports}
    return {
        "node": node,
        "qos": site.qos,
        "converge": {port: shell_converge(port, apply[port]) for port in ports},
        "pending": {port: shell_pending(port, apply[port]) for port in ports},
        "restore": {port: shell_converge(port, restore[port]) for port in ports},
        "restore_pending": {port: shell_pending(port, restore[port]) for port in ports},
        "owned": {port: shell_firmware_owned(port) for port in ports},
        "gaps": {port: shell_capture_gaps(site, port) for port in ports},
        "capture": {port: shell_capture(site, port) for port in ports},
        "lacp_wait": LACP_WAIT_S,
        "boot_wait": BOOT_WAIT_S,
        "dcb_unit": DCB_UNIT,
        "tos_unit": TOS_UNIT,
        "is_enabled": shlex.join(IS_ENABLED),
        "disable_units": shlex.join(DISABLE),
        "rollback": False,
        "capture_file": CAPTURE_FILE,
        "leave_bond": _bond_lines(node, join=False),
        "join_bond": _bond_lines(node, join=True),
        "out_of_service": out_of_service(node.name),
        "back_in_service": back_in_service(node.name),
    }


def procedure(site: Site, node: Node) -> str:
    """The whole ordered change for one node, as the operator would run it by hand: it
    keeps what it found in the node's capture file first (a rerun keeps the first one)."""
    return render("host/qos/apply.sh.j2", **_context(site, node))


def rollback_script(site: Site, node: Node, capture: str | None) -> str:
    """Restore a capture (``operations.capture_text``: the live run's, at the window
    gate), or (None, the export) the one apply-qos.sh kept on the node."""
    context = _context(site, node) | {"rollback": True, "embedded": capture}
    return render("host/qos/rollback.sh.j2", **context)


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
