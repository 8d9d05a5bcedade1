"""The new node's GPUs as DCGM sees them: the dcgm-exporter's /metrics, read and judged.

The GPU Operator 26.7 runs dcgm-exporter 4.6.0-4.8.3 (chart values.yaml
``dcgmExporter.version``) on every GPU node, listening on :9400 (the operator's
assets/state-dcgm-exporter: container port 9400 named "metrics", Service
``nvidia-dcgm-exporter`` port 9400). The page is read through the API server's pod proxy
(``pods/<name>:9400/proxy/metrics``) with the wizard's own cluster credentials: no network
path beyond the API server, and the pod of *this* node (the Service would answer from any
node's exporter).

The metric names are the exporter's 4.x default counters (dcgm-exporter
etc/default-counters.csv and etc/dcp-metrics-included.csv, which the operator's exporter
reads by default; both list the same fields): ``DCGM_FI_DEV_GPU_TEMP`` per GPU proves DCGM
sees the GPU, ``DCGM_FI_DEV_XID_ERRORS`` is the last XID (kept until the exporter restarts;
judged by NVIDIA's XID catalogue, steps.gpu_operator.xid: an application's XID warns, a
hardware or driver XID fails), ``DCGM_FI_DEV_ROW_REMAP_FAILURE`` a GPU whose HBM could not remap a
row (NVIDIA's row-remapping guide: the GPU needs service), ``DCGM_FI_DEV_PCIE_REPLAY_COUNTER``
and ``DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL`` the links. The ECC DBE and NVLink error
counters are commented out in the default csv; a site that enables them has them judged too.

Checked against dcgm-exporter's sources up to 4.5.3-4.8.2 and the commit after it
(#655, "Hostname" -> "hostname"); no 4.6.0-4.8.3 tag was at hand, so the names and labels
of the chart's exact version rest on that.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from steps.common import q
from steps.gpu_operator.xid import CATALOGUE, XidClass, classify, describe
from wizard.facts import ParseError, parse
from wizard.facts.dcgm import DcgmMetrics, parse_dcgm_metrics
from wizard.probe import Report
from wizard.site import Node
from wizard.transports.base import TransportError
from wizard.transports.kube import KubeError

EXPORTER_APP = "nvidia-dcgm-exporter"
EXPORTER_PORT = 9400
METRICS_PATH = "metrics"

TEMPERATURE = "DCGM_FI_DEV_GPU_TEMP"
XID = "DCGM_FI_DEV_XID_ERRORS"
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
UNCORRECTABLE_REMAPPED_ROWS = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
PCIE_REPLAY = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
NVLINK_BANDWIDTH = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"
# Not in the default csv; judged when the site's metrics ConfigMap enables them.
ECC_DBE = ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL")
NVLINK_FAULTS = (
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
)


def proxy_path(pod: str, namespace: str) -> str:
    """The API server's path to ``pod``'s /metrics in the release's ``namespace``."""
    return f"/api/v1/namespaces/{namespace}/pods/{pod}:{EXPORTER_PORT}/proxy/{METRICS_PATH}"


def read_command(node: str, namespace: str) -> str:
    """The same read by hand, from the jump host; ``namespace`` is a shell word (the
    runbook's NAMESPACE_WORD, ``"$GNW_NAMESPACE"``, or a quoted name). The path is one
    double-quoted word, so the variable goes in without its own quotes."""
    pod = (
        f"$(kubectl -n {namespace} get pod -l app={EXPORTER_APP} "
        f"--field-selector spec.nodeName={q(node)} -o jsonpath='{{.items[0].metadata.name}}')"
    )
    in_path = namespace[1:-1] if namespace[:2] == '"$' and namespace[-1:] == '"' else namespace
    return f'kubectl get --raw "{proxy_path(pod, in_path)}"  # the DCGM metrics of the node'


# How long the read waits while the node's exporter pod is being replaced (a rollout of the
# exporter's DaemonSet: an upgrade of the release just before rolls it on every GPU node,
# the new node included): the old pod terminates, the new one starts and turns Ready.
ROLLOUT_WAIT_S = 180.0
ROLLOUT_POLL_S = 2.0


