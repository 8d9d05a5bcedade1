"""A lab host's files, configfs and systemd: ``cat`` of real and synthesized files
(/etc/os-release, /proc, /proc/net/bonding), the transport's file and value writers,
``mkdir``/``rmdir`` of configfs groups, ``tee``, ``systemctl enable``/``is-enabled`` and
``reboot`` (what a boot keeps and what it loses)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from simulator.host.model import OS_RELEASE, Result

if TYPE_CHECKING:
    from simulator.host.machine import HostState
    from simulator.host.nic import HostNic
    from simulator.kmod import KernelModules

# The configfs folders where `mkdir DEVICE` makes a per-device directory, and the attribute
# the kernel then shows in it (the one the wizard reads back).
CONFIGFS_DEVICE_ATTRIBUTES = {
    "/sys/kernel/config/rdma_cm/": "ports/1/default_roce_tos",
    "/sys/kernel/config/irdma/": "roce_dcqcn_enable",
}


class HostFiles:
    """Reading and writing the host's files and configfs, and its systemd units. The bond's
    /proc/net/bonding file is ``nic``'s to write; a reboot has ``kmod`` load the modules."""

    def __init__(self, state: HostState, nic: HostNic, kmod: KernelModules) -> None:
        self.state = state
        self.nic = nic
        self.kmod = kmod

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
            return OS_RELEASE[self.state.os]
        if path == "/etc/machine-id":
            return self.state.machine_id + "\n"
        if path == "/proc/sys/kernel/random/boot_id":
            return self.state.boot_id + "\n"
        if path == "/proc/cmdline":
            iommu = "" if "iommu-translated" in self.state.faults else " intel_iommu=on iommu=pt"
            return f"BOOT_IMAGE=(hd0,gpt2)/vmlinuz-{self.state.kernel} root=/dev/mapper/rhel-root ro{iommu}\n"
        if path == "/proc/driver/nvidia/version" and self.state.gpu_driver:
            return (
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  595.91.07  Release Build  "
                "(dvs-builder@U22-I3-AE18-23-3)  Mon Sep 29 2026\nGCC version:  gcc version 11.5.0\n"
            )
        if path == f"/proc/net/bonding/{self.state.bond_name}":
            return self.nic.bonding()
        if path == f"/sys/class/net/{self.state.bond_name}/mtu":
            return f"{self.state.mtu}\n"
        if path.startswith("/sys/kernel/config/"):
            return self.state.configfs.get(path)
        return self.state.files.get(path)

    def cmd_install(self, args: list[str]) -> Result:
        return Result(stderr="install: use the wizard's file writer\n", exit_status=1)

    def write_file(self, path: str, content: str) -> None:
        if path.startswith("/sys/kernel/config/"):
            self.state.configfs[path] = content
        else:
            self.state.files[path] = content

    def write_value(self, path: str, value: str) -> Result:
        if path.startswith("/sys/kernel/config/rdma_cm/"):
            device = path.split("/")[5]
            if not any(dev == device for dev, _ in self.state.rdma_devices):
                return Result(stderr=f"sh: {path}: No such file or directory\n", exit_status=1)
            if f"/sys/kernel/config/rdma_cm/{device}/" not in self.state.configfs:
                return Result(stderr=f"sh: {path}: No such file or directory\n", exit_status=1)
        if path.startswith("/sys/kernel/config/irdma/"):
            directory = path.rsplit("/", 1)[0] + "/"
            if directory not in self.state.configfs:
                return Result(stderr=f"sh: {path}: No such file or directory\n", exit_status=1)
        self.state.configfs[path] = value + "\n"
        return Result()

    def cmd_mkdir(self, args: list[str]) -> Result:
        for path in (a for a in args if not a.startswith("-")):
            directory = path.rstrip("/")
            parent, _, device = directory.rpartition("/")
            attribute = CONFIGFS_DEVICE_ATTRIBUTES.get(parent + "/")
            if attribute is None:
                continue
            if not any(dev == device for dev, _ in self.state.rdma_devices):
                return Result(
                    stderr=f"mkdir: cannot create directory '{path}': No such device\n",
                    exit_status=1,
                )
            self.state.configfs[directory + "/"] = ""
            self.state.configfs.setdefault(f"{directory}/{attribute}", "0\n")
        return Result()

    def cmd_rmdir(self, args: list[str]) -> Result:
        """rmdir of a configfs group (irdma's per-device folder): its attributes go with it."""
        for path in (a for a in args if not a.startswith("-")):
            prefix = path.rstrip("/") + "/"
            if prefix not in self.state.configfs:
                return Result(
                    stderr=f"rmdir: failed to remove '{path}': No such file or directory\n",
                    exit_status=1,
                )
            for key in [k for k in self.state.configfs if k.startswith(prefix)]:
                del self.state.configfs[key]
        return Result()

    def cmd_systemctl(self, args: list[str]) -> Result:
        if args[:1] == ["reboot"]:
            self.reboot()
            return Result()
        if args[:1] in (["enable"], ["disable"]):
            # systemctl(1) enable/disable UNIT...: makes or removes the symlinks [Install]
            # names; disabling a unit that was not enabled is no error, a unit file that
            # does not exist is, for either.
            for unit in [u for u in args[1:] if not u.startswith("-")]:
                if f"/etc/systemd/system/{unit}" not in self.state.files:
                    return Result(
                        stderr=f"Failed to {args[0]} unit: Unit file {unit} does not exist.\n",
                        exit_status=1,
                    )
                if args[0] == "enable":
                    self.state.enabled_units.add(unit)
                else:
                    self.state.enabled_units.discard(unit)
            return Result()
        if args[:1] == ["disable"]:
            # systemctl(1) disable: the unit's [Install] symlinks are removed; a unit file
            # that does not exist is an error (systemd's "Unit file ... does not exist").
            for unit in (u for u in args[1:] if not u.startswith("-")):
                if f"/etc/systemd/system/{unit}" not in self.state.files:
                    return Result(
                        stderr=f"Failed to disable unit: Unit file {unit} does not exist.\n",
                        exit_status=1,
                    )
                self.state.enabled_units.discard(unit)
            return Result()
        if args[:1] == ["is-enabled"]:
            # systemctl(1): one line per unit; exit 0 when at least one is enabled.
            units = [u for u in args[1:] if not u.startswith("-")]
            states = ["enabled" if u in self.state.enabled_units else "disabled" for u in units]
            return Result("".join(f"{s}\n" for s in states), "", 0 if "enabled" in states else 1)
        if args[:1] == ["show"]:
            return self._systemctl_show([u for u in args[1:] if not u.startswith("-")])
        if args[:1] == ["list-unit-files"]:
            # systemctl(1) list-unit-files PATTERN: exit 1 when nothing matches.
            units = [u for u in args[1:] if not u.startswith("-")]
            found = [u for u in units if f"/etc/systemd/system/{u}" in self.state.files]
            lines = "".join(
                f"{u} {'enabled' if u in self.state.enabled_units else 'disabled'} disabled\n"
                for u in found
            )
            return Result(lines, "", 0 if found else 1)
        return Result()  # daemon-reload, start, ...: nothing the model keeps

    def _systemctl_show(self, units: list[str]) -> Result:
        """systemctl(1) ``show UNIT``: its properties as KEY=VALUE lines, units apart by a
        blank line; an unknown unit is ``LoadState=not-found`` with exit 0 (what Ansible's
        systemd_service module reads to decide that the unit exists)."""
        blocks = []
        for unit in units:
            path = f"/etc/systemd/system/{unit}"
            if path in self.state.files:
                state = "enabled" if unit in self.state.enabled_units else "disabled"
                blocks.append(f"Id={unit}\nNames={unit}\nLoadState=loaded\nActiveState=inactive\n"
                              f"SubState=dead\nFragmentPath={path}\nUnitFileState={state}\n"
                              "UnitFilePreset=disabled\n")  # fmt: skip
            else:
                blocks.append(f"Id={unit}\nNames={unit}\nLoadState=not-found\n"
                              "ActiveState=inactive\nSubState=dead\nUnitFileState=\n")  # fmt: skip
        return Result("\n".join(blocks))

    def reboot(self) -> None:
        """What a reboot changes: a new boot id; dcb and configfs state are lost."""
        self.state.boot_id = str(uuid.uuid4())
        for port in self.state.ports:
            port.dcb.reset()  # software DCB lives in the driver: gone at boot
        self.state.configfs.clear()
        for port in self.state.ports:
            # The ethtool private flag persists (firmware); the bond forms only once the
            # network is up, after the early boot units (LabShell.boot, then form_bond).
            port.enslaved, port.admin_up, port.nm_profile_active = False, True, True
            port.nm_standalone = False
        self.state.lag_rdma_ok = True
        self.kmod.boot_modules()
        # The enabled boot units run next, in a real shell (LabShell.boot, awaited by the
        # SSH server as the host comes back).

    def cmd_tee(self, args: list[str]) -> Result:
        """tee(1) into the host model: a configfs/sysfs attribute takes the value, any
        other path the content (``-a`` appends)."""
        append = "-a" in args
        for path in (a for a in args if not a.startswith("-")):
            if path.startswith(("/sys/", "/proc/sys/")):
                written = self.write_value(path, self.state.stdin.rstrip("\n"))
                if written.exit_status != 0:
                    return Result(stderr=written.stderr.replace("sh:", "tee:"), exit_status=1)
            else:
                self.write_file(
                    path, (self.state.files.get(path, "") if append else "") + self.state.stdin
                )
        return Result(self.state.stdin)
