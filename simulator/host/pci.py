"""A lab host's PCI devices, IOMMU and GPUs: ``lspci`` (plain, ``-tv``, ``-vvv`` with
ACS), ``dmesg`` (IOMMU, the ice DDP package, the bond) and nvidia-smi, which is only in the
GPU Operator's driver container."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from simulator.host.model import B300_DEVICE_ID, Result

if TYPE_CHECKING:
    from simulator.host.machine import HostState


class HostPci:
    """The PCI tree, the kernel log about it, and the GPUs on it, from the host's state."""

    def __init__(self, state: HostState) -> None:
        self.state = state

    def _pci_lines(self) -> list[str]:
        lines = ["00:00.0 Host bridge [0600]: Intel Corporation Device [8086:09a2] (rev 20)"]
        lines.append(
            "17:01.0 PCI bridge [0604]: Broadcom / LSI PEX890xx PCIe Gen 5 Switch [1000:c030] (rev b0)"
        )
        for i in range(self.state.gpus_present):
            bus = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"][i % 8]
            lines.append(
                f"{bus}:00.0 3D controller [0302]: NVIDIA Corporation Device [10de:{B300_DEVICE_ID}]"
                " (rev a1)"
            )
        for port in self.state.ports:
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
                    f"\t\tACSCtl:\t{acs if 'acs-enabled' in self.state.faults else off}",
                ]
            blocks.append("\n".join(block))
        return "\n\n".join(blocks) + "\n"

    def cmd_dmesg(self, args: list[str]) -> Result:
        domain = (
            "Translated"
            if "iommu-translated" in self.state.faults
            else "Passthrough (set via kernel command line)"
        )
        if "dmesg-rotated" in self.state.faults:
            # A long uptime: the ring buffer (CONFIG_LOG_BUF_SHIFT) kept only recent lines.
            return Result(
                "".join(
                    f"[{860000.0 + i:12.6f}] {line}\n"
                    for i, line in enumerate(self.state.kernel_log)
                )
            )
        return Result(
            "[    0.000000] Linux version "
            + self.state.kernel
            + " (mockbuild@lab) #1 SMP PREEMPT_DYNAMIC\n"
            "[    0.037393] DMAR: IOMMU enabled\n"
            f"[    1.214580] iommu: Default domain type: {domain}\n"
            + (
                "[    4.551230] ice 0000:3b:00.0: The DDP package could not be loaded. Entering Safe Mode\n"
                if "ddp-safe-mode" in self.state.faults
                else "[    4.551230] ice 0000:3b:00.0: The DDP package was successfully loaded: "
                f"{self.state.ddp_package[0]} version {self.state.ddp_package[1]}\n"
            )
            + "[    9.118804] bond1: (slave ens5f0np0): Enslaving as a backup interface with an up link\n"
            + "".join(
                f"[{30.0 + i:12.6f}] {line}\n" for i, line in enumerate(self.state.kernel_log)
            )
        )

    def cmd_devlink(self, args: list[str]) -> Result:
        """``devlink dev info``: per E810 PF, the running versions ice reports
        (ice_devlink.c ice_info_get_dsn / ice_info_ddp_pkg_name / ice_info_ddp_pkg_version;
        in Safe Mode no package is active, so no fw.app.name)."""
        if args[:2] != ["dev", "info"]:
            return Result(stderr=f'Object "{args[0] if args else ""}" not found\n', exit_status=1)
        name, version = self.state.ddp_package
        out = []
        for slot in ("0000:3b:00.0", "0000:3b:00.1"):
            out += [f"pci/{slot}:", "  driver ice", "  serial_number 00-01-02-ff-ff-03-04-05",
                    "  versions:", "      fixed:", "        board.id K91258-000",
                    "      running:", "        fw.mgmt 7.4.13", "        fw.undi 1.3534.0"]  # fmt: skip
            if "ddp-safe-mode" not in self.state.faults:
                out += [f"        fw.app.name {name}", f"        fw.app {version}"]
        return Result("\n".join(out) + "\n")

    def cmd_nvidia_smi(self, args: list[str]) -> Result:
        """nvidia-smi on the host's own PATH: the GPU Operator's driver container keeps it in
        its root (/run/nvidia/driver, chart values ``hostPaths.driverInstallDir``), so a lab
        node, like a real one under the operator, has none on the host."""
        return Result(stderr="bash: line 1: nvidia-smi: command not found\n", exit_status=127)

    def nvidia_smi(self, args: list[str]) -> Result:
        """nvidia-smi where the driver is: in the driver container (its root on the host, or
        a pod with the GPUs the container toolkit injects it into)."""
        if not self.state.gpu_driver or self.state.role != "gpu":
            return Result(stderr="bash: line 1: nvidia-smi: command not found\n", exit_status=127)
        if args == ["topo", "-m"]:
            from simulator.perf import topo_output

            return Result(topo_output(self.state.gpus_present, self.state.faults))
        if args == ["-L"]:
            return Result(
                "".join(
                    f"GPU {i}: NVIDIA B300 SXM6 AC (UUID: GPU-{uuid.UUID(int=i + 1)})\n"
                    for i in range(self.state.gpus_present)
                )
            )
        return Result(stderr="lab: only nvidia-smi -L is simulated\n", exit_status=2)