async def read_metrics(kube: Any, node: str, namespace: str) -> tuple[str | None, str]:
    """(the exporter pod's name, its /metrics page) or (name or None, why not). While the
    node has exporter pods but none Ready and not terminating (a rollout under way), it
    waits for the new pod up to ``ROLLOUT_WAIT_S``; with no pod at all it answers at once."""
    deadline = time.monotonic() + ROLLOUT_WAIT_S
    while True:
        pods = await kube.pods(
            namespace, label_selector=f"app={EXPORTER_APP}", field_selector=f"spec.nodeName={node}"
        )
        # A pod of a DaemonSet rollout that is being deleted is still Running for its grace
        # period: skip it (metadata.deletionTimestamp), and take only a Ready pod (the
        # exporter's readinessProbe is /health: it answers /metrics once DCGM is up).
        running = [
            p for p in pods
            if p.get("status", {}).get("phase") == "Running"
            and not p.get("metadata", {}).get("deletionTimestamp")
            and _ready(p)
        ]  # fmt: skip
        if running or not pods or time.monotonic() > deadline:
            break
        await asyncio.sleep(ROLLOUT_POLL_S)
    if not running:
        return None, (
            f"no Running, Ready {EXPORTER_APP} pod on {node} that is not terminating "
            f"({len(pods)} other)"
        )
    name = running[0]["metadata"]["name"]
    try:
        return name, await kube.pod_proxy(
            namespace, name, EXPORTER_PORT, METRICS_PATH, what=f"metrics of {namespace}/{name}"
        )
    except TransportError as exc:
        raise _ProxyRefused(name, exc) from None


def _ready(pod: dict[str, Any]) -> bool:
    """The pod's Ready condition (the kubelet's verdict on the readinessProbe); a status
    without conditions (the embedded lab's) falls back to its containers' ``ready``."""
    status = pod.get("status", {})
    conditions = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    if conditions:
        return conditions[0].get("status") == "True"
    containers = status.get("containerStatuses") or []
    return bool(containers) and all(c.get("ready") for c in containers)


class _ProxyRefused(Exception):
    def __init__(self, pod: str, error: TransportError) -> None:
        self.pod = pod
        self.error = error
        super().__init__(str(error))


async def check_dcgm(kube: Any, node: Node, report: Report, namespace: str) -> None:
    """Read the node's exporter page in the release's namespace and judge it (findings
    under ``dcgm.*``)."""
    try:
        pod, text = await read_metrics(kube, node.name, namespace)
    except _ProxyRefused as refused:
        error = refused.error
        message = getattr(error, "message", str(error))
        if isinstance(error, KubeError) and error.status == 400 and "not allowed" in message:
            # The API server proxies only to addresses it considers routable
            # (pkg/registry/core/pod/strategy.go ResourceLocation: IsProxyableIP refuses
            # loopback and link-local pod IPs): the metrics exist, this path cannot read them.
            # Not a finding about the node: the check could not run (skipped, with the
            # reason and the manual read; the gate is judged by the other checks).
            report.skip(
                "dcgm.read",
                f"the API server will not proxy to {refused.pod}'s address ({message[:160]}): "
                f"DCGM metrics not judged; read them by hand: kubectl -n {namespace} "
                f"port-forward pod/{refused.pod} {EXPORTER_PORT} and curl "
                f"localhost:{EXPORTER_PORT}/{METRICS_PATH}",
            )
            return
        if isinstance(error, KubeError) and error.status == 403:
            # RBAC: `get` on pods/proxy is a grant of its own (it reaches any pod port as the
            # API server), which many production clusters do not give. The node is not at
            # fault: skipped, naming the rule to grant and the manual read.
            report.skip(
                "dcgm.read",
                f"the wizard's credentials may not get pods/proxy in namespace {namespace} "
                f"({message[:160]}): DCGM metrics not judged. Grant a Role in namespace "
                f'{namespace} with the rule apiGroups: [""], resources: ["pods/proxy"], '
                f'verbs: ["get"] (bound to the wizard\'s user), or read them by hand: '
                f"kubectl -n {namespace} port-forward pod/{refused.pod} {EXPORTER_PORT} and "
                f"curl localhost:{EXPORTER_PORT}/{METRICS_PATH}",
            )
            return
        report.fail(
            "dcgm.read",
            f"cannot read {refused.pod}'s /metrics through the API server: {message[:200]}",
            f"kubectl -n {namespace} logs {refused.pod}; the exporter listens on :{EXPORTER_PORT} "
            "once its embedded hostengine has initialised (the chart's dcgm.enabled: false)",
        )
        return
    if pod is None:
        report.fail(
            "dcgm.read", text, f"kubectl -n {namespace} get pods -o wide -l app={EXPORTER_APP}"
        )
        return
    try:
        metrics = parse(parse_dcgm_metrics, text)
    except ParseError as exc:
        report.fail(
            "dcgm.read",
            f"{pod}'s /metrics is not the exporter's page: {exc.reason}",
            f"kubectl -n {namespace} logs {pod}",
        )
        return
    assert isinstance(metrics, DcgmMetrics)
    judge(metrics, node, pod, report, namespace)


