"""Phase 1, preflight: what the host and the cluster are, before anything changes (T00).

Each check is a pure ``evaluate_*`` function over parsed facts (tested on real outputs)
and a ``verify`` that runs the probes and calls it.
"""

from __future__ import annotations

import re
from typing import Any

from steps.common import KUBECONFIG_WORD, q, read_lines
from steps.gpu_operator.install import helm_line
from wizard.driver_root import nvidia_smi_command
from wizard.facts.gpu import NvidiaSmiList, parse_nvidia_smi_l
from wizard.facts.host import IpAddr, parse_ip_addr
from wizard.facts.pci import Iommu, Lspci, LspciAcs, parse_iommu, parse_lspci, parse_lspci_acs
from wizard.facts.system import CONTAINERD_VERSION, ContainerdVersion, OsRelease, parse_os_release
from wizard.model import Finding, StepKind
from wizard.plan import Phase, Scope, Step, StepContext
from wizard.probe import Probe, Read, Report, probe, read_all
from wizard.site import Node, Site
from wizard.support import support_for
from wizard.transports.base import TransportError

_OS_PROFILES = {"rhel-10.2": ("rhel", "10.2"), "ubuntu-24.04": ("ubuntu", "24.04")}


# -- pure evaluations -----------------------------------------------------------------------


def evaluate_os(site: Site, node: Node, os: OsRelease, arch: str, report: Report, p: Probe) -> None:
    support = support_for(site.versions.gpu_operator)
    wanted_id, wanted_version = _OS_PROFILES[node.os]
    evidence = p.evidence(lambda line: line.startswith(("ID=", "VERSION_ID=", "PRETTY_NAME=")))
    if (os.id, os.version_id) != (wanted_id, wanted_version):
        report.fail(
            "os-profile",
            f"the host runs {os.pretty_name or os.id} but the site says {node.os}",
            f"correct nodes[].os in the site file, or reinstall the node with {node.os}",
            evidence,
        )
    elif support is None:
        report.warn(
            "os-supported",
            f"{os.pretty_name}: no support data for GPU Operator {site.versions.gpu_operator}",
            "check NVIDIA's platform support page for this chart version",
            evidence,
        )
    elif any(
        os.id == i and (os.version_id or "").startswith(v) for i, v in support.operating_systems
    ):
        report.ok(
            "os-supported",
            f"{os.pretty_name} is validated for GPU Operator {support.operator}",
            evidence,
        )
    else:
        report.fail(
            "os-supported",
            f"{os.pretty_name} is not validated for GPU Operator {support.operator}",
            "use RHEL 10.2 or Ubuntu 24.04 for the GPU node",
            evidence,
        )
    if arch == "x86_64":
        report.ok("arch", "architecture x86_64")
    else:
        report.fail(
            "arch", f"architecture {arch}: the B300 profile expects x86_64", "check the node"
        )


def evaluate_workers(
    node_name: str, kernel: str, os_name: str | None, workers: list[dict[str, Any]], report: Report
) -> None:
    """Compare the GPU node's kernel/OS with the existing workers (a mismatch warns)."""
    infos = [
        (w["metadata"]["name"], w.get("status", {}).get("nodeInfo", {}))
        for w in workers
        if w["metadata"]["name"] != node_name
    ]
    if not infos:
        report.skip("kernel-vs-workers", "no other workers to compare the kernel with")
        return
    kernels = {info.get("kernelVersion") for _, info in infos}
    images = {info.get("osImage") for _, info in infos}
    detail = ", ".join(f"{name}: {info.get('kernelVersion')}" for name, info in infos[:4])
    if kernel in kernels and (os_name is None or os_name in images):
        report.ok("kernel-vs-workers", f"kernel {kernel} matches existing workers ({detail})")
    else:
        report.warn(
            "kernel-vs-workers",
            f"kernel {kernel} ({os_name}) differs from the existing workers ({detail})",
            "a different kernel is allowed but means different driver builds; align if you can",
        )


