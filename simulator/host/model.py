"""What a lab host is made of: its E810 ports, the versions and packages it has, and the
result of a command it runs (``HostState`` in ``simulator/host/machine.py`` holds them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.dcb import PortDcb

RHEL_KERNEL = "6.12.0-124.8.1.el10_2.x86_64"
UBUNTU_KERNEL = "6.8.0-86-generic"
# What `dnf update` / `apt upgrade` installs next (the "kernel-update" faults).
RHEL_NEXT_KERNEL = "6.12.0-124.13.1.el10_2.x86_64"
UBUNTU_NEXT_KERNEL = "6.8.0-90-generic"
# A kernel removed long ago whose /lib/modules tree stayed (the "leftover-module-tree" fault:
# files DKMS or a kmod put there are no package's, so removing the kernel leaves the tree).
LEFTOVER_KERNEL = "6.12.0-55.9.1.el10_0.x86_64"
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
    # rpm -q takes a name or a name-version-release.arch: the running kernel's headers.
    f"kernel-devel-{RHEL_KERNEL}": f"kernel-devel-{RHEL_KERNEL}",
    "gcc": "gcc-14.2.1-7.el10.x86_64",
    "make": "make-4.4.1-9.el10.x86_64",
    "elfutils-libelf-devel": "elfutils-libelf-devel-0.192-5.el10.x86_64",
}


@dataclass
class Result:
    stdout: str = ""
    stderr: str = ""
    exit_status: int = 0


@dataclass
class Port:
    name: str
    slot: str  # PCI address
    mac: str
    up: bool = True  # the link (cable, switch)
    admin_up: bool = True
    enslaved: bool = True
    lldp_agent: bool = True
    dcb: PortDcb = field(default_factory=PortDcb)  # the driver's DCB (simulator/dcb.py)
    nm_profile_active: bool = True  # its NetworkManager port profile (RHEL)
    nm_standalone: bool = False  # active through a standalone profile, outside the bond
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
