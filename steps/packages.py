"""Phase 2, host packages: the RDMA user space and tools, from the operator's repositories."""

from __future__ import annotations

import shlex

from wizard.artifacts import Artifact, Target
from wizard.model import Finding, StepKind
from wizard.plan import Change, Phase, Step, StepContext
from wizard.probe import Probe, Read, Report, probe
from wizard.site import Node, Site

# Air-gapped friendly: the wizard shows and runs these; the site's own mirrors serve them.
# - iperf3: the TCP baseline (phase 10) and the coexistence test run it on both ends;
# - the ibv_* tools: RHEL's libibverbs-utils, Debian/Ubuntu's ibverbs-utils (ibv_devinfo);
# - Intel's out-of-tree ice/irdma build against the running kernel: its headers and a
#   compiler (Intel's README, "Building and Installation": kernel-devel / linux-headers,
#   gcc, make, libelf).
PACKAGES = {
    "rhel-10.2": (
        "rdma-core",
        "libibverbs-utils",
        "infiniband-diags",
        "perftest",
        "iperf3",
        "pciutils",
        "ethtool",
        "iproute",
        "kernel-devel",
        "gcc",
        "make",
        "elfutils-libelf-devel",
    ),
    "ubuntu-24.04": (
        "build-essential",
        "linux-headers-generic",
        "libelf-dev",
        "pciutils",
        "ethtool",
        "iproute2",
        "rdma-core",
        "ibverbs-providers",
        "ibverbs-utils",
        "infiniband-diags",
        "perftest",
        "iperf3",
    ),
}


def install_command(os_profile: str, names: list[str] | tuple[str, ...] | None = None) -> str:
    names = list(names if names is not None else PACKAGES[os_profile])
    if os_profile.startswith("ubuntu"):
        return "apt-get install -y " + shlex.join(names)
    return "dnf install -y " + shlex.join(names)


def query_argv(os_profile: str) -> list[str]:
    names = list(PACKAGES[os_profile])
    if os_profile.startswith("ubuntu"):
        return ["dpkg-query", "-W", "-f=${Package} ${Status}\\n", *names]
    return ["rpm", "-q", *names]


def packages_read(node: Node) -> Read:
    """The read that lists which of the node's required packages are installed (so that
    irdma.verify can send it with its own reads)."""
    return Read(query_argv(node.os), "packages")


async def missing_packages(ctx: StepContext) -> tuple[list[str], Report]:
    assert ctx.node is not None
    read = packages_read(ctx.node)
    return evaluate_packages(ctx.node, await probe(ctx, read.command, read.kind))


def evaluate_packages(node: Node, p: Probe) -> tuple[list[str], Report]:
    """The required packages that are missing, and the finding that says so."""
    report = Report("T02")
    if not p.ok:
        report.unreadable("packages", p, "the installed packages")
        return list(PACKAGES[node.os]), report
    missing = [name for name in PACKAGES[node.os] if name in p.fact.missing]
    if missing:
        report.fail(
            "packages",
            f"missing packages: {', '.join(missing)}",
            f"run `{install_command(node.os, missing)}` (the packages step does it after you confirm)",
            p.evidence(),
        )
    else:
        report.ok(
            "packages", f"all {len(PACKAGES[node.os])} RDMA and diagnostic packages installed"
        )
    return missing, report


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
        return [shlex.join(query_argv(profile)), install_command(profile)]

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        return [self._artifact(node)] if node else []

    def _artifact(self, node: Node) -> Artifact:
        return Artifact(
            f"nodes/{node.name}/host/packages.txt",
            "".join(f"{name}\n" for name in sorted(PACKAGES[node.os])),
            Target.SCRIPT,
            f"installed packages on {node.name}",
            "the packages the RDMA phases need",
        )

    async def changes(self, ctx: StepContext) -> list[Change]:
        assert ctx.node is not None
        missing, _ = await missing_packages(ctx)
        ctx.data["missing"] = missing  # what apply() installs: no second query
        installed = sorted(set(PACKAGES[ctx.node.os]) - set(missing))
        return [Change(self._artifact(ctx.node), "".join(f"{n}\n" for n in installed))]

    async def apply(self, ctx: StepContext, changes: list[Change]) -> None:
        assert ctx.node is not None
        missing = ctx.data["missing"]
        if missing:
            await ctx.run(
                install_command(ctx.node.os, missing), sudo=None, check=True, timeout=1800
            )

    async def verify(self, ctx: StepContext) -> list[Finding]:
        _, report = await missing_packages(ctx)
        return report.findings


PHASE = Phase(
    id="packages",
    number=2,
    title="Host packages",
    summary="Install the RDMA user space and diagnostic tools for the node's OS profile.",
    steps=(HostPackages(),),
)
