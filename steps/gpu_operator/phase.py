"""The GPU Operator steps: preflight, the Helm release, and the proof that GPUs schedule.

The values come from ``steps.gpu_operator.values``; the release is diffed against
``helm get values`` of the deployed release and installed with ``helm upgrade --install``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import yaml

from steps.common import NAMESPACE_WORD, finished_then_logs, node_pod, q, shown
from steps.gpu_operator.dcgm import check_dcgm
from steps.gpu_operator.dcgm import read_command as dcgm_read_command
from steps.gpu_operator.install import PROMETHEUS_CRDS, InstallGpuOperator, helm_line
from steps.gpu_operator.release import (
    OPERAND_DAEMONSETS,
    OPERATOR_RELEASE,
    belongs_to,
    nfd_workers,
    operator_release,
    read_state,
)
from steps.gpu_operator.runbook import discovery_line
from steps.gpu_operator.runtime import config_path, evaluate_runtime
from steps.gpu_operator.runtime import read_lines as runtime_read_lines
from steps.gpu_operator.values import SERVICE_MONITOR_CRD, mirrored
from steps.join import TOOLKIT_DROP_IN
from steps.pull_secrets import PullSecrets
from steps.remote import site_path
from wizard.artifacts import Artifact, k8s_object
from wizard.facts import ParseError, parse
from wizard.facts.gpu import parse_nvidia_smi_l
from wizard.model import Finding, StepKind
from wizard.plan import Phase, Scope, Step, StepContext
from wizard.probe import Report
from wizard.site import Node, Site
from wizard.transports.helm import LIST_ARGS

# The API group of NFD's own resources (NodeFeature, NodeFeatureRule, NodeFeatureGroup in the
# NFD chart's crds/nfd-api-crds.yaml; NodeFeatureDiscovery is the NFD Operator's).
NFD_API_GROUP = "nfd.k8s-sigs.io"


def chart_check_args(site: Site) -> list[str]:
    return [
        "show",
        "chart",
        site.registry.gpu_operator_chart,
        "--version",
        site.versions.gpu_operator,
    ]


# NVIDIA's Helm repository (the GPU Operator's install guide: `helm repo add nvidia
# https://helm.ngc.nvidia.com/nvidia && helm repo update`).
NVIDIA_HELM_REPO = ("nvidia", "https://helm.ngc.nvidia.com/nvidia")


def chart_source_lines(site: Site) -> list[str]:
    """Where the jump host's helm gets registry.gpu_operator_chart, as runbook lines: NVIDIA's
    repository added by name (no --force-update: a repository of that name with another URL
    stops here rather than being replaced), unless the jump host's helm has a repository of
    that name already (`helm repo list`: an air gap's mirror under the same name is kept);
    a mirror's repository by the URL the operator fills in; an OCI reference needs no
    repository."""
    chart = site.registry.gpu_operator_chart
    if chart.startswith("oci://"):
        return []
    repo = chart.split("/", 1)[0]
    if repo == NVIDIA_HELM_REPO[0]:
        url, note = NVIDIA_HELM_REPO[1], "from the jump host; the chart's repository"
    else:
        url = "<chart-repository-url>"
        note = (
            f"from the jump host; fill in your mirror's URL of NVIDIA's repository "
            f"(its admin or `helm repo list` on a host that has {repo})"
        )
    c = site.cluster
    helm = shown([c.helm if "/" not in c.helm else site_path(site, c.helm)])
    known = f"{helm} repo list 2>/dev/null | awk '{{print $1}}' | grep -qx {q(repo)}"
    add = f"{helm} {shown(['repo', 'add', repo, url])}"
    return [f"{known} || {add}  # {note}", f"{helm} repo update {q(repo)}  # from the jump host"]


async def check_chart(ctx: StepContext, report: Report) -> None:
    """The chart reference resolves to the GPU Operator chart at the pinned version: an air
    gap's helm has no NVIDIA repository, and a wrong reference would otherwise fail only in
    the middle of the install."""
    site = ctx.site
    chart, version = site.registry.gpu_operator_chart, site.versions.gpu_operator
    result = await ctx.services.helm.run(*chart_check_args(site), timeout=120)
    try:
        meta = yaml.safe_load(result.stdout) if result.exit_status == 0 else None
    except yaml.YAMLError:
        meta = None
    if not isinstance(meta, dict):
        problem = (result.stderr.strip() or result.stdout.strip() or "no output")[:300]
        report.fail(
            "chart",
            f"helm cannot find chart {chart} version {version}: {problem}",
            "set registry.gpu_operator_chart to where this jump host's helm finds the chart "
            "(`helm repo add nvidia https://helm.ngc.nvidia.com/nvidia`, your mirror's "
            "repository, or oci://...), then `helm repo update`",
        )
    elif meta.get("name") != "gpu-operator" or str(meta.get("version")) != version:
        report.fail(
            "chart",
            f"{chart} --version {version} is chart {meta.get('name')} {meta.get('version')}, "
            f"not gpu-operator {version}",
            "point registry.gpu_operator_chart at the GPU Operator chart",
        )
    else:
        report.ok("chart", f"chart {chart} {version} found (appVersion {meta.get('appVersion')})")


class OperatorPreflight(Step):
    id = "gpu-operator.preflight"
    title = "Cluster ready for the GPU Operator (one NFD, monitoring CRDs, NIC profile)"
    provides = (PROMETHEUS_CRDS, OPERATOR_RELEASE)
    kind = StepKind.CHECK
    gates = ("T01",)
    scope = Scope.CLUSTER
    reads = ("versions", "nic", "registry")
    explain = (
        "The chart (registry.gpu_operator_chart) at the pinned version is where helm finds it "
        "(`helm show chart`), before anything is decided. Exactly one NFD: the GPU Operator's "
        "bundled one; a node-feature-discovery already "
        "running elsewhere fails the check (never two). The Prometheus Operator CRDs decide "
        "dcgmExporter.serviceMonitor. For an E810 the Network Operator is not installed: its "
        "NICs are ConnectX/BlueField only and its DOCA-OFED driver must never target an E810."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return [
            *chart_source_lines(site),
            helm_line(site, *chart_check_args(site)) + "; the chart helm will install",
            discovery_line(helm_line(site, *LIST_ARGS, note="")),
            "kubectl get daemonsets -A -o wide  # from the jump host; any nfd-worker, any name",
            "kubectl get crd -o name | grep -e nfd.k8s-sigs.io -e monitoring.coreos.com "
            "|| echo 'no NFD or Prometheus Operator CRD'  # from the jump host",
        ]

    async def verify(self, ctx: StepContext) -> list[Finding]:
        report = Report("T01")
        kube = ctx.services.kube
        await check_chart(ctx, report)
        state = await read_state(ctx)
        crds = await kube.crd_names()
        # Any NFD worker, under any name and in any namespace, that is not the GPU
        # Operator release's own bundled one; the NFD API's CRDs show an NFD too.
        foreign = [
            f"{d['metadata']['namespace']}/{d['metadata']['name']}"
            for d in nfd_workers(await kube.daemonsets())
            if not belongs_to(d, state, any_release=True)
        ]
        nfd_crds = sorted(c for c in crds if c.endswith("." + NFD_API_GROUP))
        operator_crds = [c for c in nfd_crds if c.startswith("nodefeaturediscoveries.")]
        if foreign or operator_crds:
            what = ", ".join(foreign) or f"the NFD Operator ({', '.join(operator_crds)})"
            report.fail(
                "single-nfd",
                f"another NFD already runs: {what}; the GPU Operator would add a second and "
                "the two fight over node labels",
                "remove that NFD (or set nfd.enabled=false deliberately and accept its labels); "
                "never run two",
            )
        elif nfd_crds and not state.installed:
            report.warn(
                "single-nfd",
                f"NFD's CRDs are present ({', '.join(nfd_crds)}) but no NFD worker runs and no "
                "GPU Operator release owns them: an NFD was installed before (Helm keeps CRDs)",
                "check that no NFD is meant to run here; the GPU Operator's NFD reuses the CRDs",
            )
        elif state.installed:
            report.ok("single-nfd", f"the only NFD is the one of the GPU Operator {state.label}")
        else:
            report.ok("single-nfd", "no other node-feature-discovery in the cluster")
        ctx.provide(PROMETHEUS_CRDS, SERVICE_MONITOR_CRD in crds)
        ctx.provide(OPERATOR_RELEASE, state.release.as_result())
        report.ok(
            "service-monitor",
            "Prometheus Operator CRDs present: dcgm-exporter ServiceMonitor on"
            if SERVICE_MONITOR_CRD in crds
            else "no Prometheus Operator CRDs: dcgm-exporter ServiceMonitor off (it would fail)",
        )
        if ctx.site.nic.profile == "intel-e810":
            report.ok(
                "network-operator",
                "NIC profile intel-e810: no Network Operator, Multus or RDMA CNI (ConnectX/BlueField "
                "only; DOCA-OFED must never target an E810); the shared RDMA device plugin is used",
            )
        return report.findings


# `helm upgrade --wait` waits for the operator's own Deployment; the operands (driver,
# toolkit, device plugin, GFD, DCGM, validator) are DaemonSets the operator creates after it,
# scheduled and started node by node. Verify gives them this long to come up.
OPERANDS_SETTLE_S = 180.0
# A pod waiting for one of these will not get better by waiting.
HOPELESS = ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError")


def _unready(pod: dict[str, Any]) -> bool:
    status = pod.get("status", {})
    statuses = status.get("containerStatuses") or []
    if status.get("phase") == "Succeeded":
        return False
    return not (
        status.get("phase") == "Running" and statuses and all(s.get("ready") for s in statuses)
    )


async def settled_pods(ctx: Any, namespace: str) -> list[dict[str, Any]]:
    """The operator release's namespace's pods once none is still starting (Pending or not ready
    yet), a pod is hopeless (crash loop, image pull), or the settle time is over."""
    kube = ctx.services.kube
    deadline = time.monotonic() + OPERANDS_SETTLE_S
    told = False
    while True:
        pods = await kube.pods(namespace)
        starting = [p for p in pods if _unready(p)]
        reasons = {
            (s.get("state", {}).get("waiting") or {}).get("reason")
            for p in starting
            for s in p.get("status", {}).get("containerStatuses") or []
        }
        if not pods or not starting or reasons & set(HOPELESS) or time.monotonic() > deadline:
            if told:
                ctx.wait_ends()
            return pods
        if not told:
            told = True
            ctx.wait_begins(
                f"waiting for {len(starting)} of {len(pods)} pods in {namespace} to start",
                deadline - time.monotonic(),
            )
        await asyncio.sleep(2)


def evaluate_pods(pods: list[dict[str, Any]], report: Report, namespace: str) -> None:
    """Every pod Running with all containers ready, or Completed; name the broken ones."""
    broken = []
    for pod in filter(_unready, pods):
        phase = pod.get("status", {}).get("phase")
        statuses = pod.get("status", {}).get("containerStatuses") or []
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
            "pods", f"no pods in {namespace}", "check the helm release and the operator logs"
        )
    elif broken:
        report.fail(
            "pods",
            f"{len(broken)} of {len(pods)} pods in {namespace} are not healthy: {', '.join(broken)}",
            f"kubectl -n {namespace} describe pod <name> and kubectl logs --previous; fix the cause "
            "(image pull from the mirror, driver build, containerd config)",
        )
    else:
        report.ok("pods", f"all {len(pods)} pods in {namespace} are Running or Completed")


def gpu_test_pod(site: Site, node: Node, namespace: str | None) -> dict[str, Any]:
    """A pod asking for every GPU of the node that runs nvidia-smi -L (and tolerates the taint),
    in the release's ``namespace``; None: the exported file's, which names no namespace, so
    that `kubectl -n "$GNW_NAMESPACE" apply -f` puts it in the release's (kubectl refuses a
    file whose namespace differs from -n: cli-runtime pkg/resource/visitor.go
    RequireNamespace)."""
    image = f"{mirrored('nvcr.io/nvidia', site.registry.mirror)}/cuda:12.9.1-base-ubi9"
    container = {
        "name": "nvidia-smi",
        "image": image,
        "command": ["nvidia-smi", "-L"],
        "resources": {"limits": {"nvidia.com/gpu": node.gpu_count}},
    }
    pod = node_pod(site, node, f"gnw-gpu-test-{node.name}", namespace or "", container)
    if namespace is None:
        del pod["metadata"]["namespace"]
    return pod


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
    title = "GPU Operator pods, allocatable GPUs, DCGM metrics and a test pod"
    kind = StepKind.CHECK
    gates = ("T01",)
    requires = ("gpu-operator.install",)
    needs = (OPERATOR_RELEASE,)  # its pods, test pod and DCGM exporter are in its namespace
    reads = ("node.gpu_count", "taint", "registry", "cluster")
    explain = (
        "Every pod in the release's namespace (gpu-operator.preflight found it: "
        "$GNW_NAMESPACE) is Running with containers ready or Completed; containerd "
        "on the node has the nvidia runtime (in config.toml, or in the toolkit's drop-in that "
        "config.toml still imports after Kubespray runs); node allocatable nvidia.com/gpu "
        "equals the expected count; a test pod requesting the node's GPUs runs nvidia-smi -L "
        "and lists them. DCGM's own view of the node, read from the node's dcgm-exporter "
        "(:9400/metrics through the API server's pod proxy), reports every GPU "
        "(DCGM_FI_DEV_GPU_TEMP) with no XID error (DCGM_FI_DEV_XID_ERRORS), no row-remap "
        "failure and no PCIe/NVLink errors. The validator alone is not proof."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        raw = node.name if node else "<node>"
        name = q(raw)
        ns = NAMESPACE_WORD  # the release's, as gpu-operator.preflight's line found it
        return [
            f"kubectl get pods -n {ns} -o wide",
            *toolkit_wait_lines(ns),
            *runtime_read_lines(site),
            f"kubectl get node {name} -o jsonpath='{{.status.allocatable}}'  # nvidia.com/gpu",
            dcgm_read_command(node.name if node else "<node>", ns),
            shown(["kubectl", "-n", ns, "apply", "-f", f"nodes/{raw}/k8s/gpu-test-pod.yaml"]),
            *finished_then_logs(ns, f"pod/gnw-gpu-test-{raw}", 300),
        ]

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        if node is None:
            return []
        return [
            k8s_object(
                f"nodes/{node.name}/k8s/gpu-test-pod.yaml",
                gpu_test_pod(site, node, None),
                f"Pod gnw-gpu-test-{node.name} in the release's namespace ($GNW_NAMESPACE)",
                "runs nvidia-smi -L on every GPU of the node",
            )
        ]

    async def verify(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        report = Report("T01")
        kube = ctx.services.kube
        namespace = operator_release(ctx).namespace
        pods = await settled_pods(ctx, namespace)
        evaluate_pods(pods, report, namespace)
        config_file = config_path(ctx.site)
        evaluate_runtime(
            ctx.node.name,
            config_file,
            await ctx.read_file(config_file),
            await ctx.read_file(TOOLKIT_DROP_IN),
            report,
            namespace,
        )
        # DCGM's own view first: when the device plugin advertises fewer GPUs, the exporter
        # tells which GPU is gone and why (an XID).
        await check_dcgm(kube, ctx.node, report, namespace)
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
        logs, phase = await run_test_pod(ctx, gpu_test_pod(ctx.site, ctx.node, namespace))
        if logs is None:
            report.fail(
                "test-pod",
                f"the nvidia-smi test pod did not finish: {phase}",
                "kubectl describe the pod",
            )
            return report.findings
        try:
            listed = len(parse(parse_nvidia_smi_l, logs).gpus)
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
    steps=(OperatorPreflight(), PullSecrets(), InstallGpuOperator(), VerifyGpuOperator()),
)


def toolkit_wait_lines(namespace: str) -> list[str]:
    """Before the node's containerd config is read: the operator creates its operands'
    DaemonSets after helm returns (helm --wait waits for the chart's own objects only), and
    the container toolkit writes the nvidia runtime once its pod runs, so an operator waits
    for the DaemonSet to exist (`kubectl wait --for=create`, kubectl >= 1.31) and roll out.
    ``namespace``: the release's, as a shell word (the runbook's NAMESPACE_WORD)."""
    ds = f"daemonset/{OPERAND_DAEMONSETS['toolkit']}"
    return [
        f"kubectl -n {namespace} wait --for=create {ds} --timeout=600s  # the operator makes it",
        f"kubectl -n {namespace} rollout status {ds} --timeout=600s  # then it wrote the runtime",
    ]