def evaluate_containerd(site: Site, fact: ContainerdVersion, report: Report, p: Probe) -> None:
    support = support_for(site.versions.gpu_operator)
    minimum = support.containerd_min if support else (2, 0)
    if (fact.major, fact.minor) >= minimum:
        report.ok(
            "containerd-version",
            f"containerd {fact.version} (>= {minimum[0]}.{minimum[1]})",
            p.evidence(),
        )
        return
    report.fail(
        "containerd-version",
        f"containerd {fact.version} is too old: GPU Operator {site.versions.gpu_operator} requires "
        f"containerd >= {minimum[0]}.{minimum[1]}",
        "upgrade containerd to 2.x before the GPU Operator (Kubespray v2.29 ships 2.1.x: set "
        "containerd_version and run upgrade-cluster.yml --limit <node>, or install containerd 2.x "
        "from your mirror), then run this check again",
        p.evidence(),
    )


def evaluate_gpus(node: Node, pci: Lspci, report: Report, p: Probe) -> None:
    gpus = pci.nvidia_gpus()
    evidence = p.evidence(lambda line: "NVIDIA" in line)
    if len(gpus) == node.gpu_count:
        report.ok(
            "gpu-count",
            f"{len(gpus)} NVIDIA GPUs on the PCI bus (expected {node.gpu_count})",
            evidence,
        )
    elif len(gpus) < node.gpu_count:
        report.fail(
            "gpu-count",
            f"only {len(gpus)} of {node.gpu_count} expected {node.gpu_model} GPUs are on the PCI bus",
            "check the missing GPU in the BMC / hardware log, reseat or replace it, then re-run",
            evidence,
        )
    else:
        report.warn(
            "gpu-count",
            f"{len(gpus)} NVIDIA GPUs found, more than the {node.gpu_count} expected",
            "set nodes[].gpu_count to the real number",
            evidence,
        )


def evaluate_nvidia_smi(node: Node, fact: NvidiaSmiList, report: Report, p: Probe) -> None:
    count = len(fact.gpus)
    if count == node.gpu_count:
        report.ok("nvidia-smi", f"nvidia-smi -L lists {count} GPUs", p.evidence())
    else:
        report.fail(
            "nvidia-smi",
            f"nvidia-smi -L lists {count} GPUs, expected {node.gpu_count}",
            "check `nvidia-smi -q` and the driver logs (dmesg | grep -i nvrm)",
            p.evidence(),
        )


def evaluate_iommu(iommu: Iommu | None, cmdline: str, report: Report, evidence: Any) -> None:
    passthrough = re.search(r"\biommu=pt\b|\b(intel|amd)_iommu=off\b", cmdline)
    if iommu is not None and iommu.translated:
        report.warn(
            "iommu",
            "the IOMMU default domain is Translated: GPUDirect RDMA peer-to-peer traffic is "
            "remapped (slow or broken)",
            "boot with iommu=pt (or intel_iommu=off) and reboot before the GPUDirect phase",
            evidence,
        )
    elif (iommu is not None and iommu.default_domain in ("passthrough", "identity")) or passthrough:
        report.ok("iommu", "IOMMU is passthrough/off for DMA", evidence)
    else:
        report.warn(
            "iommu",
            "the IOMMU mode could not be confirmed as passthrough or off",
            "check `dmesg | grep -i iommu` and /proc/cmdline (iommu=pt)",
            evidence,
        )


def evaluate_acs(acs: LspciAcs, report: Report, p: Probe) -> None:
    enabled = [entry.slot or "?" for entry in acs.acs if entry.src_valid]
    if enabled:
        report.warn(
            "acs",
            f"ACS is enabled (SrcValid+) on {', '.join(enabled)}: peer-to-peer between GPU and "
            "NIC is forced through the root complex",
            "disable ACS in the BIOS or with setpci on the PCIe switches between GPU and NIC",
            p.evidence(lambda line: "ACSCtl" in line or bool(re.match(r"^[0-9a-f]{2}:", line))),
        )
    else:
        report.ok(
            "acs",
            "ACS is off on every bridge that reports it",
            p.evidence(lambda line: "ACSCtl" in line),
        )


