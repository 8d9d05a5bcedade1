"""The GPU Operator as the cluster runs it now, and what changing it would touch.

Adding a node to a cluster that already runs the operator is the common case, so the step
reads the release state before it decides anything: which release of the chart is installed
(any name, any namespace: NVIDIA's install guide uses ``helm install --generate-name``), its
chart version and user values (``helm get values``), the ClusterPolicy and NVIDIADriver
resources, and the nodes whose driver it manages. The wizard's values are merged into the
live user values (never in their place: ``helm upgrade`` with only new values drops the
others), and a change is described with its blast radius: a chart or driver change rolls
the driver on every GPU node (``driver.upgradePolicy.autoUpgrade`` is true in values.yaml).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

from steps.gpu_operator.values import CHART_DEFAULTS, NAMESPACE, RELEASE
from wizard.result_keys import ResultKey
from wizard.site import Site

CHART_NAME = "gpu-operator"
# `helm list -o json` prints "chart" as <chart name>-<chart version> (helm 3
# cmd/helm/list.go formatChartname); a GPU Operator chart version is vMAJOR.MINOR.PATCH.
CHART_PATTERN = re.compile(rf"^{CHART_NAME}-(?P<version>v?\d+\.\d+\.\d+\S*)$")
# Lists merged item by item rather than replaced: a user's toleration, pull secret or
# environment variable stays next to the wizard's (env entries match by name).
_UNION_LISTS = frozenset({"tolerations", "imagePullSecrets"})
_NAMED_LISTS = frozenset({"env"})
# Labels by which a node shows a GPU the operator manages: NFD's PCI vendor label for
# NVIDIA (10de) and the operator's own (GPU Operator controllers/state_manager.go).
GPU_NODE_LABELS = ("nvidia.com/gpu.present", "feature.node.kubernetes.io/pci-10de.present")


@dataclass(frozen=True)
class OperatorRelease:
    """The GPU Operator release every later step acts on: the one the cluster runs (any
    name, any namespace: a brownfield site's, e.g. nvidia-gpu-operator), else the wizard's
    first install, gpu-operator/gpu-operator. Its pull secret, pods, test pod and DCGM
    exporter are in ``namespace`` (no default: a caller names the release it acts on)."""

    name: str
    namespace: str

    def as_result(self) -> dict[str, str]:
        return {"name": self.name, "namespace": self.namespace}

    @classmethod
    def of(cls, recorded: dict[str, Any]) -> OperatorRelease:
        """The release as OPERATOR_RELEASE recorded it (a typed dict of JSON strings)."""
        return cls(str(recorded["name"]), str(recorded["namespace"]))


# Recorded by gpu-operator.preflight (steps/gpu_operator/phase.py) from the release state it
# reads; needed by every step that writes or reads in the operator's namespace.
OPERATOR_RELEASE: ResultKey[dict[str, Any]] = ResultKey(
    "gpu-operator.preflight",
    "operator_release",
    dict,
    "the GPU Operator release (name, namespace): the existing one, else gpu-operator's",
)


def operator_release(ctx: Any) -> OperatorRelease:
    """The release a step that ``needs`` OPERATOR_RELEASE acts on."""
    return OperatorRelease.of(ctx.need(OPERATOR_RELEASE))


@dataclass
class ReleaseState:
    """What the cluster runs of the GPU Operator, read before any change: the release
    ``namespace``/``name`` (the installed one's, else where the first install goes)."""

    name: str
    namespace: str
    installed: bool = False
    chart_version: str | None = None
    status: str | None = None
    user_values: dict[str, Any] = field(default_factory=dict)
    others: list[str] = field(default_factory=list)  # further releases of the chart
    # (namespace, name) of every release of the chart, this one first
    releases: list[tuple[str, str]] = field(default_factory=list)
    cluster_policies: list[dict[str, Any]] = field(default_factory=list)
    nvidia_drivers: list[dict[str, Any]] = field(default_factory=list)
    gpu_nodes: list[str] = field(default_factory=list)  # nodes the operator's driver runs on
    nfd_workers: list[dict[str, Any]] = field(default_factory=list)  # the release's own
    pods: list[dict[str, Any]] = field(default_factory=list)  # in the release's namespace

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def release(self) -> OperatorRelease:
        return OperatorRelease(self.name, self.namespace)

    def as_data(self) -> dict[str, Any]:
        """The part recorded in the checkpoint (and shown): no live objects."""
        return {
            "release": self.label,
            "installed": self.installed,
            "chart_version": self.chart_version,
            "status": self.status,
            "gpu_nodes": list(self.gpu_nodes),
        }


def chart_version(entry: dict[str, Any]) -> str | None:
    """The GPU Operator chart version of one ``helm list`` entry, None for another chart."""
    match = CHART_PATTERN.match(str(entry.get("chart", "")))
    return match.group("version") if match else None


async def read_state(ctx: Any) -> ReleaseState:
    """The release, its values, the operator's resources and the GPU nodes, from the cluster."""
    helm, kube = ctx.services.helm, ctx.services.kube
    ours = [
        r
        for r in await helm.list_releases()
        if chart_version(r) and r.get("name") and r.get("namespace")
    ]
    # None installed: the wizard's first install, gpu-operator/gpu-operator.
    state = ReleaseState(RELEASE, NAMESPACE)
    if ours:
        # The release the wizard manages: the one named as the wizard names it, else the
        # first; any further one is reported (two operators fight over every GPU node).
        ours.sort(key=lambda r: (r.get("name") != RELEASE, r.get("namespace"), r.get("name")))
        first = ours[0]
        state.name, state.namespace = str(first["name"]), str(first["namespace"])
        state.installed = True
        state.chart_version = chart_version(first)
        state.status = str(first.get("status", ""))
        state.others = [f"{r['namespace']}/{r['name']}" for r in ours[1:]]
        state.releases = [(str(r["namespace"]), str(r["name"])) for r in ours]
        state.user_values = await helm.get_values(state.name, state.namespace) or {}
    state.cluster_policies = await kube.custom_objects("nvidia.com", "v1", "clusterpolicies")
    state.nvidia_drivers = await kube.custom_objects("nvidia.com", "v1alpha1", "nvidiadrivers")
    state.gpu_nodes = gpu_node_names(await kube.nodes(), ctx.site)
    if state.installed:
        state.nfd_workers = [
            d for d in nfd_workers(await kube.daemonsets()) if belongs_to(d, state)
        ]
        state.pods = await kube.pods(state.namespace)
    return state


def is_nfd_worker(daemonset: dict[str, Any]) -> bool:
    """An NFD worker under any name: its container runs ``nfd-worker`` (the NFD chart's
    templates/worker.yaml: ``command: ["nfd-worker"]``) or its image or name is NFD's."""
    name = daemonset.get("metadata", {}).get("name", "")
    if "nfd-worker" in name or "node-feature-discovery" in name:
        return True
    spec = daemonset.get("spec", {}).get("template", {}).get("spec", {})
    for container in spec.get("containers") or []:
        words = [*(container.get("command") or []), *(container.get("args") or [])[:1]]
        if "nfd-worker" in words or "/node-feature-discovery" in str(container.get("image", "")):
            return True
    return False


def nfd_workers(daemonsets: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in daemonsets if is_nfd_worker(d)]


def belongs_to(
    daemonset: dict[str, Any], state: ReleaseState, *, any_release: bool = False
) -> bool:
    """Whether a DaemonSet is the GPU Operator release's own (its bundled NFD), or with
    ``any_release`` that of any release of the chart (two operators are refused apart):
    Helm labels what it renders ``app.kubernetes.io/instance: <release>`` (NFD chart
    _helpers.tpl)."""
    meta = daemonset.get("metadata", {})
    labels = meta.get("labels") or {}
    owner = (meta.get("namespace"), labels.get("app.kubernetes.io/instance"))
    releases = state.releases if any_release else state.releases[:1]
    return state.installed and owner in releases


def gpu_node_names(nodes: list[dict[str, Any]], site: Site) -> list[str]:
    """Every node with a GPU the operator manages, and the site's new ones."""
    names = {n.name for n in site.nodes}
    for node in nodes:
        labels = node.get("metadata", {}).get("labels") or {}
        allocatable = node.get("status", {}).get("allocatable") or {}
        if any(labels.get(k) == "true" for k in GPU_NODE_LABELS) or allocatable.get(
            "nvidia.com/gpu", "0"
        ) not in ("0", ""):
            names.add(node["metadata"]["name"])
    return sorted(names)


def merge_values(live: dict[str, Any], wanted: dict[str, Any]) -> dict[str, Any]:
    """The live user values with the wizard's merged in: every user value stays unless the
    wizard needs that very key; tolerations and pull secrets are unioned, env by name."""
    merged = copy.deepcopy(live)
    for key, value in wanted.items():
        current = merged.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            merged[key] = merge_values(current, value)
        elif key in _UNION_LISTS and isinstance(value, list) and isinstance(current, list):
            merged[key] = current + [v for v in value if v not in current]
        elif key in _NAMED_LISTS and isinstance(value, list) and isinstance(current, list):
            names = {v.get("name") for v in value if isinstance(v, dict)}
            kept = [v for v in current if not (isinstance(v, dict) and v.get("name") in names)]
            merged[key] = kept + copy.deepcopy(value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def covers(live: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether the live values already hold everything the wizard needs: the merge changes
    no key (by ``changed_keys``, the blast radius's own rule, so a key the release lacks
    that the wizard sets to the chart's default counts as held)."""
    return not changed_keys(live, merge_values(live, wanted))


def changed_keys(live: dict[str, Any], merged: dict[str, Any], prefix: str = "") -> list[str]:
    """The dotted keys whose value the merge changes (for the blast radius)."""
    keys = []
    for key, value in merged.items():
        path = f"{prefix}.{key}" if prefix else key
        current = live.get(key)
        if isinstance(value, dict) and value and isinstance(current, dict | None):
            keys += changed_keys(current or {}, value, path)
        elif current != value and not (key not in live and CHART_DEFAULTS.get(path, ...) == value):
            keys.append(path)
    return keys


# Every value of the chart ends up in the ClusterPolicy (templates/clusterpolicy.yaml) or the
# NFD subchart, whose DaemonSets the operator renders from it; a changed operand spec is a
# changed DaemonSet template, and the DaemonSet controller replaces that operand's pod on
# every node it selects. So any changed key restarts operand pods on every GPU node (the NFD
# worker's on every node); the operands named here are those whose pods a key restarts.
OPERAND_DAEMONSETS = {
    "driver": "nvidia-driver-daemonset",
    "toolkit": "nvidia-container-toolkit-daemonset",
    "devicePlugin": "nvidia-device-plugin-daemonset",
    "gfd": "gpu-feature-discovery",
    "dcgm": "nvidia-dcgm",
    "dcgmExporter": "nvidia-dcgm-exporter",
    "migManager": "nvidia-mig-manager",
    "validator": "nvidia-operator-validator",
    "nodeStatusExporter": "nvidia-node-status-exporter",
    "node-feature-discovery": "the NFD worker (on every node)",
    "nfd": "the NFD worker (on every node)",
}
_SHOWN = 8  # changed keys named in the summary (the diff shows them all)


# Keys that change an object beside the operand's DaemonSet, not its pod template: the
# operator renders dcgmExporter.serviceMonitor into a ServiceMonitor
# (assets/state-dcgm-exporter/0500_service_monitor.yaml), not into 0800_daemonset.yaml.
_NO_POD_KEYS = ("dcgmExporter.serviceMonitor.",)


def restarted_operands(keys: list[str]) -> list[str]:
    """The operand DaemonSets whose pods the changed keys restart; ``daemonsets.*`` (common
    to every operand), ``cdi.*`` or ``operator.*`` (the operator re-renders every operand
    from them) and any key not known here count as all operands."""
    named: list[str] = []
    for key in keys:
        if key.startswith(_NO_POD_KEYS):
            continue
        top = key.split(".", 1)[0]
        operand = OPERAND_DAEMONSETS.get(top)
        if operand is None:
            return ["every operand"]
        if operand not in named:
            named.append(operand)
    return named


def restarted_pods(state: ReleaseState, site: Site, operands: list[str]) -> list[str]:
    """The live operand pods on existing (not new) nodes that the change replaces: a
    DaemonSet's pods named after it (``<daemonset>-<hash>``); "every operand" means every
    DaemonSet-owned pod of the release's namespace."""
    new = {n.name for n in site.nodes}
    every = "every operand" in operands
    names = [o for o in operands if not o.startswith("the ")]
    nfd = any(o.startswith("the NFD") for o in operands)
    found = []
    for pod in state.pods:
        meta, node = pod.get("metadata", {}), pod.get("spec", {}).get("nodeName")
        owners = {r.get("kind") for r in meta.get("ownerReferences") or []}
        name = str(meta.get("name", ""))
        if not node or node in new or "DaemonSet" not in owners:
            continue
        owner = name.rsplit("-", 1)[0]  # a DaemonSet's pod: <daemonset>-<5 characters>
        if every or owner in names or (nfd and owner.endswith("node-feature-discovery-worker")):
            found.append(f"{name} on {node}")
    return sorted(found)


def restarted_pod_refs(state: ReleaseState, site: Site, merged: dict[str, Any]) -> tuple[str, ...]:
    """The live pods on existing nodes a change of the installed release replaces, as
    "namespace/pod on node", from the live pods' owners: a changed operand template rolls
    every pod of that DaemonSet (on every node it selects), and a new chart version also
    rolls the operator's own Deployment (its image is the chart's appVersion)."""
    if not state.installed:
        return ()
    keys = changed_keys(state.user_values, merged)
    version_change = state.chart_version != site.versions.gpu_operator
    operands = ["every operand"] if version_change else restarted_operands(keys)
    new = {n.name for n in site.nodes}
    every = "every operand" in operands
    named = {o for o in operands if not o.startswith("the ")}
    nfd = any(o.startswith("the NFD") for o in operands)
    found = set()
    for pod in state.pods:
        meta, node = pod.get("metadata", {}), pod.get("spec", {}).get("nodeName")
        if not node or node in new:
            continue
        owners = meta.get("ownerReferences") or []
        daemonset = next((str(o.get("name")) for o in owners if o.get("kind") == "DaemonSet"), None)
        deployment = any(o.get("kind") == "ReplicaSet" for o in owners)
        if (
            (daemonset and (every or daemonset in named))
            or (daemonset and nfd and daemonset.endswith("node-feature-discovery-worker"))
            or (deployment and version_change)
        ):
            found.add(f"{meta.get('namespace')}/{meta.get('name')} on {node}")
    return tuple(sorted(found))


def blast_radius(state: ReleaseState, site: Site, merged: dict[str, Any]) -> str:
    """What a change of the release touches, in the operator's words, naming the nodes."""
    pinned = site.versions.gpu_operator
    new = ", ".join(n.name for n in site.nodes)
    others = [n for n in state.gpu_nodes if n not in {m.name for m in site.nodes}]
    if not state.installed:
        return (
            f"installs GPU Operator {pinned} as {state.label}: its driver, toolkit and device "
            f"plugin start on every GPU node ({', '.join(state.gpu_nodes)})"
        )
    keys = changed_keys(state.user_values, merged)
    version_change = state.chart_version != pinned
    operands = ["every operand"] if version_change else restarted_operands(keys)
    restarts = bool(operands)
    parts = []
    if version_change:
        parts.append(f"upgrades {state.label} from chart {state.chart_version} to {pinned}")
    if keys:
        more = f" and {len(keys) - _SHOWN} more" if len(keys) > _SHOWN else ""
        parts.append(f"changes {', '.join(keys[:_SHOWN])}{more}")
    text = "; ".join(parts) or f"re-applies {state.label}"
    if restarts:
        nodes = ", ".join(others) if others else "none besides the new ones"
        driver = "every operand" in operands or "nvidia-driver-daemonset" in operands
        text += (
            f". BLAST RADIUS: restarts {', '.join(operands)} pods on EVERY GPU node, not only "
            f"{new}: also {nodes}"
            + (
                f" (driver.upgradePolicy.autoUpgrade rolls the driver {_parallel(merged)}; "
                "GPU workloads there are evicted)"
                if driver
                else " (the operands' DaemonSet templates change)"
            )
        )
        pods = restarted_pods(state, site, operands)
        text += (
            f". Pods restarted on existing nodes (live): {', '.join(pods[: _SHOWN * 2])}"
            + (f" and {len(pods) - _SHOWN * 2} more" if len(pods) > _SHOWN * 2 else "")
            if pods
            else ". No operand pod runs on an existing node now"
        )
    else:
        text += f"; no operand change: GPU workloads on {', '.join(state.gpu_nodes)} keep running"
    return text + ". Every live user value is kept (see the diff)."


def _parallel(merged: dict[str, Any]) -> str:
    policy = (merged.get("driver") or {}).get("upgradePolicy") or {}
    return f"{policy.get('maxParallelUpgrades', 1)} node(s) at a time"
