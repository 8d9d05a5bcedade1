"""``HostState``: one simulated machine's state, set up as the wizard would find it (and as
the lab's faults make it), and what follows from that state (its kernel, its RDMA devices,
the GPUs it shows). ``LabHost``: the machine, that state with the collaborators that answer
its commands, one module a subject, each given the state and only the collaborators it
talks to."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from simulator.host.dispatch import CommandDispatch
from simulator.host.files import HostFiles
from simulator.host.model import (
    LEFTOVER_KERNEL,
    RHEL_KERNEL,
    RHEL_NEXT_KERNEL,
    RHEL_PACKAGES,
    UBUNTU_KERNEL,
    UBUNTU_NEXT_KERNEL,
    Port,
    Result,
)
from simulator.host.nic import HostNic
from simulator.host.pci import HostPci
from simulator.host.rdma import HostRdma
from simulator.host.system import SystemInfo
from simulator.kmod import KernelModules
from simulator.network import HostNetwork
from wizard.artifacts import render


@dataclass
class HostState:
    """One simulated machine's state. ``role`` is ``gpu`` (a B300 node) or ``peer`` (AIStor).
    A saved lab keeps it as it is (simulator/persist.py)."""

    name: str
    role: str
    mgmt_ip: str
    rdma_ip: str
    os: str = "rhel-10.2"
    gpu_count: int = 8
    faults: set[str] = field(default_factory=set)
    bond_name: str = "bond1"
    ports: list[Port] = field(default_factory=list)
    modules: set[str] = field(default_factory=set)
    files: dict[str, str] = field(default_factory=dict)
    packages: set[str] = field(default_factory=lambda: set(RHEL_PACKAGES))
    boot_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    # systemd's machine-id(5): 32 lower-case hex digits, one per installed machine.
    machine_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    configfs: dict[str, str] = field(default_factory=dict)
    gpu_driver: bool = False  # set once the (simulated) GPU Operator driver is running
    # The RDMA device's ib_core hw_counters by name (irdma: cnpSent, cnpHandled, RxECNMrkd...).
    hw_counters: dict[str, int] = field(default_factory=dict)
    enabled_units: set[str] = field(default_factory=set)
    commands: list[str] = field(default_factory=list)
    # What the boot units printed and returned at each boot (simulator/shell.py runs them).
    boot_log: list[dict[str, Any]] = field(default_factory=list)
    # Kernel messages since boot beyond the fixed boot lines (dmesg shows both).
    kernel_log: list[str] = field(default_factory=list)
    # One-shot events a fault has already played (e.g. "roce-tos-reset").
    flags: dict[str, bool] = field(default_factory=dict)
    # irdma's mode as loaded (module options are read when it loads), the options the
    # initramfs was built with (it loads irdma at boot), and whether Intel's LAG kept RDMA.
    irdma_roce: bool = False
    initramfs_irdma_options: str = ""
    lag_rdma_ok: bool = True
    # The standard input of the command being answered (tee reads it).
    stdin: str = ""

    def __post_init__(self) -> None:
        if not self.ports:
            second_slot = "0000:5e:00.0" if "bond-split-nics" in self.faults else "0000:3b:00.1"
            self.ports = [
                Port("ens5f0np0", "0000:3b:00.0", "b4:83:51:02:7a:30"),
                Port("ens5f1np1", second_slot, "b4:83:51:02:7a:31"),
            ]
            if "bond-slave-down" in self.faults:
                self.ports[1].up = False
        base = {"ice", "bonding", "ib_core", "ib_uverbs", "rdma_cm", "iw_cm", "ib_cm", "nvme"}
        if "irdma-not-loaded" not in self.faults:
            # A node the wizard prepared earlier (phase 5): its own files, modules loaded.
            base |= {"irdma", "ib_umad"}
            self.files["/etc/modules-load.d/irdma.conf"] = render("host/irdma-modules-load.conf.j2")
            if "iwarp" not in self.faults and "in-tree-ice" not in self.faults:
                self.files["/etc/modprobe.d/irdma.conf"] = render("host/irdma-modprobe.conf.j2")
        base.add("rdma_ucm")  # rdma-core's rdma.conf loads it for any RDMA device
        self.modules = base
        options = self.files.get("/etc/modprobe.d/irdma.conf", "")
        self.irdma_roce = "roce_ena=1" in options
        self.initramfs_irdma_options = options  # a host prepared earlier, consistently
        if self.role == "peer" and "peer-qos-missing" not in self.faults:
            # The AIStor team's side of lossless RoCE: DSCP 24 -> priority 3, PFC on 3.
            for port in self.ports:
                port.lldp_agent = False
                port.dcb.dscp_mode, port.dcb.prio_tc = True, list(range(8))
                port.dcb.app.append((24, 3))
                port.dcb.pfc.add(3)
        if "lag-dcb-mismatch" in self.faults:
            self.ports[1].dcb.pfc.add(3)  # one port had PFC when the bond formed
            self.kernel_log.append(self.lag_dcb_refusal())
            self.lag_rdma_ok = False
        if "headers-other-kernel" in self.faults:
            # A repository's newest kernel-devel, not the running kernel's (dnf install
            # kernel-devel takes the newest): the unversioned name is satisfied, the build not.
            self.packages.discard(f"kernel-devel-{RHEL_KERNEL}")
            self.packages.add(f"kernel-devel-{RHEL_NEXT_KERNEL}")
        if self.os.startswith("ubuntu"):
            self.packages = set()

    # -- derived state ---------------------------------------------------------------------

    def port(self, name: str) -> Port | None:
        return next((p for p in self.ports if p.name == name), None)

    def lag_dcb_refusal(self) -> str:
        """What Intel's ice logs when the bond's ports differ in DCB (src/ice_lag.c
        ice_is_bond_rdma_cap): ``netdev_info(lag->netdev, "Found netdev %s with different
        DCB config\\n", peer)`` on the bond's primary (the first port that joined), which
        net/core/dev.c __netdev_printk prefixes with "<driver> <PCI address> <netdev>: "."""
        first, second = self.ports[0], self.ports[1]
        return (
            f"ice {first.slot} {first.name}: Found netdev {second.name} with different DCB config"
        )

    @property
    def ssh_over_bond1(self) -> bool:
        """The SSH session runs over bond1: on its address, or on a VLAN stacked on it."""
        return "ssh-over-bond1" in self.faults or "ssh-over-bond1-vlan" in self.faults

    @property
    def rdma_ip_interface(self) -> str:
        """Which interface holds the bond's address: bond1, or its VLAN bond1.100."""
        return f"{self.bond_name}.100" if "ssh-over-bond1-vlan" in self.faults else self.bond_name

    @property
    def kernel(self) -> str:
        return UBUNTU_KERNEL if self.os.startswith("ubuntu") else RHEL_KERNEL

    @property
    def mtu(self) -> int:
        """The bond's MTU: jumbo frames end to end, or 1500 on a peer left at the default."""
        return 1500 if "peer-mtu-1500" in self.faults and self.role == "peer" else 9000

    @property
    def active_mtu(self) -> int:
        """The RoCE port's active_mtu, as ib_core derives it from the netdev's MTU
        (include/rdma/ib_addr.h ``iboe_get_mtu``: the largest IB MTU that fits the netdev MTU
        less the RoCEv2 headers, GRH + UDP + BTH + DETH + ATOMICETH + ICRC = 100 bytes)."""
        payload = self.mtu - 100
        return next((m for m in (4096, 2048, 1024, 512) if payload >= m), 256)

    @property
    def kernels(self) -> dict[str, str]:
        """Each installed kernel and where its ice/irdma come from: ``updates`` (Intel's,
        built for it), ``weak-updates`` (Intel's kmod package linked by weak-modules for a
        newer kernel of the same kABI) or ``kernel`` (the in-tree drivers only).

        A kernel update (``dnf update``) installs a newer kernel with its own module tree,
        which holds the in-tree ice only unless DKMS rebuilds Intel's or weak-modules links
        it, and makes it the default boot entry (RHEL /etc/sysconfig/kernel UPDATEDEFAULT)."""
        own = "kernel" if self.in_tree else "updates"
        kernels = {LEFTOVER_KERNEL: "kernel"} if "leftover-module-tree" in self.faults else {}
        kernels[self.kernel] = own
        nxt = UBUNTU_NEXT_KERNEL if self.os.startswith("ubuntu") else RHEL_NEXT_KERNEL
        if "kernel-update" in self.faults:
            kernels[nxt] = "kernel"
        elif "kernel-update-weak-modules" in self.faults:
            kernels[nxt] = "weak-updates" if own == "updates" else "kernel"
        return kernels

    @property
    def default_kernel(self) -> str:
        """The default boot entry: the newest installed kernel (a kernel update makes it so)."""
        return list(self.kernels)[-1]

    def module_path(self, kernel: str, module: str) -> str:
        """Where ``modinfo -k KERNEL MODULE`` finds the module (kmod's search order: updates/
        and weak-updates/ before the kernel's own tree, depmod.d/dist.conf)."""
        tree = self.kernels[kernel]
        if tree == "kernel":
            sub = "infiniband/hw/irdma" if module == "irdma" else "net/ethernet/intel/ice"
            return f"/lib/modules/{kernel}/kernel/drivers/{sub}/{module}.ko.xz"
        if tree == "weak-updates":
            return f"/lib/modules/{kernel}/weak-updates/{module}/{module}.ko"
        return f"/lib/modules/{kernel}/updates/drivers/net/ethernet/intel/{module}/{module}.ko"

    @property
    def in_tree(self) -> bool:
        return "in-tree-ice" in self.faults

    @property
    def roce(self) -> bool:
        """The mode irdma was loaded in (not what the options file says now)."""
        return not self.in_tree and self.irdma_roce

    @property
    def ddp_package(self) -> tuple[str, str]:
        """(name, version) of the DDP package ice loaded (its dmesg line, ice_main.c). Intel's
        ice README, "Link Aggregation": "The default DDP package installed by the driver does
        not support LAG"; the comms package extracts the lport LAG needs."""
        if "ddp-default" in self.faults:
            return "ICE OS Default Package", "1.3.36.0"
        return "ICE COMMS Package", "1.3.46.0"

    @property
    def roce_lag(self) -> bool:
        """ice's ICE_F_ROCE_LAG (src/ice_lag.c ``ice_lag_init_feature_support_flag``): the
        NVM's roce_lag capability and a DDP package with lport extraction, both."""
        lport_extract = self.ddp_package[0] != "ICE OS Default Package"
        no_cap = {"nvm-no-roce-lag", "irdma-probe-pf1-failed"} & set(self.faults)
        return lport_extract and not no_cap

    @property
    def rdma_devices(self) -> list[tuple[str, Port]]:
        """(ibdev, port) pairs that exist. With RoCE LAG, Intel's ice registers one device on
        the primary port of the bond and forwards the secondary's RoCEv2 traffic to it.
        Without ICE_F_ROCE_LAG (and SR-IOV LAG), ``ice_init_lag`` returns before setting up
        any LAG handling: each PF keeps its own RDMA device, bonded or not, and RoCE the
        switch hashes onto the second port reaches a device with no such QP."""
        if "irdma" not in self.modules or self.in_tree or not self.lag_rdma_ok:
            return []  # the in-tree ice drops RDMA from bonded ports
        if "irdma-probe-pf1-failed" in self.faults:
            return [("irdma0", self.ports[0])]  # irdma's probe of the second PF failed
        if not self.roce_lag:
            return [(f"irdma{i}", port) for i, port in enumerate(self.ports)]
        return [("irdma0", self.ports[0])]

    def aux_devices(self) -> list[str]:
        """/sys/bus/auxiliary/devices: ice's per-PF RDMA auxiliary device (ice_idc.c
        ice_plug_aux_dev: "roce" or "iwarp", ice.<name>.<aux_idx>), the secondary's unplugged
        under RoCE LAG (ice_lag.c); none where the in-tree ice cleared RDMA from bonded ports."""
        if self.in_tree or not self.lag_rdma_ok:
            return []
        kind = "iwarp" if "iwarp" in self.faults else "roce"
        count = 1 if self.roce_lag else len(self.ports)
        return [f"ice.{kind}.{i}" for i in range(count)]

    @property
    def gpus_present(self) -> int:
        if self.role != "gpu":
            return 0
        return self.gpu_count - (1 if "gpu-missing" in self.faults else 0)

    def snapshot(self) -> dict[str, Any]:
        """The host's state as JSON (``GET /lab/v1/hosts`` on the lab's API server): what a
        crash test compares the end of a run with."""
        return {
            "name": self.name,
            "boot_id": self.boot_id,
            "machine_id": self.machine_id,
            "modules": sorted(self.modules),
            "ports": {
                port.name: {
                    "enslaved": port.enslaved,
                    "admin_up": port.admin_up,
                    "lldp_agent": port.lldp_agent,
                    "pfc": sorted(port.pfc),
                    "app": [list(entry) for entry in port.app],
                }
                for port in self.ports
            },
            "configfs": dict(self.configfs),
            "enabled_units": sorted(self.enabled_units),
        }


class LabHost:
    """One simulated machine: its ``state`` and the collaborators that answer for it, each
    with one subject (``system``, ``filesystem``, ``pci``, ``nic``, ``rdma``, ``network``,
    ``kmod``), and ``dispatch``, which takes a command line to them as a shell would.

    The state the lab, its tests and its tools read most (name, role, faults, ports, files,
    configfs, ...) is shown here too, as the state's own objects; the rest is ``state``'s."""

    # The collaborators with ``cmd_<program>`` handlers, in the order dispatch asks them
    # (the lab shell puts their programs on its PATH, simulator/shell.py).
    ANSWERING: tuple[type, ...] = (
        SystemInfo,
        HostFiles,
        HostPci,
        HostNic,
        HostRdma,
        HostNetwork,
        KernelModules,
    )

    def __init__(self, name: str, role: str, mgmt_ip: str, rdma_ip: str, **fields: Any) -> None:
        """A new machine: ``HostState``'s fields (os, gpu_count, faults, ...) as given."""
        self._assemble(HostState(name, role, mgmt_ip, rdma_ip, **fields))

    @classmethod
    def from_state(cls, state: HostState) -> LabHost:
        """The machine around a state kept before (a saved lab that comes back)."""
        host = cls.__new__(cls)
        host._assemble(state)
        return host

    def _assemble(self, state: HostState) -> None:
        self.state = state
        self.system = SystemInfo(state)
        self.kmod = KernelModules(state)
        self.network = HostNetwork(state)
        self.nic = HostNic(state, self.network)
        self.filesystem = HostFiles(state, self.nic, self.kmod)
        self.pci = HostPci(state)
        self.rdma = HostRdma(state)
        # (in ANSWERING's order)
        answering = (self.system, self.filesystem, self.pci, self.nic, self.rdma,
                     self.network, self.kmod)  # fmt: skip
        self.dispatch = CommandDispatch(state, answering, self.filesystem, self.pci)

    def __repr__(self) -> str:
        return f"LabHost({self.state!r})"

    # -- the host-wide state, shown ------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.state.name

    @property
    def role(self) -> str:
        return self.state.role

    @property
    def faults(self) -> set[str]:
        return self.state.faults

    @property
    def flags(self) -> dict[str, bool]:
        return self.state.flags

    @property
    def commands(self) -> list[str]:
        return self.state.commands

    @property
    def ports(self) -> list[Port]:
        return self.state.ports

    @property
    def files(self) -> dict[str, str]:
        return self.state.files

    @property
    def configfs(self) -> dict[str, str]:
        return self.state.configfs

    @property
    def rdma_devices(self) -> list[tuple[str, Port]]:
        return self.state.rdma_devices

    # -- what is done to the whole machine -------------------------------------------------------

    def execute(self, command: str, stdin: str = "") -> Result:
        """One command line, as the wizard's transport sends it (``dispatch``)."""
        return self.dispatch.execute(command, stdin)

    def reboot(self) -> None:
        """The machine reboots: what it keeps and loses (``filesystem``, then ``kmod``)."""
        self.filesystem.reboot()

    def reregister_rdma(self) -> None:
        """ice unplugs and plugs the RDMA device again (``network``)."""
        self.network.reregister_rdma()