def ssh_over_bond(node: Node, addrs: IpAddr, interface: str | None) -> bool:
    """Whether the interface carrying the SSH session goes down with the node's bond:
    the bond, a port, or a VLAN, macvlan or bridge stacked on it (host-r2 B4)."""
    return interface is not None and addrs.rides_on(interface, node.bond.name)


def evaluate_ssh_path(
    node: Node, server_ip: str | None, addrs: IpAddr, report: Report
) -> str | None:
    """Which interface carries the wizard's own SSH session; warn if it is the bond."""
    if server_ip is None:
        report.warn("ssh-path", "could not read SSH_CONNECTION on the node", "check the SSH server")
        return None
    iface = addrs.owner_of(server_ip)
    name = iface.name if iface else None
    over_bond = ssh_over_bond(node, addrs, name)
    if not over_bond:
        report.ok(
            "ssh-path", f"the wizard's SSH session uses {name or server_ip}, not {node.bond.name}"
        )
    elif node.oob_host:
        report.ok(
            "ssh-path",
            f"SSH runs over {node.bond.name}; the QoS phase will use the out-of-band address "
            f"{node.oob_host}",
        )
    else:
        report.warn(
            "ssh-path",
            f"the wizard's SSH session runs over {node.bond.name} ({server_ip}): the QoS phase "
            f"re-forms {node.bond.name} and would cut it",
            "set nodes[].oob_host to an address on another interface (e.g. bond0 or the BMC "
            "network) before the QoS phase",
        )
    return name


# -- steps ----------------------------------------------------------------------------------


HOST_READS = (
    Read(["cat", "/etc/os-release"], parse_os_release),
    Read(["uname", "-r"]),
    Read(["uname", "-m"]),
)


