"""The lab host's kernel modules, the initramfs, and /dev/infiniband. ``KernelModules``, a
collaborator of ``LabHost`` (simulator/host/).

Sources:
- rdma-core kernel-boot/modules/rdma.conf (loaded for any RDMA device through
  rdma-hw.target): ``ib_uverbs rdma_ucm`` among others; ``ib_umad`` is only in
  infiniband.conf, loaded for InfiniBand drivers (mlx4/mlx5/mthca/qib), never for irdma.
  So a RoCE host has /dev/infiniband/rdma_cm and uverbsN but no umadN until ib_umad is
  loaded by modules-load.d.
- rdma-core kernel-boot/dracut/50rdma/module-setup.sh: ``instmods =drivers/infiniband``
  puts irdma into the initramfs, which loads it early with the options the initramfs was
  built with: a new /etc/modprobe.d option is not seen at boot until ``dracut -f``
  (``update-initramfs -u`` on Ubuntu); without it irdma comes back in iWARP mode.
- k8s-rdma-shared-dev-plugin pkg/resources/rdma_device_spec.go: ``requiredRdmaDevices =
  {"rdma_cm", "umad", "uverbs"}``: without one the device is skipped ("RDMA device %q not
  found") and the resource advertises 0 devices.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulator.host import Result
    from simulator.host.machine import HostState

MODPROBE_IRDMA = "/etc/modprobe.d/irdma.conf"
KNOWN_MODULES = (
    "irdma",
    "ice",
    "ib_uverbs",
    "rdma_cm",
    "rdma_ucm",
    "ib_umad",
    "bonding",
    "ib_core",
)


class KernelModules:
    """Loading and unloading modules, the initramfs they load from at boot, and the devices
    they make, on the host's state."""

    def __init__(self, state: HostState) -> None:
        self.state = state

    def load_irdma(self, options: str) -> None:
        """irdma loads with the module options it is given (RoCEv2 only with roce_ena=1)."""
        self.state.modules.add("irdma")
        self.state.irdma_roce = "roce_ena=1" in options

    def cmd_modprobe(self, args: list[str]) -> Result:
        from simulator.host import Result

        remove = "-r" in args or "--remove" in args
        names = [a for a in args if not a.startswith("-")]
        for name in names:
            if name not in KNOWN_MODULES:
                return Result(stderr=f"modprobe: FATAL: Module {name} not found in directory "
                              f"/lib/modules/{self.state.kernel}\n", exit_status=1)  # fmt: skip
            if remove:
                self.state.modules.discard(name)
            elif name == "irdma" and "irdma" not in self.state.modules:
                self.load_irdma(self.state.files.get(MODPROBE_IRDMA, ""))  # modprobe reads it now
            else:
                self.state.modules.add(name)
        return Result()

    def cmd_dracut(self, args: list[str]) -> Result:
        from simulator.host import Result

        if self.state.os.startswith("ubuntu"):
            return Result(stderr="bash: line 1: dracut: command not found\n", exit_status=127)
        if "-f" not in args and "--force" not in args:
            return Result(stderr=f"dracut: Will not override existing initramfs "
                          f"(/boot/initramfs-{self.state.kernel}.img) without --force\n", exit_status=1)  # fmt: skip
        self.state.initramfs_irdma_options = self.state.files.get(MODPROBE_IRDMA, "")
        return Result()

    def cmd_update_initramfs(self, args: list[str]) -> Result:
        from simulator.host import Result

        if not self.state.os.startswith("ubuntu"):
            return Result(
                stderr="bash: line 1: update-initramfs: command not found\n", exit_status=127
            )
        if "-u" not in args:
            return Result(
                stderr="Usage: update-initramfs {-c|-d|-u} [-k version] [-v] [-b directory]\n",
                exit_status=2,
            )
        self.state.initramfs_irdma_options = self.state.files.get(MODPROBE_IRDMA, "")
        return Result(f"update-initramfs: Generating /boot/initrd.img-{self.state.kernel}\n")

    def cmd_lsinitrd(self, args: list[str]) -> Result:
        """dracut's lsinitrd: ``-f FILE`` prints a file as the initramfs holds it."""
        from simulator.host import Result

        if self.state.os.startswith("ubuntu"):
            return Result(stderr="bash: line 1: lsinitrd: command not found\n", exit_status=127)
        if args[:1] == ["-f"] and args[1:] == [MODPROBE_IRDMA]:
            return Result(self.state.initramfs_irdma_options)
        return Result(stderr="lsinitrd: only -f FILE is simulated\n", exit_status=1)

    def boot_modules(self) -> None:
        """At boot: irdma from the initramfs (its options as built), then modules-load.d."""
        self.state.modules -= {"irdma", "ib_umad", "rdma_ucm"}
        self.state.modules.add("rdma_ucm")  # rdma-core rdma.conf, for any RDMA device
        listed = [
            line.strip()
            for path, text in self.state.files.items()
            if path.startswith("/etc/modules-load.d/")
            for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")
        ]
        if "irdma" in listed:
            self.load_irdma(self.state.initramfs_irdma_options)
        self.state.modules.update(m for m in listed if m in KNOWN_MODULES and m != "irdma")

    def infiniband_devices(self) -> list[str]:
        """The character devices under /dev/infiniband, by the modules that make them."""
        names = []
        if "rdma_ucm" in self.state.modules:
            names.append("rdma_cm")
        for index, _ in enumerate(self.state.rdma_devices):
            if "ib_uverbs" in self.state.modules:
                names.append(f"uverbs{index}")
            if "ib_umad" in self.state.modules:
                names += [f"umad{index}", f"issm{index}"]
        return sorted(names)

    def cmd_grubby(self, args: list[str]) -> Result:
        """grubby(8) on RHEL: ``--default-kernel`` prints the default entry's kernel image."""
        from simulator.host import Result

        if self.state.os.startswith("ubuntu"):
            return Result(stderr="bash: line 1: grubby: command not found\n", exit_status=127)
        if args == ["--default-kernel"]:
            return Result(f"/boot/vmlinuz-{self.state.default_kernel}\n")
        return Result(stderr="grubby: unsupported option in the lab\n", exit_status=1)

    def cmd_ls(self, args: list[str]) -> Result:
        from simulator.host import Result

        paths = [a for a in args if not a.startswith("-")]
        if paths == ["/lib/modules"]:
            return Result("".join(f"{k}\n" for k in sorted(self.state.kernels)))
        if paths == ["/boot"]:
            from simulator.host.model import LEFTOVER_KERNEL

            # An installed kernel's package owns /boot/vmlinuz-<release>; a removed one's
            # /lib/modules tree may stay behind (leftover-module-tree), with no image.
            files = ["grub2", "loader", *(f"vmlinuz-{k}" for k in self.state.kernels if k != LEFTOVER_KERNEL),
                     *(f"config-{k}" for k in self.state.kernels if k != LEFTOVER_KERNEL)]  # fmt: skip
            return Result("".join(f"{f}\n" for f in sorted(files)))
        if paths == ["/sys/bus/auxiliary/devices"]:
            return Result("".join(f"{d}\n" for d in self.state.aux_devices()))
        if paths == ["/dev/infiniband"]:
            devices = self.infiniband_devices()
            if not devices:
                return Result(
                    stderr="ls: cannot access '/dev/infiniband': No such file or directory\n",
                    exit_status=2,
                )
            return Result("\n".join(devices) + "\n")
        return Result(
            stderr=f"ls: cannot access '{' '.join(paths)}': No such file or directory\n",
            exit_status=2,
        )
