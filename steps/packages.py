"""Phase 2, host packages: the RDMA user space and tools, from the operator's repositories."""

from __future__ import annotations

import re
import shlex

from steps.common import shown
from wizard.artifacts import Artifact, Target
from wizard.facts.host import DPKG_INSTALLED, RPM_INSTALLED, parse_packages
from wizard.model import Finding, StepKind
from wizard.plan import Change, Phase, Step, StepContext
from wizard.probe import Probe, Read, Report, probe
from wizard.site import Node, Site

# Air-gapped friendly: the wizard shows and runs these; the site's own mirrors serve them.
# - iperf3: the TCP baseline (phase 10) and the coexistence test run it on both ends;
# - the ibv_* tools: RHEL's libibverbs-utils, Debian/Ubuntu's ibverbs-utils (ibv_devinfo);
# - Intel's out-of-tree ice/irdma build against the running kernel: its headers and a
#   compiler (Intel's README, "Building and Installation": kernel-devel / linux-headers,
#   gcc, make, libelf). The headers are those of the running kernel, by name
#   (``headers_package``): an unversioned kernel-devel / linux-headers-generic is met by
#   the headers of whichever kernel the repository has newest (seed 000 section 3:
#   ``linux-headers-$(uname -r)``), and the build then fails or targets the wrong kernel.
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
        "gcc",
        "make",
        "elfutils-libelf-devel",
    ),
    "ubuntu-24.04": (
        "build-essential",
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


HEADERS = {"rhel-10.2": "kernel-devel", "ubuntu-24.04": "linux-headers"}
RUNNING_KERNEL = "$(uname -r)"  # in the runbook: the shell names the running kernel
# uname -r as a package name part: what may follow kernel-devel- / linux-headers-.
_KERNEL = re.compile(r"^[0-9][A-Za-z0-9._+~-]{0,100}$")


def headers_package(os_profile: str, kernel: str) -> str:
    """The running kernel's headers: kernel-devel-<uname -r> (an rpm NVRA, which rpm -q and
    dnf take) or linux-headers-<uname -r> (Debian/Ubuntu's per-kernel package)."""
    return f"{HEADERS[os_profile]}-{kernel}"


# Ubuntu's headers are per kernel version: linux-headers-$(uname -r) alone leaves the next
# kernel `apt upgrade` brings (through the linux-image-* metapackage: linux-image-generic,
# linux-image-generic-hwe-24.04, ...) without headers, and DKMS builds nothing for it. The
# headers metapackage of the same name keeps them coming. (RHEL needs nothing more:
# kernel-devel is installonly, dnf installs it beside each new kernel.) An image
# metapackage is a linux-image-* whose name does not start with a version.
_VERSIONED_IMAGE = re.compile(r"^linux-image-(unsigned-)?[0-9]")
_ABI = re.compile(r"^[0-9.]+-[0-9]+-")
# The playbook's uname -r, read on the node (a task registers it: the play gathers no facts).
ANSIBLE_KERNEL = "{{ gnw_kernel }}"
# The same choice in the runbook's shell, word-split on purpose (one word per metapackage):
# the installed ("ii") image metapackages as headers, else the running kernel's flavour.
HEADERS_META_WORDS = (
    "$( { dpkg-query -W -f='${db:Status-Abbrev} ${Package}\\n' 'linux-image-*' 2>/dev/null; "
    "echo \"fallback linux-image-$(uname -r | sed 's/^[0-9.]*-[0-9]*-//')\"; } | "
    'awk \'$1 == "ii" && $2 !~ /^linux-image-(unsigned-)?[0-9]/ '
    '{ sub(/^linux-image-/, "linux-headers-", $2); print $2; n++ } '
    '$1 == "fallback" && !n { sub(/^linux-image-/, "linux-headers-", $2); print $2 }\')'
)


def headers_metapackages(images: list[str], kernel: str) -> list[str]:
    """Ubuntu's headers metapackages for the installed ``images`` (linux-image-* package
    names): one per image metapackage, else the running ``kernel``'s flavour (6.8.0-86-generic:
    linux-headers-generic)."""
    metas = [
        "linux-headers-" + name.removeprefix("linux-image-")
        for name in images
        if name.startswith("linux-image-") and not _VERSIONED_IMAGE.match(name)
    ]
    if metas:
        return sorted(set(metas))
    if kernel == ANSIBLE_KERNEL:
        return ["linux-headers-{{ gnw_kernel | regex_replace('^[0-9.]+-[0-9]+-', '') }}"]
    return [f"linux-headers-{_ABI.sub('', kernel)}"]


def node_packages(
    os_profile: str, kernel: str = RUNNING_KERNEL, images: list[str] | None = None
) -> list[str]:
    """Every package the node needs; on Ubuntu with the headers metapackage of ``images``
    (the installed linux-image-* packages; unknown: the runbook's shell decides)."""
    names = [*PACKAGES[os_profile], headers_package(os_profile, kernel)]
    if os_profile.startswith("ubuntu"):
        if images is None and kernel == RUNNING_KERNEL:
            names.append(HEADERS_META_WORDS)
        else:
            names += headers_metapackages(images or [], kernel)
    return names


def _word(name: str) -> str:
    """A package name as a shell word: quoted, but ``$(uname -r)`` left to the shell."""
    if name == HEADERS_META_WORDS:
        return name
    if name.endswith(f"-{RUNNING_KERNEL}"):
        return f'"{name}"'
    return shlex.quote(name)


# How long apt-get waits for dpkg's lock (apt 2.4 on Ubuntu 22.04 has the option): an
# unattended-upgrades run after boot holds it for minutes; without it apt-get fails at once
# with "Could not get lock /var/lib/dpkg/lock-frontend".
DPKG_LOCK_TIMEOUT = 300


def _installer(os_profile: str) -> list[str]:
    """The one install command, the live step's and the Ansible play's: non-interactive as
    ansible.builtin.apt is (DEBIAN_FRONTEND=noninteractive, a changed conffile keeps the
    local one, force-confdef,force-confold, instead of a prompt meeting EOF), waiting for
    dpkg's lock. dnf needs nothing more: it waits for its own lock, never prompts with
    -y and rpm writes a changed config file next to the local one (.rpmnew)."""
    if os_profile.startswith("ubuntu"):
        return ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "-y",
                "-o", f"DPkg::Lock::Timeout={DPKG_LOCK_TIMEOUT}",
                "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold",
                "install"]  # fmt: skip
    return ["dnf", "install", "-y"]


