"""Phase 8, GPU Operator 26.7 through Helm (T01)."""

from __future__ import annotations

from steps.common import q
from wizard.artifacts import Artifact, Target, render
from wizard.model import StepKind
from wizard.plan import Phase, Scope, Step
from wizard.site import Node, Site

NAMESPACE = "gpu-operator"
RELEASE = "gpu-operator"
VALUES_PATH = "cluster/helm/gpu-operator-values.yaml"


def helm_command(site: Site) -> str:
    ctx = f" --kube-context {q(site.cluster.context)}" if site.cluster.context else ""
    return (
        f"helm upgrade --install {RELEASE} nvidia/gpu-operator --namespace {NAMESPACE} "
        f"--create-namespace --version {q(site.versions.gpu_operator)} "
        f"--values gpu-operator-values.yaml --wait --timeout 20m{ctx}"
    )


class InstallGpuOperator(Step):
    id = "gpu-operator.install"
    title = "GPU Operator release"
    kind = StepKind.APPLY
    gates = ("T01",)
    scope = Scope.CLUSTER
    reads = ("versions", "registry", "cluster")
    explain = (
        "The chart version is pinned; driver.kernelModuleType is open (DMA-BUF GPUDirect), "
        "driver.rdma.enabled is false (legacy peermem), the bundled NFD is the only NFD, and "
        "images come from the site's mirror. Desired values are diffed against "
        "`helm get values` before `helm upgrade --install --wait`."
    )

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        return [
            Artifact(
                VALUES_PATH,
                render("helm/gpu-operator-values.yaml.j2", versions=site.versions),
                Target.HELM_VALUES,
                f"helm release {NAMESPACE}/{RELEASE}",
                "GPU Operator chart values",
            )
        ]

    def commands(self, site: Site, node: Node | None) -> list[str]:
        ctx = f" --kube-context {q(site.cluster.context)}" if site.cluster.context else ""
        return [
            f"helm get values {RELEASE} --namespace {NAMESPACE} -o yaml{ctx}",
            helm_command(site),
        ]


class VerifyGpuOperator(Step):
    id = "gpu-operator.verify"
    title = "GPU Operator pods, allocatable GPUs and a test pod"
    kind = StepKind.CHECK
    gates = ("T01",)
    requires = ("gpu-operator.install",)
    reads = ("node.gpu_count",)
    explain = (
        "Every pod in gpu-operator is Running with containers ready or Completed; node "
        "allocatable nvidia.com/gpu equals the expected count; a test pod requesting one GPU "
        "runs nvidia-smi -L and lists them. The validator alone is not proof."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        name = q(node.name) if node else "<node>"
        return [
            f"kubectl get pods -n {NAMESPACE} -o wide",
            f"kubectl describe node {name}  # Capacity / Allocatable nvidia.com/gpu",
            "kubectl logs <gpu-test-pod>  # nvidia-smi -L",
        ]


PHASE = Phase(
    id="gpu-operator",
    number=8,
    title="GPU Operator 26.7",
    summary="Install the pinned GPU Operator with Helm and prove the GPUs are schedulable.",
    steps=(InstallGpuOperator(), VerifyGpuOperator()),
)
