"""Phase 2, host packages: the RDMA user space and tools, from the operator's repositories."""

from __future__ import annotations

from wizard.model import StepKind
from wizard.plan import Phase, Step
from wizard.site import Node, Site

# Air-gapped friendly: the wizard shows and runs these; the site's own mirrors serve them.
PACKAGES = {
    "rhel-10.2": (
        "rdma-core",
        "libibverbs-utils",
        "infiniband-diags",
        "perftest",
        "pciutils",
        "ethtool",
        "iproute",
    ),
    "ubuntu-24.04": (
        "build-essential",
        "pciutils",
        "ethtool",
        "iproute2",
        "rdma-core",
        "ibverbs-providers",
        "infiniband-diags",
        "perftest",
    ),
}


def install_command(os_profile: str) -> str:
    if os_profile.startswith("ubuntu"):
        names = " ".join(PACKAGES[os_profile])
        return f'apt-get install -y {names} "linux-headers-$(uname -r)"'
    return "dnf install -y " + " ".join(PACKAGES[os_profile])


def query_command(os_profile: str) -> str:
    names = " ".join(PACKAGES[os_profile])
    if os_profile.startswith("ubuntu"):
        return f"dpkg-query -W -f='${{Package}} ${{Status}}\\n' {names}"
    return f"rpm -q {names}"


class HostPackages(Step):
    id = "packages.install"
    title = "RDMA user space and tools"
    kind = StepKind.APPLY
    gates = ("T02",)
    reads = ("node.os",)
    explain = (
        "rdma-core, the verbs utilities, infiniband-diags, perftest, pciutils, ethtool and "
        "iproute are installed (dnf on RHEL, apt on Ubuntu). Only missing packages are "
        "installed; the operator's repositories provide them."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        profile = node.os if node else "rhel-10.2"
        return [query_command(profile), install_command(profile)]


PHASE = Phase(
    id="packages",
    number=2,
    title="Host packages",
    summary="Install the RDMA user space and diagnostic tools for the node's OS profile.",
    steps=(HostPackages(),),
)
