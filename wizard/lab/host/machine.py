"""A stateful simulated host: a RHEL 10.2 B300x8 node (or an AIStor peer) with two E810
ports in bond1, answering the commands the wizard's probes send, in the real formats.

State changes the way the real host's would: ``modprobe irdma`` changes ``lsmod``, ``dcb
... set`` changes ``dcb ... show``, writing a file changes ``cat``, ``systemctl reboot``
gives a new boot id. The output formats follow the samples in ``../shared/fixtures``.
"""

from __future__ import annotations

import json
import shlex
import uuid
from dataclasses import dataclass, field
from typing import Any

from wizard.artifacts import render
from wizard.driver_root import DRIVER_ROOT, NVIDIA_SMI_SCRIPT
from wizard.lab.dcb import DcbTool, PortDcb
from wizard.lab.kmod import KernelModulesMixin
from wizard.lab.network import NetworkMixin
from wizard.transports.base import WRITE_FILE_SCRIPT, WRITE_VALUE_SCRIPT
from wizard.transports.batch import BATCH_SCRIPT, BatchPart, encode_batch_output

RHEL_KERNEL = "6.12.0-124.8.1.el10_2.x86_64"
UBUNTU_KERNEL = "6.8.0-86-generic"
OOT_ICE_VERSION = "2.3.10"
OOT_IRDMA_VERSION = "2.0.11"
E810_FIRMWARE = "4.80 0x80020543 1.3805.0"
B300_DEVICE_ID = "3182"

OS_RELEASE = {
    "rhel-10.2": (
        'NAME="Red Hat Enterprise Linux"\nVERSION="10.2 (Coughlan)"\nID="rhel"\n'
        'ID_LIKE="centos fedora"\nVERSION_ID="10.2"\nPLATFORM_ID="platform:el10"\n'
        'PRETTY_NAME="Red Hat Enterprise Linux 10.2 (Coughlan)"\nANSI_COLOR="0;31"\n'
        'CPE_NAME="cpe:/o:redhat:enterprise_linux:10.2"\nHOME_URL="https://www.redhat.com/"\n'
    ),
    "ubuntu-24.04": (
        'PRETTY_NAME="Ubuntu 24.04.2 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\n'
        'VERSION="24.04.2 LTS (Noble Numbat)"\nVERSION_CODENAME=noble\nID=ubuntu\n'
        "ID_LIKE=debian\nUBUNTU_CODENAME=noble\n"
    ),
}

RHEL_PACKAGES = {
    "rdma-core": "rdma-core-57.0-1.el10.x86_64",
    "libibverbs-utils": "libibverbs-utils-57.0-1.el10.x86_64",
    "infiniband-diags": "infiniband-diags-57.0-1.el10.x86_64",
    "perftest": "perftest-25.04.0.0.84-1.el10.x86_64",
    "pciutils": "pciutils-3.13.0-2.el10.x86_64",
    "ethtool": "ethtool-6.11-1.el10.x86_64",
    "iproute": "iproute-6.11.0-1.el10.x86_64",
    "iperf3": "iperf3-3.17.1-4.el10.x86_64",
    "kernel-devel": "kernel-devel-6.12.0-124.8.1.el10_2.x86_64",
    "gcc": "gcc-14.2.1-7.el10.x86_64",
    "make": "make-4.4.1-9.el10.x86_64",
    "elfutils-libelf-devel": "elfutils-libelf-devel-0.192-5.el10.x86_64",
}


@dataclass
class Result:
    stdout: str = ""
    stderr: str = ""
    exit_status: int = 0


# The configfs folders where `mkdir DEVICE` makes a per-device directory, and the attribute
# the kernel then shows in it (the one the wizard reads back).
CONFIGFS_DEVICE_ATTRIBUTES = {
    "/sys/kernel/config/rdma_cm/": "ports/1/default_roce_tos",
    "/sys/kernel/config/irdma/": "roce_dcqcn_enable",
}


def _json_or_lines(entries: list[dict[str, object]], json_out: bool, line: str) -> Result:
    """Answer like iproute2's `rdma`: the entries as JSON with -j, else one line each."""
    if json_out:
        return Result(json.dumps(entries) + "\n")
    return Result("".join(line.format(**entry) + "\n" for entry in entries))


@dataclass
class Port:
    name: str
    slot: str  # PCI address
    mac: str
    up: bool = True  # the link (cable, switch)
    admin_up: bool = True
    enslaved: bool = True
    lldp_agent: bool = True
    dcb: PortDcb = field(default_factory=PortDcb)  # the driver's DCB (wizard/lab/dcb.py)
    nm_profile_active: bool = True  # its NetworkManager port profile (RHEL)
    pause_rx: dict[int, int] = field(default_factory=lambda: dict.fromkeys(range(8), 0))
    pause_tx: dict[int, int] = field(default_factory=lambda: dict.fromkeys(range(8), 0))
    drops: dict[str, int] = field(default_factory=dict)  # ethtool -S drop/error counters

    @property
    def active(self) -> bool:
        return self.up and self.admin_up

    @property
    def pfc(self) -> set[int]:
        return self.dcb.pfc

    @property
    def app(self) -> list[tuple[int, int]]:
        return self.dcb.app


