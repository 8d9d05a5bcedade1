"""Phase 11, RoCE QoS on both E810 ports of a live bond: a maintenance-window change (T08, T10).

A package of one job per module: ``model`` (a port's QoS as wanted and as read back, one
form for the diff), ``operations`` (the per-port change declared once: reads, guards,
effects, undo; executed live and rendered as shell), ``commands`` (the bond, ToS and
DCQCN commands and the exported and boot-time scripts rendered from the operations),
``probes`` (what is read on the node), ``steps`` (the phase's steps). The change
follows what Intel's ice driver and its RDMA-over-LAG allow: QoS identical on both ports
before bonding and refused while bonded, so the ports leave bond1 through whoever manages
it, get identical QoS in the order the driver accepts, and rejoin it; the ToS is written on
the RDMA device the re-formed bond carries; the node is cordoned and drained around it.
"""

from __future__ import annotations

from steps.qos.commands import (
    DCB_SCRIPT_PATH,
    DCB_UNIT,
    DCB_UNIT_PATH,
    TOS_SCRIPT_PATH,
    TOS_UNIT,
    TOS_UNIT_PATH,
    boot_dcb_script,
    boot_tos_script,
    dcb_unit,
    dcqcn_commands,
    dcqcn_path,
    procedure,
    rollback_script,
    tos_unit,
)
from steps.qos.model import FACTORY, PortQos, desired_port
from steps.qos.operations import apply_targets, restore_targets
from steps.qos.peers import PeerQos
from steps.qos.probes import rdma_device
from steps.qos.steps import ApplyQos, BootPersistence, QosMeasure, SwitchIntent, verify_lines
from wizard.plan import Phase

PHASE = Phase(
    id="qos",
    number=11,
    title="RoCE QoS (maintenance window)",
    summary="DSCP 24 -> priority 3 -> TC3 with PFC on priority 3, identical on both ports.",
    steps=(SwitchIntent(), PeerQos(), ApplyQos(), BootPersistence(), QosMeasure()),
)

__all__ = [
    "DCB_SCRIPT_PATH",
    "DCB_UNIT",
    "DCB_UNIT_PATH",
    "FACTORY",
    "PHASE",
    "TOS_SCRIPT_PATH",
    "TOS_UNIT",
    "TOS_UNIT_PATH",
    "ApplyQos",
    "BootPersistence",
    "PortQos",
    "QosMeasure",
    "SwitchIntent",
    "apply_targets",
    "boot_dcb_script",
    "boot_tos_script",
    "dcb_unit",
    "dcqcn_commands",
    "dcqcn_path",
    "desired_port",
    "procedure",
    "rdma_device",
    "restore_targets",
    "rollback_script",
    "tos_unit",
    "verify_lines",
]  # fmt: skip