def installed_line(os_profile: str) -> str:
    """The regex a line of ``query_argv``'s output matches when that package is installed:
    the wizard's parser's own rule (wizard/facts/host.py), handed to the play."""
    return DPKG_INSTALLED if os_profile.startswith("ubuntu") else RPM_INSTALLED


def install_argv(os_profile: str, names: list[str]) -> list[str]:
    """The install as an argv (the Ansible play's command task runs it)."""
    return [*_installer(os_profile), *names]


def install_command(os_profile: str, names: list[str] | tuple[str, ...] | None = None) -> str:
    names = list(names if names is not None else node_packages(os_profile))
    return " ".join([*_installer(os_profile), *(_word(n) for n in names)])


def query_argv(os_profile: str, names: list[str] | None = None) -> list[str]:
    names = list(PACKAGES[os_profile]) if names is None else names
    if os_profile.startswith("ubuntu"):
        return ["dpkg-query", "-W", "-f=${Package} ${Status}\\n", *names]
    return ["rpm", "-q", *names]


def query_line(os_profile: str) -> str:
    """The runbook's query, the running kernel's headers named by the shell."""
    fixed, kernel_bound = (
        list(PACKAGES[os_profile]),
        node_packages(os_profile)[len(PACKAGES[os_profile]) :],
    )
    return shlex.join(query_argv(os_profile, fixed)) + "".join(" " + _word(n) for n in kernel_bound)


def packages_read(node: Node) -> Read:
    """The read that lists which of the node's required packages are installed (so that
    irdma.verify can send it with its own reads): the kernel-independent ones; the running
    kernel's headers are the packages step's (it reads uname -r first)."""
    return Read(query_argv(node.os), parse_packages)


