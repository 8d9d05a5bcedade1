"""Intel's out-of-tree ice and irdma for every installed kernel, not only the running one.

Why: ``dnf update`` / ``apt upgrade`` installs a newer kernel and makes it the default boot
entry (RHEL: /etc/sysconfig/kernel ``UPDATEDEFAULT=yes``; Ubuntu boots the newest). Intel's
drivers live outside the kernel's own tree, in ``/lib/modules/<kernel>/updates/`` (Intel's
README "Building and Installation"; DKMS installs under ``updates/dkms``) or, for a kmod RPM
built for an earlier kernel of the same kABI, as ``weak-updates/`` links that
``weak-modules`` (kmod) adds when the kernel is installed. A kernel whose tree has neither
loads the in-tree ice at the next boot, which drops RDMA from the bonded ports
(``ice_lag.c``: ``ice_clear_rdma_cap``). ``modinfo -k KERNEL MODULE`` resolves the module
the way ``modprobe`` would under that kernel, whichever tool put it there, so one read per
kernel and module answers the question for DKMS, weak-modules and plain installs alike.
"""

from __future__ import annotations

import re

from steps.common import read_lines
from wizard.facts.system import parse_modinfo
from wizard.model import Finding, StepKind
from wizard.plan import Step, StepContext
from wizard.probe import Read, Report, read_all
from wizard.site import Node, Site

MODULES = ("ice", "irdma")
# The installed kernels are those with an image in /boot (vmlinuz-<uname -r>, the package's
# own file on RHEL and Ubuntu), not /lib/modules' directories: a removed kernel leaves its
# tree behind when DKMS or a kmod put files there, and nothing can boot it.
KERNEL_IMAGES = ["ls", "-1", "/boot"]
DEFAULT_KERNEL = ["grubby", "--default-kernel"]  # RHEL; /boot/vmlinuz-<kernel>
# uname -r's shape: what may be passed back to modinfo -k (the directory names of ls).
_KERNEL = re.compile(r"^[0-9][A-Za-z0-9._+~-]{0,100}$")


def installed_kernels(listing: str) -> list[str]:
    """The kernels of ``ls -1 /boot``: vmlinuz-<release>, without the rescue image
    (vmlinuz-0-rescue-<machine id>) and the vmlinuz / vmlinuz.old links."""
    names = (line.strip() for line in listing.splitlines()[:2000])
    kernels = {
        n.removeprefix("vmlinuz-")
        for n in names
        if n.startswith("vmlinuz-") and not n.startswith("vmlinuz-0-rescue-")
    }
    return sorted((k for k in kernels if _KERNEL.match(k)), key=_version_key)


def kernel_reads(node: Node) -> list[Read]:
    reads = [
        Read(["uname", "-r"]),
        Read(KERNEL_IMAGES, note="vmlinuz-<kernel>: the installed kernels"),
    ]
    if not node.os.startswith("ubuntu"):
        reads.append(Read(DEFAULT_KERNEL, note="the kernel the next boot starts"))
    return reads


def module_reads(kernels: list[str]) -> list[Read]:
    return [Read(["modinfo", "-k", k, m], parse_modinfo) for k in kernels for m in MODULES]


def _version_key(kernel: str) -> list[tuple[int, str]]:
    return [(int(p), "") if p.isdigit() else (0, p) for p in re.split(r"[.-]", kernel)]


def next_boot(kernels: list[str], default: str | None) -> str | None:
    """The kernel the next boot starts: grubby's default, else (Ubuntu) the newest."""
    if default:
        name = default.strip().rsplit("/", 1)[-1].removeprefix("vmlinuz-")
        if name in kernels:
            return name
    return max(kernels, key=_version_key) if kernels else None