class HostFacts(Step):
    id = "preflight.host"
    title = "OS, kernel and architecture"
    kind = StepKind.CHECK
    gates = ("T00",)
    reads = ("node.os", "versions", "cluster")
    explain = (
        "The OS and version are in the supported table (RHEL 10.2 or Ubuntu 24.04 for GPU "
        "Operator 26.x), the architecture is x86_64, and the kernel/OS match the existing "
        "workers (a mismatch warns)."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return read_lines(HOST_READS)

    async def verify(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        report = Report("T00")
        os_probe, kernel_read, arch_read = await read_all(ctx, *HOST_READS)
        kernel = kernel_read.result.stdout.strip()
        arch = arch_read.result.stdout.strip()
        if not os_probe.ok:
            report.unreadable("os-release", os_probe, "the OS release")
            return report.findings
        evaluate_os(ctx.site, ctx.node, os_probe.fact, arch, report, os_probe)
        ctx.data.update(kernel=kernel, os=os_probe.fact.pretty_name)
        try:
            nodes = await ctx.shared("kube.nodes", ctx.services.kube.nodes)
        except TransportError as exc:
            report.skip("kernel-vs-workers", f"cluster not reachable for the comparison: {exc}")
        else:
            wanted = set(ctx.site.cluster.existing_workers)
            # The new nodes' names once, not per cluster node: per node that was
            # O(nodes^2), O(nodes^3) over a fleet (142 s of CPU for a 1000-node check).
            new = {x.name for x in ctx.site.nodes}
            workers = [
                n
                for n in nodes
                if (n["metadata"]["name"] in wanted if wanted else _is_worker(n))
                and n["metadata"]["name"] not in new
            ]
            evaluate_workers(ctx.node.name, kernel, os_probe.fact.pretty_name, workers, report)
        return report.findings


def _is_worker(node: dict[str, Any]) -> bool:
    labels = node["metadata"].get("labels", {})
    return "node-role.kubernetes.io/control-plane" not in labels


CONTAINERD_READ = Read(CONTAINERD_VERSION)


class Containerd(Step):
    id = "preflight.containerd"
    title = "containerd version"
    kind = StepKind.CHECK
    gates = ("T00",)
    reads = ("versions",)
    explain = (
        "GPU Operator 26.7 requires containerd >= 2.0. A node on containerd 1.7 must be "
        "upgraded first: the most important preflight failure."
    )
    hard_requirements = {
        "T00.containerd-version": (
            "GPU Operator 26.7 requires containerd >= 2.0 (its release notes): a waiver "
            "would only move the failure to the join's runtime check in phase 7"
        )
    }

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return read_lines([CONTAINERD_READ])

    async def verify(self, ctx: StepContext) -> list[Finding]:
        report = Report("T00")
        p = await probe(ctx, CONTAINERD_VERSION)
        if p.ok:
            evaluate_containerd(ctx.site, p.fact, report, p)
        elif p.result.exit_status == 127:
            report.warn(
                "containerd-version",
                "containerd is not installed yet",
                "Kubespray installs containerd when the node joins; the join phase checks the version again",
                p.evidence(),
            )
        else:
            report.unreadable("containerd-version", p, "the containerd version")
        return report.findings


GPU_READS = (
    Read(["lspci", "-nn"], parse_lspci),
    Read(
        nvidia_smi_command("-L"),
        parse_nvidia_smi_l,
        note="once a driver is present",
        expected={127: "no driver yet (the GPU Operator installs it)"},
    ),
)


class Gpus(Step):
    id = "preflight.gpus"
    title = "GPU count"
    kind = StepKind.CHECK
    gates = ("T00",)
    reads = ("node.gpu_count", "node.gpu_model")
    explain = "lspci lists the expected number of NVIDIA GPUs (8 x B300 by default)."

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return read_lines(GPU_READS)

    async def verify(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        report = Report("T00")
        p, smi = await read_all(ctx, *GPU_READS)
        if not p.ok:
            report.unreadable("gpu-count", p, "the PCI devices")
            return report.findings
        evaluate_gpus(ctx.node, p.fact, report, p)
        if smi.ok:
            evaluate_nvidia_smi(ctx.node, smi.fact, report, smi)
        return report.findings


class ClusterFacts(Step):
    id = "preflight.cluster"
    title = "Kubernetes version, Helm and existing workers"
    kind = StepKind.CHECK
    gates = ("T00",)
    scope = Scope.CLUSTER
    reads = ("cluster", "versions")
    explain = (
        "The API server is reachable with the site's kubeconfig and context, its version is "
        "within the GPU Operator's validated range (1.33-1.36 for 26.7), and helm 3.x is on the "
        "jump host."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        ctx = f" --context {q(site.cluster.context)}" if site.cluster.context else ""
        kube = f"kubectl --kubeconfig {KUBECONFIG_WORD}{ctx}"
        # The site's helm (cluster.helm), as the wizard runs it (transports/helm.py version).
        helm = helm_line(site, "version", "--short").rsplit("  # ", 1)[0]
        return [f"{kube} version", f"{kube} get nodes -o wide", helm]

    async def verify(self, ctx: StepContext) -> list[Finding]:
        report = Report("T00")
        site = ctx.site
        support = support_for(site.versions.gpu_operator)
        try:
            version = await ctx.services.kube.version()
        except TransportError as exc:
            report.fail(
                "reachable",
                f"cannot use the cluster: {exc}",
                "check cluster.kubeconfig / cluster.context and that the API server is reachable",
            )
            version = None
        if version is not None:
            minor = f"{version['major']}.{version['minor']}"
            low, high = support.kubernetes if support else ("1.33", "1.36")
            in_range = _minor(low) <= _minor(minor) <= _minor(high)
            if in_range and minor == site.cluster.kubernetes_version:
                report.ok(
                    "kubernetes-version",
                    f"Kubernetes {version['git_version']} ({low}-{high} validated)",
                )
            elif in_range:
                report.warn(
                    "kubernetes-version",
                    f"Kubernetes {version['git_version']} is validated but the site expects "
                    f"{site.cluster.kubernetes_version}",
                    "set cluster.kubernetes_version to the cluster's version",
                )
            else:
                report.fail(
                    "kubernetes-version",
                    f"Kubernetes {version['git_version']} is outside the {low}-{high} range validated "
                    f"for GPU Operator {site.versions.gpu_operator}",
                    "upgrade the cluster with Kubespray first, or pin a GPU Operator that supports it",
                )
        try:
            helm = await ctx.services.helm.version()
            report.ok("helm", f"helm {helm} on the jump host")
        except TransportError as exc:
            report.fail("helm", str(exc), "install Helm 3 on the jump host (or set cluster.helm)")
        return report.findings


class GpuDirectReadiness(Step):
    id = "preflight.gpudirect"
    title = "Early GPUDirect readiness (IOMMU, ACS, memlock)"
    kind = StepKind.CHECK
    gates = ("T11", "T12")
    explain = (
        "Warned now, enforced in the GPUDirect phase: the IOMMU default domain is not "
        "'Translated' (off or passthrough), ACS is off (no 'SrcValid+'), and the memlock "
        "limit is unlimited for RDMA."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return read_lines(EARLY_GPUDIRECT_READS)

    async def verify(self, ctx: StepContext) -> list[Finding]:
        report = Report("T11")
        dmesg, cmdline, acs, memlock_read = await read_all(ctx, *EARLY_GPUDIRECT_READS)
        evidence = dmesg.evidence(lambda line: bool(_IOMMU.search(line)))
        evaluate_iommu(dmesg.fact, cmdline.result.stdout, report, evidence)
        if acs.ok:
            evaluate_acs(acs.fact, report, acs)
        else:
            report.unreadable("acs", acs, "ACS control")
        memlock = memlock_read.result.stdout.strip()
        if memlock == "unlimited":
            report.ok("memlock", "memlock limit is unlimited")
        else:
            report.warn(
                "memlock",
                f"memlock limit is {memlock or 'unknown'} KiB: RDMA memory registration may fail",
                "set LimitMEMLOCK=infinity for containerd/kubelet and pods use IPC_LOCK",
            )
        return report.findings


_IOMMU = re.compile(r"iommu|dmar|amd-vi", re.IGNORECASE)
# Shared with the GPUDirect phase, which enforces what preflight only warns about.
IOMMU_READ = Read(
    ["dmesg"],
    parse_iommu,
    keep=lambda line: bool(_IOMMU.search(line)),
    note="lines matching iommu|dmar",
)
ACS_READ = Read(["lspci", "-vvv"], parse_lspci_acs, note="ACSCtl")
EARLY_GPUDIRECT_READS = (IOMMU_READ, Read(["cat", "/proc/cmdline"]), ACS_READ, Read("ulimit -l"))


# The SSH session's own addresses, and the host's interfaces (qos.apply reads them too).
SSH_PATH_READS = (Read("echo $SSH_CONNECTION"), Read(["ip", "-j", "addr", "show"], parse_ip_addr))


class SshPath(Step):
    id = "preflight.ssh-path"
    title = "Interface carrying the SSH session"
    kind = StepKind.CHECK
    gates = ("T10",)
    reads = ("node.host", "node.oob_host", "node.bond")
    explain = (
        "Records which interface carries the wizard's own SSH session. The QoS phase "
        "re-forms the bond and must never cut its own path: if SSH runs over the bond, "
        "an out-of-band address (oob_host) is needed for that phase."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return read_lines(SSH_PATH_READS)

    async def verify(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        report = Report("T10")
        connection_read, addrs = await read_all(ctx, *SSH_PATH_READS)
        connection = connection_read.result.stdout.split()
        server_ip = connection[2] if len(connection) >= 4 else None
        if not addrs.ok:
            report.unreadable("ssh-path", addrs, "the interface addresses")
            return report.findings
        ctx.data["ssh_interface"] = evaluate_ssh_path(ctx.node, server_ip, addrs.fact, report)
        return report.findings


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor.rstrip("+"))


PHASE = Phase(
    read_only=True,
    id="preflight",
    number=1,
    title="Preflight",
    summary="Read-only checks of the GPU node and the cluster; nothing changes.",
    steps=(HostFacts(), Containerd(), Gpus(), ClusterFacts(), GpuDirectReadiness(), SshPath()),
)