def judge(metrics: DcgmMetrics, node: Node, pod: str, report: Report, namespace: str) -> None:
    """The verdicts on one node's page: every GPU reported, no fault counter set.

    Every GPU that appears in any sample is judged (a GPU that lost its temperature, e.g.
    after XID 79, is the one whose XID matters most); ``seen`` (GPUs with a temperature)
    only decides whether DCGM reports the GPU at all."""
    seen = {gpu.index: gpu for gpu in metrics.gpus if gpu.values.get(TEMPERATURE) is not None}
    gpus = sorted(metrics.gpus, key=lambda g: g.index)
    expected = set(range(node.gpu_count))
    missing = sorted(expected - set(seen))
    if missing:
        last_xid = {g.index: g.values.get(XID) for g in gpus if (g.values.get(XID) or 0) != 0}
        named = [
            f"GPU {i}" + (f" (last XID {last_xid[i]:g}: {describe(int(last_xid[i]))})"
                          if i in last_xid else "")
            for i in missing
        ]  # fmt: skip
        report.fail(
            "dcgm.gpus",
            f"DCGM on {node.name} reports {TEMPERATURE} for {len(seen)} of {node.gpu_count} GPUs "
            f"(missing {', '.join(named)})",
            "nvidia-smi in the driver pod and the node's dmesg for a GPU fallen off the bus "
            "(XID 79); reseat or service the GPU before the node takes work",
        )
    else:
        report.ok("dcgm.gpus", f"DCGM reports all {node.gpu_count} GPUs of {node.name} ({pod})")
    judge_xids(gpus, node, pod, report, namespace)
    _memory_and_links(gpus, node, pod, report)


def judge_xids(gpus: list, node: Node, pod: str, report: Report, namespace: str) -> None:
    """DCGM_FI_DEV_XID_ERRORS per GPU, judged by NVIDIA's XID catalogue (steps.gpu_operator.
    xid): a hardware or unknown XID fails, an application's XID warns.

    The gauge is the *last* XID since the exporter's embedded hostengine began watching and
    keeps that value until the exporter restarts (dcgm-exporter #500, DCGM #277): an
    application XID from an earlier job stays on the page, and an XID from before the
    exporter started is not on it (the node's dmesg, NVRM: Xid, has those)."""
    xids = [(g, int(g.values[XID] or 0)) for g in gpus if (g.values.get(XID) or 0) != 0]
    if not any(XID in g.values for g in gpus):
        report.warn(
            "dcgm.xid",
            f"{pod} exports no {XID}: XID errors are not watched on {node.name}",
            "the exporter's metrics csv must list DCGM_FI_DEV_XID_ERRORS (it is in the default "
            "counters)",
        )
        return
    if not xids:
        report.ok("dcgm.xid", f"no XID error on any GPU of {node.name}")
        return

    def text(g, code: int) -> str:
        message = ", ".join(g.xid_messages.values()) if g.xid_messages else describe(code)
        return f"GPU {g.index} ({g.uuid or '?'}): XID {code} {message}"

    sticky = (
        f"; {XID} keeps the last XID until the exporter restarts, so it may predate this run "
        f"(kubectl -n {namespace} delete pod {pod} clears it)"
    )
    faults = [(g, c) for g, c in xids if classify(c) is not XidClass.APPLICATION]
    if faults:
        report.fail(
            "dcgm.xid",
            "XID errors on " + "; ".join(text(g, c) for g, c in faults) + sticky,
            f"NVIDIA's XID catalogue ({CATALOGUE}) gives the action: these need a GPU reset, "
            "a node reboot or service; read the node's dmesg (NVRM: Xid) for when it happened",
        )
        return
    report.warn(
        "dcgm.xid",
        "application XIDs on " + "; ".join(text(g, c) for g, c in xids)
        + ": a workload's fault, not the GPU's (NVIDIA's XID catalogue: restart the "
        "application)" + sticky,
        "find the job that ran on that GPU (its pod's log); the GPU needs no service for these",
    )  # fmt: skip