class KernelUpdates(Step):
    """For each installed kernel: Intel's ice and irdma resolve outside the in-tree drivers."""

    id = "e810.kernel-updates"
    title = "Intel's ice and irdma for every installed kernel (kernel updates)"
    kind = StepKind.CHECK
    gates = ("T02", "T17")
    reads = ("node.os",)
    explain = (
        "For every kernel with an image in /boot, `modinfo -k KERNEL ice` and `irdma` must resolve "
        "to Intel's out-of-tree build (updates/, extra/, weak-updates/: DKMS, the kmod "
        "package's weak-modules links), not the kernel's own driver: a `dnf update` installs "
        "a newer kernel and makes it the default, and booting it with the in-tree ice drops "
        "RDMA from the bonded ports. The kernel the next boot starts must have them (T17: a "
        "warning here, and the reboot of phase 16 checks again first and is refused without "
        "them); another installed kernel without them warns."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        if node is None:
            return []
        return [
            *read_lines(kernel_reads(node)),
            *read_lines(module_reads(["<kernel>"]), "for each vmlinuz-<kernel> ls lists"),
        ]

    async def verify(self, ctx: StepContext) -> list[Finding]:
        return await kernel_findings(ctx, before_reboot=False)


async def kernel_findings(ctx: StepContext, *, before_reboot: bool) -> list[Finding]:
    """Intel's ice/irdma for every installed kernel; the next boot's without them warns
    (``before_reboot`` False, phase 3) or fails (the reboot's precondition)."""
    assert ctx.node is not None
    report = Report("T02")
    running_read, trees_read, *default_read = await read_all(ctx, *kernel_reads(ctx.node))
    running = running_read.result.stdout.strip()
    kernels = installed_kernels(trees_read.result.stdout)
    if not trees_read.result.ok or not kernels:
        report.unreadable("kernel-modules", trees_read, "the installed kernels")
        return report.findings
    default = default_read[0].result.stdout if default_read and default_read[0].ok else None
    boot = next_boot(kernels, default)
    probes = await read_all(ctx, *module_reads(kernels))
    missing: dict[str, list[str]] = {}
    for i, kernel in enumerate(kernels):
        for j, module in enumerate(MODULES):
            p = probes[i * len(MODULES) + j]
            if not p.ok:
                missing.setdefault(kernel, []).append(f"{module}: not found")
            elif p.fact.in_tree is not False:
                missing.setdefault(kernel, []).append(f"{module}: {p.fact.filename} (in-tree)")
    ctx.data["kernels"], ctx.data["next_boot"] = kernels, boot
    listed = ", ".join(f"{k}{' (running)' if k == running else ''}" for k in kernels)
    remedy = (
        "install Intel's ice and irdma built for KERNEL (Intel's `make install` or the kmod "
        "RPM from `rpmbuild -tb` against that kernel's headers; a kmod RPM of the same kABI "
        "links in with `weak-modules --add-kernel KERNEL`), or make the running kernel the "
        "default boot entry again (`grubby --set-default`), then re-run this check"
    )
    if boot in missing:
        judge = report.fail if before_reboot else report.warn
        judge(
            "kernel-update",
            f"the next boot starts {boot}, which has no Intel ice/irdma "
            f"({'; '.join(missing[boot])}): its in-tree ice drops RDMA from "
            f"{ctx.node.bond.name}'s ports",
            remedy.replace("KERNEL", boot)
            + ("" if before_reboot else "; the reboot of phase 16 is refused until then"),
            *(p.evidence() for p in probes),
            gate="T17",
        )
    else:
        report.ok(
            "kernel-update",
            f"the next boot ({boot}) has Intel's ice and irdma; installed kernels: {listed}",
            gate="T17",
        )
    others = {k: v for k, v in missing.items() if k != boot}
    if others:
        report.warn(
            "kernel-modules",
            "installed kernels without Intel's ice/irdma: "
            + "; ".join(f"{k} ({', '.join(v)})" for k, v in others.items()),
            "booting one of them (a manual choice in the boot menu) loses RDMA on the bond; "
            + remedy,
        )
    return report.findings