@dataclass
class LabHost(NetworkMixin, KernelModulesMixin):
    """One simulated machine. ``role`` is ``gpu`` (a B300 node) or ``peer`` (AIStor)."""

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
    # What the boot units printed and returned at each boot (wizard/lab/shell.py runs them).
    boot_log: list[dict[str, Any]] = field(default_factory=list)
    # Kernel messages since boot beyond the fixed boot lines (dmesg shows both).
    kernel_log: list[str] = field(default_factory=list)
    # irdma's mode as loaded (module options are read when it loads), the options the
    # initramfs was built with (it loads irdma at boot), and whether Intel's LAG kept RDMA.
    irdma_roce: bool = False
    initramfs_irdma_options: str = ""
    lag_rdma_ok: bool = True

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
            self.kernel_log.append(
                f"ice {self.ports[0].slot}: Found netdev {self.ports[1].name} with different DCB config"
            )
            self.lag_rdma_ok = False
        if self.os.startswith("ubuntu"):
            self.packages = set()

    # -- derived state ---------------------------------------------------------------------

    @property
    def kernel(self) -> str:
        return UBUNTU_KERNEL if self.os.startswith("ubuntu") else RHEL_KERNEL

    @property
    def in_tree(self) -> bool:
        return "in-tree-ice" in self.faults

    @property
    def roce(self) -> bool:
        """The mode irdma was loaded in (not what the options file says now)."""
        return not self.in_tree and self.irdma_roce

    @property
    def rdma_devices(self) -> list[tuple[str, Port]]:
        """(ibdev, port) pairs that exist: Intel's LAG registers one device on the primary."""
        if "irdma" not in self.modules or self.in_tree or not self.lag_rdma_ok:
            return []  # the in-tree ice drops RDMA from bonded ports
        return [("irdma0", self.ports[0])]

    @property
    def gpus_present(self) -> int:
        if self.role != "gpu":
            return 0
        return self.gpu_count - (1 if "gpu-missing" in self.faults else 0)

    # -- execution ----------------------------------------------------------------------------

    def execute(self, command: str, stdin: str = "") -> Result:
        """Run one command line (no pipes: the wizard filters output itself)."""
        self.commands.append(command)
        self._stdin = stdin
        try:
            argv = shlex.split(command)
        except ValueError as exc:
            return Result(stderr=f"sh: syntax error: {exc}\n", exit_status=2)
        while argv and argv[0] in ("sudo", "-n", "--"):
            argv = argv[1:]
        if argv[:3] == ["sh", "-c", WRITE_FILE_SCRIPT] and len(argv) == 6:
            # What a shell does with the transport's file-writing script.
            self.write_file(argv[5], stdin)
            return Result()
        if argv[:3] == ["sh", "-c", WRITE_VALUE_SCRIPT] and len(argv) == 6:
            return self.write_value(argv[5], argv[4])
        if argv[:4] == ["sh", "-c", BATCH_SCRIPT, "sh"]:
            return self._batch(argv[4:])
        if argv[:4] == ["sh", "-c", NVIDIA_SMI_SCRIPT, "sh"] and len(argv) >= 5:
            # What the script does: chroot into the driver container's root when it holds
            # nvidia-smi, else the host's PATH (wizard/driver_root.py).
            if argv[4] == DRIVER_ROOT and self.gpu_driver and self.role == "gpu":
                return self.nvidia_smi(argv[5:])
            return self.execute(shlex.join(["nvidia-smi", *argv[5:]]))
        if argv[:2] == ["sh", "-c"] and len(argv) >= 3:
            return self.execute(argv[2], stdin)
        if not argv:
            return Result()
        handler = getattr(self, "cmd_" + argv[0].replace("-", "_").replace(".", "_"), None)
        if handler is None:
            return Result(stderr=f"bash: line 1: {argv[0]}: command not found\n", exit_status=127)
        return handler(argv[1:])

    def _batch(self, commands: list[str]) -> Result:
        """What a shell does with the transport's batch script: each command in turn, its
        status and output framed by byte counts (wizard/transports/batch.py)."""
        parts = []
        for index, command in enumerate(commands):
            result = self.execute(command)
            parts.append(
                BatchPart(index, result.exit_status, result.stdout.encode(), result.stderr.encode())
            )
        return Result(stdout=encode_batch_output(parts).decode())

    # -- simple facts -----------------------------------------------------------------------------

    def cmd_cat(self, args: list[str]) -> Result:
        out = []
        for path in args:
            content = self._read(path)
            if content is None:
                return Result("".join(out), f"cat: {path}: No such file or directory\n", 1)
            out.append(content)
        return Result("".join(out))

    def _read(self, path: str) -> str | None:
        if path == "/etc/os-release":
            return OS_RELEASE[self.os]
        if path == "/etc/machine-id":
            return self.machine_id + "\n"
        if path == "/proc/sys/kernel/random/boot_id":
            return self.boot_id + "\n"
        if path == "/proc/cmdline":
            iommu = "" if "iommu-translated" in self.faults else " intel_iommu=on iommu=pt"
            return f"BOOT_IMAGE=(hd0,gpt2)/vmlinuz-{self.kernel} root=/dev/mapper/rhel-root ro{iommu}\n"
        if path == "/proc/driver/nvidia/version" and self.gpu_driver:
            return (
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  595.91.07  Release Build  "
                "(dvs-builder@U22-I3-AE18-23-3)  Mon Sep 29 2026\nGCC version:  gcc version 11.5.0\n"
            )
        if path == f"/proc/net/bonding/{self.bond_name}":
            return self._bonding()
        if path.startswith("/sys/kernel/config/"):
            return self.configfs.get(path)
        return self.files.get(path)

    def cmd_uname(self, args: list[str]) -> Result:
        if args == ["-r"]:
            return Result(self.kernel + "\n")
        if args == ["-m"]:
            return Result("x86_64\n")
        return Result("Linux\n")

    def cmd_hostname(self, args: list[str]) -> Result:
        return Result(self.name + "\n")

    def cmd_containerd(self, args: list[str]) -> Result:
        if "containerd-1.7" in self.faults:
            return Result(
                "containerd github.com/containerd/containerd v1.7.27 "
                "05044ec0a9a75232cad458027ca83437aae3f4da\n"
            )
        return Result(
            "containerd github.com/containerd/containerd/v2 v2.1.4 "
            "75cb2b7193e4e490e9fbdc236c0e811ccaba3376\n"
        )

    def cmd_echo(self, args: list[str]) -> Result:
        text = " ".join(args)
        if "$SSH_CONNECTION" in text:
            server = self.rdma_ip if "ssh-over-bond1" in self.faults else self.mgmt_ip
            text = text.replace("$SSH_CONNECTION", f"10.10.255.1 51514 {server} 22")
        return Result(text + "\n")

    def cmd_grep(self, args: list[str]) -> Result:
        """``grep -H . FILE...`` over the RDMA device's hw_counters (each file's value with
        its name, as grep prints it); anything else is not simulated."""
        if args[:2] != ["-H", "."]:
            return Result(stderr="lab: only grep -H . FILE... is simulated\n", exit_status=2)
        out, errors = [], []
        devices = {name for name, _ in self.rdma_devices}
        for path in args[2:]:
            parts = path.split("/")
            if (len(parts) == 9 and parts[:4] == ["", "sys", "class", "infiniband"]
                    and parts[4] in devices and parts[7] == "hw_counters"):  # fmt: skip
                out.append(f"{path}:{self.hw_counters.get(parts[8], 0)}\n")
            else:
                errors.append(f"grep: {path}: No such file or directory\n")
        # GNU grep exits 2 when a file could not be read, even if others matched.
        return Result("".join(out), "".join(errors), 2 if errors else 0 if out else 1)

    def ecn_enabled(self) -> bool:
        """DCQCN on for the host's RDMA device (irdma configfs roce_dcqcn_enable = 1)."""
        return any(k.endswith("roce_dcqcn_enable") and v.strip() == "1"
                   for k, v in self.configfs.items())  # fmt: skip

    def cmd_ulimit(self, args: list[str]) -> Result:
        return Result("unlimited\n")

    def cmd_rpm(self, args: list[str]) -> Result:
        names = [a for a in args if not a.startswith("-")]
        out, status = [], 0
        for name in names:
            if name in self.packages:
                out.append(RHEL_PACKAGES.get(name, f"{name}-1.0-1.el10.x86_64"))
            else:
                out.append(f"package {name} is not installed")
                status = 1
        return Result("\n".join(out) + "\n", "", status)

    def cmd_dnf(self, args: list[str]) -> Result:
        names = [a for a in args if not a.startswith("-") and a != "install"]
        self.packages.update(names)
        return Result("Complete!\n")

    # -- PCI -------------------------------------------------------------------------------------

    def _pci_lines(self) -> list[str]:
        lines = ["00:00.0 Host bridge [0600]: Intel Corporation Device [8086:09a2] (rev 20)"]
        lines.append(
            "17:01.0 PCI bridge [0604]: Broadcom / LSI PEX890xx PCIe Gen 5 Switch [1000:c030] (rev b0)"
        )
        for i in range(self.gpus_present):
            bus = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"][i % 8]
            lines.append(
                f"{bus}:00.0 3D controller [0302]: NVIDIA Corporation Device [10de:{B300_DEVICE_ID}]"
                " (rev a1)"
            )
        for port in self.ports:
            slot = port.slot.removeprefix("0000:")
            lines.append(
                f"{slot} Ethernet controller [0200]: Intel Corporation Ethernet Controller "
                "E810-C for QSFP [8086:1592] (rev 02)"
            )
        lines.append(
            "c3:00.0 Ethernet controller [0200]: Intel Corporation Ethernet Controller X710 "
            "for 10GbE SFP+ [8086:1572] (rev 02)"
        )
        return sorted(lines)

    def cmd_lspci(self, args: list[str]) -> Result:
        if "-vvv" in args:
            return Result(self._lspci_verbose())
        if "-tv" in args:
            return Result(self._lspci_tree())
        return Result("\n".join(self._pci_lines()) + "\n")

    def _lspci_tree(self) -> str:
        """``lspci -tv``: the devices under the root bus, each behind its bridge (pciutils'
        tree form: ``-[domain:bus]-+-dev.fn-[secondary]--dev.fn  name``)."""
        lines = ["-[0000:00]-+-00.0  Intel Corporation Device 09a2"]
        for line in self._pci_lines():
            slot, _, rest = line.partition(" ")
            if slot.startswith("00:") or "PCI bridge" in rest:
                continue
            name = rest.split(": ", 1)[-1].split(" [")[0]
            bus, _, devfn = slot.partition(":")
            lines.append(f"           +-01.0-[{bus}]----{devfn}  {name}")
        return "\n".join(lines) + "\n"

    def _lspci_verbose(self) -> str:
        acs = "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-"
        off = "SrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-"
        blocks = []
        for line in self._pci_lines():
            slot, _, rest = line.partition(" ")
            name = rest.split(" [", 1)[0] + ":" + rest.split("]:", 1)[-1].split(" [")[0]
            block = [f"{slot} {name}", "\tControl: I/O- Mem+ BusMaster+ SpecCycle- MemWINV-"]
            if "PCI bridge" in line:
                block += [
                    "\tCapabilities: [220 v1] Access Control Services",
                    f"\t\tACSCap:\t{off.replace('-', '+')}",
                    f"\t\tACSCtl:\t{acs if 'acs-enabled' in self.faults else off}",
                ]
            blocks.append("\n".join(block))
        return "\n\n".join(blocks) + "\n"

    def cmd_dmesg(self, args: list[str]) -> Result:
        domain = (
            "Translated"
            if "iommu-translated" in self.faults
            else "Passthrough (set via kernel command line)"
        )
        return Result(
            "[    0.000000] Linux version "
            + self.kernel
            + " (mockbuild@lab) #1 SMP PREEMPT_DYNAMIC\n"
            "[    0.037393] DMAR: IOMMU enabled\n"
            f"[    1.214580] iommu: Default domain type: {domain}\n"
            + (
                "[    4.551230] ice 0000:3b:00.0: The DDP package could not be loaded. Entering Safe Mode\n"
                if "ddp-safe-mode" in self.faults
                else "[    4.551230] ice 0000:3b:00.0: The DDP package was successfully loaded: ICE OS "
                "Default Package version 1.3.36.0\n"
            )
            + "[    9.118804] bond1: (slave ens5f0np0): Enslaving as a backup interface with an up link\n"
            + "".join(f"[{30.0 + i:12.6f}] {line}\n" for i, line in enumerate(self.kernel_log))
        )

    # -- NIC --------------------------------------------------------------------------------------

    def _port(self, name: str) -> Port | None:
        return next((p for p in self.ports if p.name == name), None)

    def cmd_ethtool(self, args: list[str]) -> Result:
        if len(args) < 2 or args[0] not in ("-i", "-S", "--show-priv-flags", "--set-priv-flags"):
            return Result(stderr="ethtool: bad command line argument(s)\n", exit_status=1)
        port = self._port(args[1])
        if port is None:
            return Result(stderr="Cannot get driver information: No such device\n", exit_status=71)
        if args[0] == "-i":
            version = self.kernel if self.in_tree else OOT_ICE_VERSION
            return Result(
                f"driver: ice\nversion: {version}\nfirmware-version: {E810_FIRMWARE}\n"
                f"expansion-rom-version: \nbus-info: {port.slot}\nsupports-statistics: yes\n"
                "supports-test: yes\nsupports-eeprom-access: yes\nsupports-register-dump: yes\n"
                "supports-priv-flags: yes\n"
            )
        if args[0] == "-S":
            lines = ["NIC statistics:", "     rx_unicast: 183274", "     tx_unicast: 99120"]
            # ice's port-level drop and error counters (ethtool-s fixture 01.txt names).
            lines += [f"     {name}: {port.drops.get(name, 0)}"
                      for name in ("rx_dropped.nic", "rx_crc_errors.nic", "rx_length_errors.nic")]  # fmt: skip
            for direction, counts in (("tx", port.pause_tx), ("rx", port.pause_rx)):
                for prio in range(8):
                    lines.append(f"     {direction}_priority_{prio}_xon.nic: 0")
                    lines.append(f"     {direction}_priority_{prio}_xoff.nic: {counts[prio]}")
            return Result("\n".join(lines) + "\n")
        if args[0] == "--show-priv-flags":
            return Result(
                f"Private flags for {port.name}:\n"
                "link-down-on-close     : off\n"
                f"fw-lldp-agent          : {'on' if port.lldp_agent else 'off'}\n"
                "channel-inline-flow-director: off\n"
                "channel-pkt-inspect-optimize: on\n"
                "mdd-auto-reset-vf      : off\n"
                "vf-vlan-pruning        : off\n"
                "vf-true-promisc-support: off\n"
            )
        if args[2:] == ["fw-lldp-agent", "off"]:
            port.lldp_agent = False
        elif args[2:] == ["fw-lldp-agent", "on"]:
            port.lldp_agent = True
        return Result()

    def _bond_details(self) -> str:
        """``ip -d link show bond1`` as iproute2 prints a bond (ip/iplink_bond.c)."""
        mac = self.ports[0].mac if self.ports else "00:00:00:00:00:00"
        return (
            f"6: {self.bond_name}: <BROADCAST,MULTICAST,MASTER,UP,LOWER_UP> mtu 9000 qdisc noqueue "
            "state UP mode DEFAULT group default qlen 1000\n"
            f"    link/ether {mac} brd ff:ff:ff:ff:ff:ff promiscuity 0 allmulti 0 minmtu 68 "
            "maxmtu 65535 \n"
            "    bond mode 802.3ad miimon 100 updelay 0 downdelay 0 peer_notify_delay 0 "
            "use_carrier 1 arp_interval 0 arp_missed_max 2 arp_validate none arp_all_targets any "
            "primary_reselect always fail_over_mac none xmit_hash_policy layer3+4 resend_igmp 1 "
            "num_grat_arp 1 all_slaves_active 0 min_links 0 lp_interval 1 packets_per_slave 1 "
            "lacp_active on lacp_rate fast ad_select stable ad_aggregator 1 ad_num_ports "
            f"{sum(p.active and p.enslaved for p in self.ports)} ad_actor_key 15 ad_partner_key "
            "32783 ad_partner_mac 3c:fd:fe:9e:11:00 ad_actor_sys_prio 65535 ad_user_port_key 0 "
            "ad_actor_system 00:00:00:00:00:00 tlb_dynamic_lb 1 addrgenmode eui64 numtxqueues 16 "
            "numrxqueues 16 gso_max_size 65536 gso_max_segs 65535\n"
        )

    def _bonding(self) -> str:
        header = (
            f"Ethernet Channel Bonding Driver: v{self.kernel}\n\n"
            "Bonding Mode: IEEE 802.3ad Dynamic link aggregation\n"
            "Transmit Hash Policy: layer3+4 (1)\nMII Status: up\nMII Polling Interval (ms): 100\n"
            "Up Delay (ms): 0\nDown Delay (ms): 0\nPeer Notification Delay (ms): 0\n\n"
            "802.3ad info\nLACP active: on\nLACP rate: fast\nMin links: 0\n"
            "Aggregator selection policy (ad_select): stable\nSystem priority: 65535\n"
            f"System MAC address: {self.ports[0].mac}\nActive Aggregator Info:\n"
            "\tAggregator ID: 1\n"
            f"\tNumber of ports: {sum(p.active and p.enslaved for p in self.ports)}\n"
            "\tActor Key: 15\n\tPartner Key: 32783\n\tPartner Mac Address: 3c:fd:fe:9e:11:00\n"
        )
        slaves = []
        for i, port in enumerate(p for p in self.ports if p.enslaved):
            aggregator = 1 if port.active else 2
            slaves.append(
                f"\nSlave Interface: {port.name}\n"
                f"MII Status: {'up' if port.active else 'down'}\n"
                f"Speed: {'100000 Mbps' if port.active else 'Unknown'}\n"
                f"Duplex: {'full' if port.active else 'Unknown'}\n"
                f"Link Failure Count: {0 if port.up else 3}\n"
                f"Permanent HW addr: {port.mac}\nSlave queue ID: 0\n"
                f"Aggregator ID: {aggregator}\n"
                "Actor Churn State: none\nPartner Churn State: none\n"
                "Actor Churned Count: 0\nPartner Churned Count: 0\n"
                "details actor lacp pdu:\n    system priority: 65535\n"
                f"    system mac address: {self.ports[0].mac}\n    port key: 15\n"
                f"    port priority: 255\n    port number: {i + 1}\n    port state: 63\n"
            )
        return header + "".join(slaves)

    def cmd_ip(self, args: list[str]) -> Result:
        if "addr" in args or "address" in args or "a" in args:
            entries = [
                {"ifindex": 1, "ifname": "lo", "flags": ["LOOPBACK", "UP"], "operstate": "UNKNOWN",
                 "addr_info": [{"family": "inet", "local": "127.0.0.1", "prefixlen": 8}]},
                {"ifindex": 2, "ifname": "ens1f0", "master": "bond0", "operstate": "UP", "addr_info": []},
                {"ifindex": 3, "ifname": "bond0", "operstate": "UP",
                 "addr_info": [{"family": "inet", "local": self.mgmt_ip, "prefixlen": 24}]},
            ]  # fmt: skip
            for i, port in enumerate(self.ports):
                entries.append(
                    {
                        "ifindex": 4 + i,
                        "ifname": port.name,
                        **({"master": self.bond_name} if port.enslaved else {}),
                        "operstate": "UP" if port.active else "DOWN",
                        "address": port.mac,
                        "addr_info": [],
                    }
                )
            entries.append(
                {
                    "ifindex": 6,
                    "ifname": self.bond_name,
                    "operstate": "UP",
                    "addr_info": [{"family": "inet", "local": self.rdma_ip, "prefixlen": 24}],
                }
            )
            return Result(json.dumps(entries) + "\n")
        if args[:3] == ["-d", "link", "show"] and len(args) == 4 and args[3] == self.bond_name:
            return Result(self._bond_details())
        if "link" in args and "set" in args:
            rest = [a for a in args if a not in ("link", "set", "dev")]
            port = self._port(rest[0]) if rest else None
            if port is None:
                return Result(
                    stderr=f'Cannot find device "{rest[0] if rest else ""}"\n', exit_status=1
                )
            words = rest[1:]
            if "nomaster" in words:
                self.link_master(port, False)
            elif "master" in words:
                self.link_master(port, True)
            if "down" in words:
                port.admin_up = False
            if "up" in words:
                port.admin_up = True
            return Result()
        return Result(
            stderr='Object "' + " ".join(args) + '" is unknown, try "ip help".\n', exit_status=1
        )

    # -- modules and RDMA ------------------------------------------------------------------------

    def cmd_lsmod(self, args: list[str]) -> Result:
        sizes = {"ice": 1421312, "irdma": 577536, "ib_uverbs": 221184, "ib_core": 569344,
                 "rdma_cm": 155648, "iw_cm": 69632, "ib_cm": 159744, "bonding": 294912,
                 "nvme": 65536}  # fmt: skip
        users = {
            "ib_core": ["irdma", "rdma_cm", "iw_cm", "ib_cm", "ib_uverbs"],
            "ice": ["irdma"],
            "ib_uverbs": ["irdma"],
            "iw_cm": ["rdma_cm"],
            "ib_cm": ["rdma_cm"],
        }
        lines = ["Module                  Size  Used by"]
        for name in sorted(self.modules):
            used = [u for u in users.get(name, []) if u in self.modules]
            lines.append(
                f"{name:<24}{sizes.get(name, 40960):>7}  {len(used)} {','.join(used)}".rstrip()
            )
        return Result("\n".join(lines) + "\n")

    def cmd_modinfo(self, args: list[str]) -> Result:
        if not args:
            return Result(stderr="modinfo: ERROR: missing module or filename.\n", exit_status=1)
        name = args[-1]
        if name not in ("ice", "irdma"):
            return Result(stderr=f"modinfo: ERROR: Module {name} not found.\n", exit_status=1)
        if self.in_tree:
            path = (
                f"/lib/modules/{self.kernel}/kernel/drivers/net/ethernet/intel/{name}/{name}.ko.xz"
            )
            if name == "irdma":
                path = f"/lib/modules/{self.kernel}/kernel/drivers/infiniband/hw/irdma/irdma.ko.xz"
            version = ""
        else:
            path = f"/lib/modules/{self.kernel}/updates/drivers/net/ethernet/intel/{name}/{name}.ko"
            version = OOT_ICE_VERSION if name == "ice" else OOT_IRDMA_VERSION
        lines = [f"filename:       {path}"]
        if version:
            lines.append(f"version:        {version}")
        lines += [
            "license:        GPL v2" if name == "ice" else "license:        Dual BSD/GPL",
            f"description:    Intel(R) Ethernet {'Connection E800 Series Linux Driver' if name == 'ice' else 'Protocol Driver for RDMA'}",
            "srcversion:     1F3C0D1B2A0E6B4C5D6E7F8",
            f"depends:        {'gnss' if name == 'ice' else 'ice,ib_uverbs,ib_core'}",
            "retpoline:      Y",
            f"name:           {name}",
            f"vermagic:       {self.kernel} SMP preempt mod_unload modversions ",
        ]
        if name == "irdma":
            lines.append(
                "parm:           roce_ena:RoCE enable: 1=enable RoCEv2 on all ports (default=0 - iWARP) (int)"
            )
        return Result("\n".join(lines) + "\n")

    def cmd_rdma(self, args: list[str]) -> Result:
        json_out = "-j" in args
        args = [a for a in args if a not in ("-j", "-d", "-p")]
        if not args or args[0] not in ("link", "dev"):
            return Result(stderr='Object "' + " ".join(args) + '" is unknown\n', exit_status=1)
        devices = self.rdma_devices
        if args[0] == "link":
            entries = [
                {"ifindex": i, "ifname": dev, "port": 1,
                 "state": "ACTIVE" if port.active else "DOWN",
                 "physical_state": "LINK_UP" if port.active else "DISABLED",
                 "netdev": port.name, "netdev_index": 4 + i}
                for i, (dev, port) in enumerate(devices)
            ]  # fmt: skip
            return _json_or_lines(
                entries,
                json_out,
                "link {ifname}/1 state {state} physical_state {physical_state} netdev {netdev}",
            )
        entries = [
            {"ifindex": i, "ifname": dev, "node_type": "ca", "fw": "1.72",
             "node_guid": "b683:51ff:fe02:7a30", "sys_image_guid": "b683:51ff:fe02:7a30"}
            for i, (dev, _) in enumerate(devices)
        ]  # fmt: skip
        return _json_or_lines(
            entries,
            json_out,
            "{ifindex}: {ifname}: node_type ca fw 1.72 node_guid {node_guid} "
            "sys_image_guid {sys_image_guid}",
        )

    def cmd_ibv_devices(self, args: list[str]) -> Result:
        lines = ["    device                 node GUID", "    ------              ----------------"]
        lines += [f"    {dev:<20}b68351fffe027a30" for dev, _ in self.rdma_devices]
        return Result("\n".join(lines) + "\n")

    def cmd_ibv_devinfo(self, args: list[str]) -> Result:
        devices = self.rdma_devices
        if not devices:
            return Result("No IB devices found\n", "", 255)
        blocks = []
        for dev, port in devices:
            transport = "InfiniBand (0)" if self.roce else "iWARP (1)"
            block = [
                f"hca_id:\t{dev}",
                f"\ttransport:\t\t\t{transport}",
                "\tfw_ver:\t\t\t\t1.72",
                "\tnode_guid:\t\t\tb683:51ff:fe02:7a30",
                "\tsys_image_guid:\t\t\tb683:51ff:fe02:7a30",
                "\tvendor_id:\t\t\t0x8086",
                "\tvendor_part_id:\t\t\t5522",
                "\thw_ver:\t\t\t\t0x2",
                "\tphys_port_cnt:\t\t\t1",
                "\t\tport:\t1",
                f"\t\t\tstate:\t\t\t{'PORT_ACTIVE (4)' if port.active else 'PORT_DOWN (1)'}",
                "\t\t\tmax_mtu:\t\t4096 (5)",
                "\t\t\tactive_mtu:\t\t4096 (5)",
                "\t\t\tsm_lid:\t\t\t0",
                "\t\t\tport_lid:\t\t1",
                "\t\t\tport_lmc:\t\t0x00",
                "\t\t\tlink_layer:\t\tEthernet",
            ]
            if "-v" in args:
                rdma = ":".join(f"{int(x):02x}" for x in self.rdma_ip.split("."))
                a, b = rdma.split(":")[0:2], rdma.split(":")[2:4]
                ipv4_gid = f"0000:0000:0000:0000:0000:ffff:{a[0]}{a[1]}:{b[0]}{b[1]}"
                kind = "RoCE v2" if self.roce else "IB"
                block += [
                    f"\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:b683:51ff:fe02:7a30, {kind}",
                    f"\t\t\tGID[  1]:\t\t{ipv4_gid}, {kind}",
                ]
            blocks.append("\n".join(block))
        return Result("\n\n".join(blocks) + "\n")

    # -- DCB -------------------------------------------------------------------------------------

    def cmd_dcb(self, args: list[str]) -> Result:
        words = [a for a in args if a not in ("-j", "-N", "-p", "-s")]
        if (
            len(words) < 4
            or words[1] not in ("show", "set", "add", "del", "replace")
            or words[2] != "dev"
        ):
            return Result(
                stderr="Usage: dcb [ OPTIONS ] OBJECT { COMMAND | help }\n", exit_status=1
            )
        port = self._port(words[3])
        if port is None:
            return Result(stderr=f'Cannot find device "{words[3]}"\n', exit_status=1)
        if (
            words[:2] == ["pfc", "set"]
            and "pfc-not-applied" in self.faults
            and port is self.ports[-1]
        ):
            return Result()  # a firmware that acknowledges and ignores (readback differs)
        answer = DcbTool(self.kernel_log).run(
            args, port.dcb, port=port.name, lldp_agent=port.lldp_agent, bonded=port.enslaved
        )
        return Result(answer.stdout, answer.stderr, answer.exit_status)

    # -- GPUs ------------------------------------------------------------------------------------

    def cmd_nvidia_smi(self, args: list[str]) -> Result:
        """nvidia-smi on the host's own PATH: the GPU Operator's driver container keeps it in
        its root (/run/nvidia/driver, chart values ``hostPaths.driverInstallDir``), so a lab
        node, like a real one under the operator, has none on the host."""
        return Result(stderr="bash: line 1: nvidia-smi: command not found\n", exit_status=127)

    def nvidia_smi(self, args: list[str]) -> Result:
        """nvidia-smi where the driver is: in the driver container (its root on the host, or
        a pod with the GPUs the container toolkit injects it into)."""
        if not self.gpu_driver or self.role != "gpu":
            return Result(stderr="bash: line 1: nvidia-smi: command not found\n", exit_status=127)
        if args == ["topo", "-m"]:
            from wizard.lab.perf import topo_output

            return Result(topo_output(self.gpus_present))
        if args == ["-L"]:
            return Result(
                "".join(
                    f"GPU {i}: NVIDIA B300 SXM6 AC (UUID: GPU-{uuid.UUID(int=i + 1)})\n"
                    for i in range(self.gpus_present)
                )
            )
        return Result(stderr="lab: only nvidia-smi -L is simulated\n", exit_status=2)

    # -- files and services ---------------------------------------------------------------------------

    def cmd_install(self, args: list[str]) -> Result:
        return Result(stderr="install: use the wizard's file writer\n", exit_status=1)

    def write_file(self, path: str, content: str) -> None:
        if path.startswith("/sys/kernel/config/"):
            self.configfs[path] = content
        else:
            self.files[path] = content

    def write_value(self, path: str, value: str) -> Result:
        if path.startswith("/sys/kernel/config/rdma_cm/"):
            device = path.split("/")[5]
            if not any(dev == device for dev, _ in self.rdma_devices):
                return Result(stderr=f"sh: {path}: No such file or directory\n", exit_status=1)
            if f"/sys/kernel/config/rdma_cm/{device}/" not in self.configfs:
                return Result(stderr=f"sh: {path}: No such file or directory\n", exit_status=1)
        if path.startswith("/sys/kernel/config/irdma/"):
            directory = path.rsplit("/", 1)[0] + "/"
            if directory not in self.configfs:
                return Result(stderr=f"sh: {path}: No such file or directory\n", exit_status=1)
        self.configfs[path] = value + "\n"
        return Result()

    def cmd_mkdir(self, args: list[str]) -> Result:
        for path in (a for a in args if not a.startswith("-")):
            directory = path.rstrip("/")
            parent, _, device = directory.rpartition("/")
            attribute = CONFIGFS_DEVICE_ATTRIBUTES.get(parent + "/")
            if attribute is None:
                continue
            if not any(dev == device for dev, _ in self.rdma_devices):
                return Result(
                    stderr=f"mkdir: cannot create directory '{path}': No such device\n",
                    exit_status=1,
                )
            self.configfs[directory + "/"] = ""
            self.configfs.setdefault(f"{directory}/{attribute}", "0\n")
        return Result()

    def cmd_rmdir(self, args: list[str]) -> Result:
        """rmdir of a configfs group (irdma's per-device folder): its attributes go with it."""
        for path in (a for a in args if not a.startswith("-")):
            prefix = path.rstrip("/") + "/"
            if prefix not in self.configfs:
                return Result(
                    stderr=f"rmdir: failed to remove '{path}': No such file or directory\n",
                    exit_status=1,
                )
            for key in [k for k in self.configfs if k.startswith(prefix)]:
                del self.configfs[key]
        return Result()

    def cmd_warp(self, args: list[str]) -> Result:
        rdma = "--rdma" in args
        speed = 38.4 if rdma else 21.7
        return Result(f"warp: Benchmark data written to warp-get.csv.zst\nOperation: GET\n"
                      f"* Average: {speed} GiB/s, {speed * 1024 / 16:.2f} obj/s\n")  # fmt: skip

    def cmd_vllm(self, args: list[str]) -> Result:
        return Result("============ Serving Benchmark Result ============\nSuccessful requests:  64\n"
                      "Output token throughput (tok/s):          18422.51\nMean TTFT (ms):   81.4\n")  # fmt: skip

    def cmd_true(self, args: list[str]) -> Result:
        return Result()

    def cmd_systemctl(self, args: list[str]) -> Result:
        if args[:1] == ["reboot"]:
            self.reboot()
            return Result()
        if args[:1] == ["enable"]:
            for unit in args[1:]:
                if unit.startswith("-"):
                    continue
                if f"/etc/systemd/system/{unit}" not in self.files:
                    return Result(
                        stderr=f"Failed to enable unit: Unit file {unit} does not exist.\n",
                        exit_status=1,
                    )
                self.enabled_units.add(unit)
            return Result()
        if args[:1] == ["is-enabled"]:
            # systemctl(1): one line per unit; exit 0 when at least one is enabled.
            units = [u for u in args[1:] if not u.startswith("-")]
            states = ["enabled" if u in self.enabled_units else "disabled" for u in units]
            return Result("".join(f"{s}\n" for s in states), "", 0 if "enabled" in states else 1)
        return Result()

    def reboot(self) -> None:
        """What a reboot changes: a new boot id; dcb and configfs state are lost."""
        self.boot_id = str(uuid.uuid4())
        for port in self.ports:
            port.dcb.reset()  # software DCB lives in the driver: gone at boot
        self.configfs.clear()
        for port in self.ports:
            # The ethtool private flag persists (firmware); the bond forms only once the
            # network is up, after the early boot units (LabShell.boot, then form_bond).
            port.enslaved, port.admin_up, port.nm_profile_active = False, True, True
        self.lag_rdma_ok = True
        self.boot_modules()
        # The enabled boot units run next, in a real shell (LabShell.boot, awaited by the
        # SSH server as the host comes back).

    def cmd_tee(self, args: list[str]) -> Result:
        """tee(1) into the host model: a configfs/sysfs attribute takes the value, any
        other path the content (``-a`` appends)."""
        append = "-a" in args
        for path in (a for a in args if not a.startswith("-")):
            if path.startswith(("/sys/", "/proc/sys/")):
                written = self.write_value(path, self._stdin.rstrip("\n"))
                if written.exit_status != 0:
                    return Result(stderr=written.stderr.replace("sh:", "tee:"), exit_status=1)
            else:
                self.write_file(path, (self.files.get(path, "") if append else "") + self._stdin)
        return Result(self._stdin)

    def cmd_sleep(self, args: list[str]) -> Result:
        return Result()  # simulated time: a wait loop in a script does not wait here

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
