"""The GPU Operator steps: preflight, the Helm release, and the proof that GPUs schedule.

The values come from ``steps.gpu_operator.values``; the release is diffed against
``helm get values`` of the deployed release and installed with ``helm upgrade --install``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml

from steps.common import node_pod, q, shown
from steps.gpu_operator.values import (
    CHART,
    NAMESPACE,
    RELEASE,
    SERVICE_MONITOR_CRD,
    VALUES_PATH,
    mirrored,
    nvidia_driver_resource,
    values_yaml,
)
from wizard.artifacts import Artifact, Target, k8s_object, render
from wizard.facts import ParseError, parse
from wizard.model import Finding, StepKind
from wizard.plan import Change, Phase, Scope, Step, StepContext
from wizard.probe import Report
from wizard.site import Node, Site
from wizard.transports.helm import get_values_args, helm_argv


def upgrade_args(site: Site, values_file: str) -> list[str]:
    """``helm upgrade --install`` of the pinned chart with the rendered values, waiting."""
    return [
        "upgrade",
        "--install",
        RELEASE,
        CHART,
        "--namespace",
        NAMESPACE,
        "--create-namespace",
        "--version",
        site.versions.gpu_operator,
        "--values",
        values_file,
        "--wait",
        "--timeout",
        "20m",
    ]


def helm_line(site: Site, *args: str) -> str:
    """A helm command as the runbook shows it: the site's helm binary and cluster, as written
    in the site file (the wizard resolves them relative to it)."""
    c = site.cluster
    return shown(helm_argv(c.helm, c.kubeconfig, c.context, *args), "from the jump host")


def helm_command(site: Site) -> str:
    return helm_line(site, *upgrade_args(site, VALUES_PATH))


class OperatorPreflight(Step):
    id = "gpu-operator.preflight"
    title = "Cluster ready for the GPU Operator (one NFD, monitoring CRDs, NIC profile)"
    kind = StepKind.CHECK
    gates = ("T01",)
    scope = Scope.CLUSTER
    reads = ("versions", "nic")
    explain = (
        "Exactly one NFD: the GPU Operator's bundled one; a node-feature-discovery already "
        "running elsewhere fails the check (never two). The Prometheus Operator CRDs decide "
        "dcgmExporter.serviceMonitor. For an E810 the Network Operator is not installed: its "
        "NICs are ConnectX/BlueField only and its DOCA-OFED driver must never target an E810."
    )

    async def verify(self, ctx: StepContext) -> list[Finding]:
        report = Report("T01")
        kube = ctx.services.kube
        foreign = [
            f"{d['metadata']['namespace']}/{d['metadata']['name']}"
            for d in await kube.daemonsets()
            if "node-feature-discovery" in d["metadata"]["name"]
            and d["metadata"]["namespace"] != NAMESPACE
        ]
        if foreign:
            report.fail(
                "single-nfd",
                f"another NFD already runs: {', '.join(foreign)}; the GPU Operator would add a second",
                "remove that NFD (or set nfd.enabled=false deliberately and accept its labels); never run two",
            )
        else:
            report.ok("single-nfd", "no other node-feature-discovery in the cluster")
        crds = await kube.crd_names()
        ctx.data["prometheus_crds"] = SERVICE_MONITOR_CRD in crds
        report.ok(
            "service-monitor",
            "Prometheus Operator CRDs present: dcgm-exporter ServiceMonitor on"
            if ctx.data["prometheus_crds"]
            else "no Prometheus Operator CRDs: dcgm-exporter ServiceMonitor off (it would fail)",
        )
        if ctx.site.nic.profile == "intel-e810":
            report.ok(
                "network-operator",
                "NIC profile intel-e810: no Network Operator, Multus or RDMA CNI (ConnectX/BlueField "
                "only; DOCA-OFED must never target an E810); the shared RDMA device plugin is used",
            )
        return report.findings


class InstallGpuOperator(Step):
    id = "gpu-operator.install"
    title = "GPU Operator release"
    kind = StepKind.APPLY
    gates = ("T01",)
    scope = Scope.CLUSTER
    requires = ("gpu-operator.preflight",)
    reads = ("versions", "registry", "cluster")
    explain = (
        "The chart version is pinned; driver.kernelModuleType is open (DMA-BUF GPUDirect), "
        "driver.rdma.enabled is false (legacy peermem), the bundled NFD is the only NFD, and "
        "every image comes from the site's mirror with its pull secret. Desired values are "
        "diffed against `helm get values` before `helm upgrade --install --wait`."
    )

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        files = [
            Artifact(
                VALUES_PATH,
                render(
                    "helm/gpu-operator-values.yaml.j2",
                    site=site,
                    values=values_yaml(site, prometheus_crds=False),
                    dry_run=True,
                ),
                Target.HELM_VALUES,
                f"helm release {NAMESPACE}/{RELEASE}",
                "GPU Operator chart values",
            ),
        ]
        if site.versions.nvidia_driver_crd:
            files.append(
                k8s_object(
                    "cluster/k8s/nvidiadriver.yaml",
                    nvidia_driver_resource(site),
                    "NVIDIADriver (cluster scope)",
                    "the driver for the GPU nodes, managed by the NVIDIADriver CRD",
                )
            )
        return files

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return [helm_line(site, *get_values_args(RELEASE, NAMESPACE)), helm_command(site)]

    def _desired(self, ctx: StepContext) -> Artifact:
        prometheus = bool(ctx.recorded("gpu-operator.preflight").get("prometheus_crds", False))
        return Artifact(
            VALUES_PATH,
            values_yaml(ctx.site, prometheus_crds=prometheus),
            Target.HELM_VALUES,
            f"helm release {NAMESPACE}/{RELEASE}",
            "GPU Operator chart values",
        )

    async def changes(self, ctx: StepContext) -> list[Change]:
        live = await ctx.services.helm.get_values(RELEASE, NAMESPACE)
        current = None if live is None else yaml.safe_dump(live, sort_keys=True)
        return [Change(self._desired(ctx), current)]

    async def apply(self, ctx: StepContext, changes: list[Change]) -> None:
        helm = ctx.services.helm
        with tempfile.TemporaryDirectory(prefix="gnw-helm-") as tmp:
            values_file = Path(tmp) / "gpu-operator-values.yaml"
            values_file.write_text(self._desired(ctx).content)
            values_file.chmod(0o600)
            result = await helm.run(
                *upgrade_args(ctx.site, str(values_file)),
                on_line=lambda stream, line: ctx.engine.emit(_output(line, stream)),
            )
        ctx.engine.journal(
            {
                "target": "helm",
                "step": self.id,
                "command": result.command,
                "exit": result.exit_status,
                "stdout": result.stdout,
                "stderr": result.stderr,
            }
        )
        if result.exit_status != 0:
            from wizard.transports.base import CommandFailedError

            raise CommandFailedError(result)

    async def verify(self, ctx: StepContext) -> list[Finding]:
        report = Report("T01")
        live = await ctx.services.helm.get_values(RELEASE, NAMESPACE)
        desired = yaml.safe_load(self._desired(ctx).content)
        if live is None:
            report.fail(
                "release", f"release {NAMESPACE}/{RELEASE} is not installed", "apply this step"
            )
        elif live == desired:
            report.ok("release", f"release {NAMESPACE}/{RELEASE} has the wizard's values")
        else:
            report.fail(
                "release",
                f"release {NAMESPACE}/{RELEASE} values differ from the site's",
                "review the diff and apply this step again",
            )
        return report.findings


def _output(line: str, stream: str):
    from wizard.events import OutputLine

    return OutputLine("helm", line, stream)


def evaluate_pods(pods: list[dict[str, Any]], report: Report) -> None:
    """Every pod Running with all containers ready, or Completed; name the broken ones."""
    broken = []
    for pod in pods:
        phase = pod.get("status", {}).get("phase")
        statuses = pod.get("status", {}).get("containerStatuses") or []
        if phase == "Succeeded":
            continue
        ready = phase == "Running" and statuses and all(s.get("ready") for s in statuses)
        if not ready:
            restarts = sum(s.get("restartCount", 0) for s in statuses)
            waiting = [
                s.get("state", {}).get("waiting", {}).get("reason")
                for s in statuses
                if s.get("state", {}).get("waiting")
            ]
            state = waiting[0] if waiting else phase
            broken.append(f"{pod['metadata']['name']} ({state}, {restarts} restarts)")
    if not pods:
        report.fail(
            "pods", f"no pods in {NAMESPACE}", "check the helm release and the operator logs"
        )
    elif broken:
        report.fail(
            "pods",
            f"{len(broken)} of {len(pods)} pods in {NAMESPACE} are not healthy: {', '.join(broken)}",
            f"kubectl -n {NAMESPACE} describe pod <name> and kubectl logs --previous; fix the cause "
            "(image pull from the mirror, driver build, containerd config)",
        )
    else:
        report.ok("pods", f"all {len(pods)} pods in {NAMESPACE} are Running or Completed")


def gpu_test_pod(site: Site, node: Node) -> dict[str, Any]:
    """A pod asking for every GPU of the node that runs nvidia-smi -L (and tolerates the taint)."""
    image = f"{mirrored('nvcr.io/nvidia', site.registry.mirror)}/cuda:12.9.1-base-ubi9"
    container = {
        "name": "nvidia-smi",
        "image": image,
        "command": ["nvidia-smi", "-L"],
        "resources": {"limits": {"nvidia.com/gpu": node.gpu_count}},
    }
    return node_pod(site, node, f"gnw-gpu-test-{node.name}", NAMESPACE, container)


async def run_test_pod(
    ctx: StepContext, pod: dict[str, Any], *, timeout: float = 300
) -> tuple[str | None, str]:
    """Create the pod, wait for it to finish, return (logs, phase); the pod is removed after."""
    import asyncio
    import time

    kube = ctx.services.kube
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    await kube.delete_pod(namespace, name)
    await kube.create_pod(namespace, pod)
    deadline = time.monotonic() + timeout
    phase = "Pending"
    try:
        while time.monotonic() < deadline:
            live = await kube.pod(namespace, name)
            phase = (live or {}).get("status", {}).get("phase", "Pending")
            if phase in ("Succeeded", "Failed"):
                return await kube.pod_log(namespace, name), phase
            await asyncio.sleep(1)
        return None, f"still {phase} after {timeout:g}s"
    finally:
        await kube.delete_pod(namespace, name)


class VerifyGpuOperator(Step):
    id = "gpu-operator.verify"
    title = "GPU Operator pods, allocatable GPUs and a test pod"
    kind = StepKind.CHECK
    gates = ("T01",)
    requires = ("gpu-operator.install",)
    reads = ("node.gpu_count", "taint", "registry")
    explain = (
        "Every pod in gpu-operator is Running with containers ready or Completed; node "
        "allocatable nvidia.com/gpu equals the expected count; a test pod requesting the node's "
        "GPUs runs nvidia-smi -L and lists them. The validator alone is not proof."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        name = q(node.name) if node else "<node>"
        return [
            f"kubectl get pods -n {NAMESPACE} -o wide",
            f"kubectl get node {name} -o jsonpath='{{.status.allocatable}}'  # nvidia.com/gpu",
            f"kubectl -n {NAMESPACE} apply -f gpu-test-pod.yaml && kubectl -n {NAMESPACE} logs gnw-gpu-test-{name}",
        ]

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        if node is None:
            return []
        return [
            k8s_object(
                f"nodes/{node.name}/k8s/gpu-test-pod.yaml",
                gpu_test_pod(site, node),
                f"Pod {NAMESPACE}/gnw-gpu-test-{node.name}",
                "runs nvidia-smi -L on every GPU of the node",
            )
        ]

    async def verify(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        report = Report("T01")
        kube = ctx.services.kube
        pods = await kube.pods(NAMESPACE)
        evaluate_pods(pods, report)
        node = await kube.node(ctx.node.name) or {}
        allocatable = node.get("status", {}).get("allocatable", {}).get("nvidia.com/gpu")
        if allocatable == str(ctx.node.gpu_count):
            report.ok("allocatable", f"{ctx.node.name} allocatable nvidia.com/gpu = {allocatable}")
        else:
            report.fail(
                "allocatable",
                f"{ctx.node.name} allocatable nvidia.com/gpu = {allocatable or 'absent'}, "
                f"expected {ctx.node.gpu_count}",
                "check the device plugin pod on the node and `nvidia-smi` in the driver pod",
            )
            return report.findings
        logs, phase = await run_test_pod(ctx, gpu_test_pod(ctx.site, ctx.node))
        if logs is None:
            report.fail(
                "test-pod",
                f"the nvidia-smi test pod did not finish: {phase}",
                "kubectl describe the pod",
            )
            return report.findings
        try:
            listed = len(parse("nvidia-smi-l", logs).gpus)
        except ParseError as exc:
            report.fail(
                "test-pod",
                f"the test pod ({phase}) printed no GPU list: {exc.reason}",
                "read its logs",
            )
            return report.findings
        if listed == ctx.node.gpu_count:
            report.ok("test-pod", f"a pod on {ctx.node.name} sees {listed} GPUs with nvidia-smi -L")
        else:
            report.fail(
                "test-pod",
                f"the test pod sees {listed} GPUs, expected {ctx.node.gpu_count}",
                "check the driver pod logs and `nvidia-smi -q` on the node",
            )
        return report.findings


PHASE = Phase(
    id="gpu-operator",
    number=8,
    title="GPU Operator 26.7",
    summary="Install the pinned GPU Operator with Helm and prove the GPUs are schedulable.",
    steps=(OperatorPreflight(), InstallGpuOperator(), VerifyGpuOperator()),
)
