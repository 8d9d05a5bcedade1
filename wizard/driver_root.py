"""Reaching the NVIDIA driver's tools on a node whose driver the GPU Operator runs.

The GPU Operator's driver container installs the driver inside the container and shares
its root with the host at ``hostPaths.driverInstallDir`` (chart values.yaml of v26.7.0:
``driverInstallDir: "/run/nvidia/driver"``, "the root at which driver files including
libraries, config files, and executables can be found"). The host's own PATH has no
``nvidia-smi`` then, so a plain ``nvidia-smi`` over SSH says "command not found" on a
node that is perfectly healthy. A driver installed on the host itself (no driver
container) keeps ``nvidia-smi`` on the PATH: one command covers both.
"""

from __future__ import annotations

DRIVER_ROOT = "/run/nvidia/driver"

# $1 is the driver root; the rest goes to nvidia-smi. chroot into the driver container's
# root when it holds nvidia-smi (its libraries resolve there), else the host's own.
NVIDIA_SMI_SCRIPT = (
    'root="$1"; shift; '
    'if [ -x "$root/usr/bin/nvidia-smi" ]; then exec chroot "$root" nvidia-smi "$@"; fi; '
    'exec nvidia-smi "$@"'
)


def nvidia_smi_command(*args: str, root: str = DRIVER_ROOT) -> list[str]:
    """The argv that runs ``nvidia-smi ARGS`` from the driver container's root, or the
    host's PATH when the driver is installed on the host."""
    return ["sh", "-c", NVIDIA_SMI_SCRIPT, "sh", root, *args]
