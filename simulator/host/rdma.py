"""A lab host's kernel modules and RDMA devices as ``lsmod``, ``modinfo``, iproute2's
``rdma``, ``ibv_devices``/``ibv_devinfo`` and the ib_core hw_counters (read with ``grep -H``)
show them. Loading and unloading modules is simulator/kmod.py."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from simulator.host.model import OOT_ICE_VERSION, OOT_IRDMA_VERSION, Result

# libibverbs' enum ibv_mtu (verbs.h), which ibv_devinfo prints after the size.
IB_MTU_ENUM = {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}

if TYPE_CHECKING:
    from simulator.host.machine import HostState


def _json_or_lines(entries: list[dict[str, object]], json_out: bool, line: str) -> Result:
    """Answer like iproute2's `rdma`: the entries as JSON with -j, else one line each."""
    if json_out:
        return Result(json.dumps(entries) + "\n")
    return Result("".join(line.format(**entry) + "\n" for entry in entries))


class HostRdma:
    """irdma's device, the modules under it and DCQCN's counters, from the host's state."""

    def __init__(self, state: HostState) -> None:
        self.state = state

    def cmd_grep(self, args: list[str]) -> Result:
        """``grep -H . FILE...`` over the RDMA device's hw_counters (each file's value with
        its name, as grep prints it); anything else is not simulated."""
        if args[:2] != ["-H", "."]:
            return Result(stderr="lab: only grep -H . FILE... is simulated\n", exit_status=2)
        out, errors = [], []
        devices = {name for name, _ in self.state.rdma_devices}
        for path in args[2:]:
            parts = path.split("/")
            if (len(parts) == 9 and parts[:4] == ["", "sys", "class", "infiniband"]
                    and parts[4] in devices and parts[7] == "hw_counters"):  # fmt: skip
                out.append(f"{path}:{self.state.hw_counters.get(parts[8], 0)}\n")
            else:
                errors.append(f"grep: {path}: No such file or directory\n")
        # GNU grep exits 2 when a file could not be read, even if others matched.
        return Result("".join(out), "".join(errors), 2 if errors else 0 if out else 1)

    def ecn_enabled(self) -> bool:
        """DCQCN on for the host's RDMA device (irdma configfs roce_dcqcn_enable = 1)."""
        return any(k.endswith("roce_dcqcn_enable") and v.strip() == "1"
                   for k, v in self.state.configfs.items())  # fmt: skip

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
        for name in sorted(self.state.modules):
            used = [u for u in users.get(name, []) if u in self.state.modules]
            lines.append(
                f"{name:<24}{sizes.get(name, 40960):>7}  {len(used)} {','.join(used)}".rstrip()
            )
        return Result("\n".join(lines) + "\n")

    def cmd_modinfo(self, args: list[str]) -> Result:
        if not args:
            return Result(stderr="modinfo: ERROR: missing module or filename.\n", exit_status=1)
        name = args[-1]
        # modinfo -k KERNEL: the module as modprobe would find it under that kernel.
        kernel = args[args.index("-k") + 1] if "-k" in args[:-1] else self.state.kernel
        if name not in ("ice", "irdma"):
            return Result(stderr=f"modinfo: ERROR: Module {name} not found.\n", exit_status=1)
        if kernel not in self.state.kernels:
            return Result(stderr=f"modinfo: ERROR: Module {name} not found.\n", exit_status=1)
        path = self.state.module_path(kernel, name)
        in_tree = self.state.kernels[kernel] == "kernel"
        version = "" if in_tree else OOT_ICE_VERSION if name == "ice" else OOT_IRDMA_VERSION
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
            f"vermagic:       {kernel} SMP preempt mod_unload modversions ",
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
        devices = self.state.rdma_devices
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
        lines += [f"    {dev:<20}b68351fffe027a30" for dev, _ in self.state.rdma_devices]
        return Result("\n".join(lines) + "\n")

    def cmd_ibv_devinfo(self, args: list[str]) -> Result:
        devices = self.state.rdma_devices
        if not devices:
            return Result("No IB devices found\n", "", 255)
        blocks = []
        for dev, port in devices:
            transport = "InfiniBand (0)" if self.state.roce else "iWARP (1)"
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
                f"\t\t\tactive_mtu:\t\t{self.state.active_mtu} ({IB_MTU_ENUM[self.state.active_mtu]})",
                "\t\t\tsm_lid:\t\t\t0",
                "\t\t\tport_lid:\t\t1",
                "\t\t\tport_lmc:\t\t0x00",
                "\t\t\tlink_layer:\t\tEthernet",
            ]
            if "-v" in args:
                rdma = ":".join(f"{int(x):02x}" for x in self.state.rdma_ip.split("."))
                a, b = rdma.split(":")[0:2], rdma.split(":")[2:4]
                ipv4_gid = f"0000:0000:0000:0000:0000:ffff:{a[0]}{a[1]}:{b[0]}{b[1]}"
                kind = "RoCE v2" if self.state.roce else "IB"
                block += [
                    f"\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:b683:51ff:fe02:7a30, {kind}",
                    f"\t\t\tGID[  1]:\t\t{ipv4_gid}, {kind}",
                ]
            blocks.append("\n".join(block))
        return Result("\n\n".join(blocks) + "\n")
