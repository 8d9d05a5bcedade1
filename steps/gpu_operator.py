"""Phase 8, GPU Operator 26.7 through Helm (T01).

The values are built as data from the site (every key exists in the pinned chart's
values.yaml; a test checks against the reference file), diffed against ``helm get values``
of the deployed release, and installed with ``helm upgrade --install --wait``.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from steps.common import node_pod, q, shown
from wizard.artifacts import Artifact, Target, k8s_object, render
from wizard.facts import ParseError, parse
from wizard.model import Finding, StepKind
from wizard.plan import Change, Phase, Scope, Step, StepContext
from wizard.probe import Report
from wizard.site import Node, Site
from wizard.transports.helm import get_values_args, helm_argv

NAMESPACE = "gpu-operator"
RELEASE = "gpu-operator"
CHART = "nvidia/gpu-operator"
VALUES_PATH = "cluster/helm/gpu-operator-values.yaml"
SERVICE_MONITOR_CRD = "servicemonitors.monitoring.coreos.com"
NFD_SUBCHART = "node-feature-discovery"


@dataclass(frozen=True)
class Image:
    """One image the chart deploys for container workloads (values key, repo, image, tag)."""

    values_key: str  # dotted path of the component in values.yaml ("" for the NFD subchart)
    repository: str
    image: str
    tag: str  # "{app}" = the chart's appVersion; "{os}" = the node OS suffix of the driver


# The images GPU Operator v26.7.0 deploys for container (non-sandbox) workloads, read from
# its values.yaml (tests/test_k8s_phases.py checks every row against the reference file).
IMAGES_V26_7_0 = (
    Image("operator", "nvcr.io/nvidia", "gpu-operator", "{app}"),
    Image("validator", "nvcr.io/nvidia", "gpu-operator", "{app}"),
    Image("driver", "nvcr.io/nvidia", "driver", "595.91.07-{os}"),
    Image("driver.manager", "nvcr.io/nvidia/cloud-native", "k8s-driver-manager", "v0.12.0"),
    Image("toolkit", "nvcr.io/nvidia/k8s", "container-toolkit", "v1.20.0"),
    Image("devicePlugin", "nvcr.io/nvidia", "k8s-device-plugin", "v0.20.0"),
    Image("gfd", "nvcr.io/nvidia", "k8s-device-plugin", "v0.20.0"),
    Image("dcgmExporter", "nvcr.io/nvidia/k8s", "dcgm-exporter", "4.6.0-4.8.3-distroless"),
    Image("migManager", "nvcr.io/nvidia/cloud-native", "k8s-mig-manager", "v0.15.0"),
    Image("", "registry.k8s.io/nfd", "node-feature-discovery", "v0.19.0"),
)
# Components whose values have an imagePullSecrets key in v26.7.0 (dcgmExporter has none).
_SECRET_KEYS = ("operator", "validator", "driver", "toolkit", "devicePlugin", "gfd", "migManager")


def mirrored(repository: str, mirror: str | None) -> str:
    """``nvcr.io/nvidia/k8s`` behind mirror ``nexus:8443/m`` is ``nexus:8443/m/nvidia/k8s``."""
    if not mirror:
        return repository
    path = repository.split("/", 1)[1] if "/" in repository else ""
    return f"{mirror.rstrip('/')}/{path}" if path else mirror


def os_tag(node: Node) -> str:
    """The driver image's OS suffix for a node profile (``rhel10.2``, ``ubuntu24.04``)."""
    name, _, version = node.os.partition("-")
    return f"{name}{version}"


def _set(values: dict[str, Any], dotted: str, value: Any) -> None:
    node = values
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def build_values(site: Site, *, prometheus_crds: bool) -> dict[str, Any]:
    """The chart values the wizard sets (every key exists in the chart's values.yaml)."""
    versions = site.versions
    values: dict[str, Any] = {
        "nfd": {"enabled": True},
        "cdi": {"enabled": versions.cdi},
        "driver": {
            "version": versions.driver,
            "kernelModuleType": versions.kernel_module_type,
            "rdma": {"enabled": False},
            "nvidiaDriverCRD": {
                "enabled": versions.nvidia_driver_crd,
                "deployDefaultCR": not versions.nvidia_driver_crd,
            },
        },
        "dcgmExporter": {"serviceMonitor": {"enabled": prometheus_crds}},
    }
    mirror = site.registry.mirror
    secrets = [site.registry.pull_secret] if site.registry.pull_secret else []
    for image in IMAGES_V26_7_0:
        if not image.values_key:
            continue
        if mirror:
            _set(values, f"{image.values_key}.repository", mirrored(image.repository, mirror))
        if secrets and image.values_key in _SECRET_KEYS:
            _set(values, f"{image.values_key}.imagePullSecrets", list(secrets))
    if mirror:
        nfd = next(i for i in IMAGES_V26_7_0 if not i.values_key)
        values[NFD_SUBCHART] = {
            "image": {"repository": f"{mirrored(nfd.repository, mirror)}/{nfd.image}"}
        }
        if secrets:
            values[NFD_SUBCHART]["imagePullSecrets"] = [{"name": s} for s in secrets]
    env = []
    if site.cluster.containerd_config:
        env.append({"name": "CONTAINERD_CONFIG", "value": site.cluster.containerd_config})
    if site.cluster.containerd_socket:
        env.append({"name": "CONTAINERD_SOCKET", "value": site.cluster.containerd_socket})
    if env:
        _set(values, "toolkit.env", env)
    return values


def values_yaml(site: Site, *, prometheus_crds: bool) -> str:
    return yaml.safe_dump(build_values(site, prometheus_crds=prometheus_crds), sort_keys=True)


def nvidia_driver_resource(site: Site) -> dict[str, Any]:
    """An NVIDIADriver selecting the site's GPU nodes (when the CRD manages the driver)."""
    spec: dict[str, Any] = {
        "driverType": "gpu",
        "usePrecompiled": False,
        "repository": mirrored("nvcr.io/nvidia", site.registry.mirror),
        "image": "driver",
        "version": site.versions.driver,
        "imagePullPolicy": "IfNotPresent",
        "imagePullSecrets": [site.registry.pull_secret] if site.registry.pull_secret else [],
        "nodeSelector": dict(site.labels),
    }
    return {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": f"{site.name}-b300"},
        "spec": spec,
    }


def image_list(site: Site) -> list[str]:
    """Every image:tag to mirror for this chart version and the site's node OS profiles."""
    app = site.versions.gpu_operator
    tags: set[str] = set()
    for image in IMAGES_V26_7_0:
        oses = sorted({os_tag(n) for n in site.nodes}) if "{os}" in image.tag else [""]
        for os_name in oses:
            tag = image.tag.replace("{app}", app).replace("{os}", os_name)
            tags.add(f"{image.repository}/{image.image}:{tag}")
    return sorted(tags)


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
            Artifact(
                "cluster/mirror/images.txt",
                "".join(f"{image}\n" for image in image_list(site)),
                Target.DOCUMENT,
                "the site's registry mirror",
                f"every image GPU Operator {site.versions.gpu_operator} deploys here",
            ),
            Artifact(
                "cluster/mirror/copy-images.sh",
                render(
                    "helm/copy-images.sh.j2",
                    images=image_list(site),
                    mirror=site.registry.mirror,
                    mirrored=mirrored,
                ),
                Target.SCRIPT,
                "run on a host that reaches both registries",
                "skopeo copy of every image into the mirror",
                mode=0o755,
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
