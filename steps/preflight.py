"""Phase 1, preflight: what the host and the cluster are, before anything changes (T00)."""

from __future__ import annotations

from steps.common import q
from wizard.model import StepKind
from wizard.plan import Phase, Scope, Step
from wizard.site import Node, Site


class HostFacts(Step):
    id = "preflight.host"
    title = "OS, kernel and architecture"
    kind = StepKind.CHECK
    gates = ("T00",)
    reads = ("node.os",)
    explain = (
        "The OS and version are in the supported table (RHEL 10.2 or Ubuntu 24.04 for GPU "
        "Operator 26.x), the architecture is x86_64, and the kernel/OS match the existing "
        "workers (a mismatch warns)."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return ["cat /etc/os-release", "uname -r", "uname -m", "hostnamectl", "lscpu", "free -h"]


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

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return ["containerd --version"]


class Gpus(Step):
    id = "preflight.gpus"
    title = "GPU count"
    kind = StepKind.CHECK
    gates = ("T00",)
    reads = ("node.gpu_count", "node.gpu_model")
    explain = "lspci lists the expected number of NVIDIA GPUs (8 x B300 by default)."

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return ["lspci -nn", "nvidia-smi -L  # only once a driver is present"]


class ClusterFacts(Step):
    id = "preflight.cluster"
    title = "Kubernetes version, Helm and existing workers"
    kind = StepKind.CHECK
    gates = ("T00",)
    scope = Scope.CLUSTER
    reads = ("cluster", "versions")
    explain = (
        "The API server is reachable with the site's kubeconfig and context, its version is "
        "within the GPU Operator's validated range (1.32-1.36 for 26.x), helm 3.x is on the "
        "jump host, and the existing workers' kernel/OS are recorded for comparison."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        ctx = f" --context {q(site.cluster.context)}" if site.cluster.context else ""
        kube = f"kubectl --kubeconfig {q(site.cluster.kubeconfig)}{ctx}"
        helm_ctx = f" --kube-context {q(site.cluster.context)}" if site.cluster.context else ""
        return [f"{kube} version", f"{kube} get nodes -o wide", f"helm version{helm_ctx}"]


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
        return [
            "dmesg | grep -i -E 'iommu|dmar|default domain'",
            "lspci -vvv | grep -E '^[0-9a-f]|ACSCtl'",
            "ulimit -l",
        ]


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
        return ["echo $SSH_CONNECTION", "ip -j addr show", "ip -j route show"]


PHASE = Phase(
    id="preflight",
    number=1,
    title="Preflight",
    summary="Read-only checks of the GPU node and the cluster; nothing changes.",
    steps=(HostFacts(), Containerd(), Gpus(), ClusterFacts(), GpuDirectReadiness(), SshPath()),
)