def _absent(gpus: list, *fields: str) -> list[str]:
    """The fields no GPU of the page has: the exporter's metrics csv leaves them out (a site's
    own csv under dcgmExporter.config.name, gpu-operator controllers/object_controls.go)."""
    return [f for f in fields if not any(f in g.values for g in gpus)]


def _not_judged(check: str, absent: list[str], node: Node, pod: str, report: Report) -> None:
    report.warn(
        check,
        f"{pod} exports no {', '.join(absent)}: not judged on {node.name}",
        "the exporter's metrics csv must list them (they are in dcgm-exporter's default "
        "counters, etc/dcp-metrics-included.csv)",
    )


def _memory_and_links(gpus: list, node: Node, pod: str, report: Report) -> None:
    """HBM and link health; a field the exporter does not export is "not judged" (a warning
    naming it), as for XID, never an OK: an absent row-remap failure reads as zero otherwise."""
    remap = [g.index for g in gpus if (g.values.get(ROW_REMAP_FAILURE) or 0) != 0]
    dbe = [(g.index, n) for g in gpus for n in ECC_DBE if (g.values.get(n) or 0) > 0]
    if remap or dbe:
        parts = [f"row remapping failed on GPU {', '.join(map(str, remap))}"] if remap else []
        parts += [f"GPU {i} {n} > 0" for i, n in dbe]
        report.fail(
            "dcgm.memory",
            f"HBM errors on {node.name}: {'; '.join(parts)}",
            "a GPU whose row remapping failed or with double-bit ECC errors needs service "
            "(NVIDIA's GPU memory error management guide)",
        )
    else:
        pending = [g.index for g in gpus if (g.values.get(UNCORRECTABLE_REMAPPED_ROWS) or 0) > 0]
        if pending:
            report.warn(
                "dcgm.memory",
                f"GPU {', '.join(map(str, pending))} of {node.name} remapped rows after "
                "uncorrectable errors",
                "rows already remapped after uncorrectable errors: the GPU works on; a "
                "growing count or DCGM_FI_DEV_ROW_REMAP_PENDING (a remap that waits for a GPU "
                "reset) needs a reset and a closer look",
            )
        elif absent := _absent(gpus, ROW_REMAP_FAILURE, UNCORRECTABLE_REMAPPED_ROWS):
            _not_judged("dcgm.memory", absent, node, pod, report)
        else:
            report.ok("dcgm.memory", f"no row-remap failure or uncorrectable row on {node.name}")
    links = []
    for gpu in gpus:
        links += [f"GPU {gpu.index} {n} = {gpu.values[n]:g}" for n in NVLINK_FAULTS
                  if (gpu.values.get(n) or 0) > 0]  # fmt: skip
        if (gpu.values.get(PCIE_REPLAY) or 0) > 0:
            links.append(f"GPU {gpu.index} {PCIE_REPLAY} = {gpu.values[PCIE_REPLAY]:g}")
    no_nvlink = [g.index for g in gpus if NVLINK_BANDWIDTH not in g.values]
    if links:
        report.warn(
            "dcgm.links",
            f"link errors on {node.name}: {'; '.join(links)}",
            "PCIe replays and NVLink errors on an idle, new node point at a seated card or a "
            "cable/tray; nvidia-smi nvlink -e and lspci -vvv in the driver pod",
        )
    elif absent := _absent(gpus, PCIE_REPLAY, NVLINK_BANDWIDTH):
        _not_judged("dcgm.links", absent, node, pod, report)
    elif no_nvlink and any(NVLINK_BANDWIDTH in g.values for g in gpus):
        report.warn(
            "dcgm.links",
            f"GPU {', '.join(map(str, no_nvlink))} of {node.name} report no {NVLINK_BANDWIDTH}",
            "nvidia-smi nvlink -s in the driver pod",
        )
    else:
        report.ok("dcgm.links", f"no PCIe replay or NVLink error on {node.name}")