async def missing_packages(ctx: StepContext) -> tuple[list[str], Report]:
    """What is missing of the node's packages, the running kernel's headers included."""
    assert ctx.node is not None
    uname = await ctx.run(["uname", "-r"])
    kernel = uname.stdout.strip()
    if uname.exit_status != 0 or not _KERNEL.match(kernel):
        report = Report("T02")
        report.fail("packages", f"cannot read the running kernel (uname -r: {kernel[:80]!r})",
                    "run `uname -r` on the node by hand")  # fmt: skip
        return [], report
    images = await _installed_images(ctx) if ctx.node.os.startswith("ubuntu") else None
    names = node_packages(ctx.node.os, kernel, images)
    p = await probe(ctx, query_argv(ctx.node.os, names), parse_packages)
    return evaluate_packages(ctx.node, p, names)


async def _installed_images(ctx: StepContext) -> list[str]:
    """The installed linux-image-* packages (dpkg's "ii"), for the headers metapackage."""
    listed = await ctx.run(
        ["dpkg-query", "-W", "-f=${db:Status-Abbrev} ${Package}\\n", "linux-image-*"]
    )
    return [
        words[1] for words in (ln.split() for ln in listed.stdout.splitlines()[:2000])
        if len(words) == 2 and words[0] == "ii"
    ]  # fmt: skip


def evaluate_packages(
    node: Node, p: Probe, names: list[str] | None = None
) -> tuple[list[str], Report]:
    """The required packages that are missing, and the finding that says so."""
    report = Report("T02")
    names = list(PACKAGES[node.os]) if names is None else names
    if not p.ok:
        report.unreadable("packages", p, "the installed packages")
        return names, report
    missing = [name for name in names if name in p.fact.missing]
    if missing:
        report.fail(
            "packages",
            f"missing packages: {', '.join(missing)}",
            f"run `{install_command(node.os, missing)}` (the packages step does it after you confirm)",
            p.evidence(),
        )
    else:
        report.ok("packages", f"all {len(names)} RDMA and diagnostic packages installed")
    return missing, report


def _listed(names: list[str]) -> list[str]:
    """Package names as the packages.txt artifact lists them (the runbook's shell choice of
    Ubuntu's headers metapackage by what it is)."""
    meta = "linux-headers-<flavour of the installed linux-image-* metapackage>"
    return [meta if n == HEADERS_META_WORDS else n for n in names]


class HostPackages(Step):
    id = "packages.install"
    title = "RDMA user space and tools"
    kind = StepKind.APPLY
    gates = ("T02",)
    reads = ("node.os",)
    explain = (
        "rdma-core, the verbs utilities, infiniband-diags, perftest, pciutils, ethtool and "
        "iproute are installed (dnf on RHEL, apt on Ubuntu), and the running kernel's own "
        "headers (kernel-devel-$(uname -r) / linux-headers-$(uname -r), on Ubuntu also the "
        "headers metapackage of the installed linux-image-* one, so the next kernel gets "
        "headers too) with a compiler, for "
        "Intel's out-of-tree ice/irdma. Only missing packages are installed; the operator's "
        "repositories provide them."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        profile = node.os if node else "rhel-10.2"
        return [
            shown(["uname", "-r"], "the running kernel, whose headers are needed"),
            query_line(profile),
            install_command(profile),
        ]

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        return [self._artifact(node)] if node else []

    def _artifact(self, node: Node) -> Artifact:
        return Artifact(
            f"nodes/{node.name}/host/packages.txt",
            "".join(f"{name}\n" for name in sorted(_listed(node_packages(node.os)))),
            Target.SCRIPT,
            f"installed packages on {node.name}",
            "the packages the RDMA phases need",
        )

    async def changes(self, ctx: StepContext) -> list[Change]:
        assert ctx.node is not None
        missing, _ = await missing_packages(ctx)
        ctx.data["missing"] = missing  # what apply() installs: no second query
        # The artifact names the headers by $(uname -r), the live list by the kernel itself.
        wanted = node_packages(ctx.node.os)
        installed = sorted(
            n for n in _listed(wanted) if n not in missing and not n.endswith(RUNNING_KERNEL)
        )
        if not any(m.startswith(HEADERS[ctx.node.os]) for m in missing):
            installed = sorted([*installed, headers_package(ctx.node.os, RUNNING_KERNEL)])
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
