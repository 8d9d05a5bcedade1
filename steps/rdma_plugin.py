"""Phase 9, the shared RDMA device plugin, and a pod that uses RDMA (T03, T04)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any

from steps.common import (
    SHM_MOUNT,
    SHM_VOLUME,
    changed_lines,
    diff_excerpt,
    finished_then_logs,
    node_pod,
    pod_placement,
    q,
    shown,
)
from steps.gpu_operator import mirrored, run_test_pod
from steps.gpu_operator.values import mirror_ref
from steps.irdma import RDMA_DEVICE, RDMA_NETDEV
from wizard.approvals import ClusterChange, ClusterEffect
from wizard.artifacts import Artifact, k8s_object, k8s_yaml
from wizard.facts import ParseError, parse
from wizard.facts.rdma import parse_ibv_devinfo, parse_rdma_link
from wizard.model import Evidence, Finding, StepKind
from wizard.plan import Change, NotAutomated, Phase, Scope, Step, StepContext
from wizard.probe import Report
from wizard.site import Node, Site

# The wizard's own names, never the upstream ones: Mellanox/k8s-rdma-shared-dev-plugin
# deployment/k8s/base names its ConfigMap kube-system/rdma-devices and its DaemonSet
# rdma-shared-dp-ds, so a site that already runs the plugin (rdma/hca on ConnectX nodes) has
# objects of exactly those names. Replacing them would drop that site's configList entries and
# restart its plugin on every node it runs on; the wizard's plugin runs beside it instead.
CONFIGMAP = "gnw-rdma-devices"
DAEMONSET = "gnw-rdma-shared-dp-ds"
PLUGIN_IMAGE_NAME = "k8s-rdma-shared-dev-plugin"
# The pod template carries the config's digest: a changed config changes the template, so the
# DaemonSet controller replaces this DaemonSet's pods (only on the nodes its nodeSelector
# picks) and the plugin reads config.json again (it reads it once, at start:
# cmd/k8s-rdma-shared-dp/main.go rm.ReadConfig()). No pod is deleted by hand.
CONFIG_DIGEST = "gpu-node-wizard/config-sha256"
# How long verify waits for the plugin's rollout and its resource on the nodes: the
# DaemonSet controller starts a pod per node, the plugin registers with the kubelet
# (deviceplugin v1beta1 Register), and the kubelet's next node status carries the resource.
ADVERTISE_TIMEOUT_S = 180.0
REGISTRATION_GRACE_S = 15.0
TEST_NAMESPACE = "default"
# The selectors that identify an E810's RDMA function (the PCI driver is ice, not irdma).
E810_SELECTORS = {"vendors": ["8086"], "drivers": ["ice"]}
CONNECTX_SELECTORS = {"vendors": ["15b3"], "drivers": ["mlx5_core"]}


def plugin_config(site: Site, netdevs: list[str]) -> dict[str, Any]:
    """config.json: selectors from what the nodes show (never a hard-coded interface)."""
    prefix, _, name = site.device_plugin.resource_name.partition("/")
    selectors: dict[str, Any] = dict(
        E810_SELECTORS if site.nic.profile == "intel-e810" else CONNECTX_SELECTORS
    )
    if netdevs:
        selectors["ifNames"] = sorted(set(netdevs))
    return {
        "periodicUpdateInterval": 300,
        "configList": [
            {
                "resourceName": name,
                "resourcePrefix": prefix,
                "rdmaHcaMax": site.device_plugin.rdma_hca_max,
                "selectors": selectors,
            }
        ],
    }


def configmap(site: Site, netdevs: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIGMAP, "namespace": site.device_plugin.namespace},
        "data": {"config.json": json.dumps(plugin_config(site, netdevs), indent=2) + "\n"},
    }


def config_digest(cm: dict[str, Any]) -> str:
    return hashlib.sha256(cm["data"]["config.json"].encode()).hexdigest()[:16]


def daemonset(site: Site, digest: str = "") -> dict[str, Any]:
    """The wizard's plugin DaemonSet: its nodeSelector is the site's labels, which the wizard
    puts on the new nodes only, so it never schedules a pod on an existing node."""
    plugin = site.device_plugin
    # device_plugin.image behind the site's mirror; the default is where Mellanox publishes
    # the plugin (the Network Operator's example NicClusterPolicy: repository
    # ghcr.io/mellanox, image k8s-rdma-shared-dev-plugin, version v1.5.3).
    image = f"{mirrored(plugin.image, site.registry.mirror)}:{plugin.version}"
    volumes = [
        ("device-plugin", "/var/lib/kubelet/device-plugins"),
        ("plugins-registry", "/var/lib/kubelet/plugins_registry"),
        ("devs", "/dev/"),
    ]
    spec: dict[str, Any] = {
        "hostNetwork": True,
        "priorityClassName": "system-node-critical",
        "nodeSelector": dict(site.labels),
        "containers": [
            {
                "name": "k8s-rdma-shared-dp-ds",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "securityContext": {"privileged": True},
                "volumeMounts": [{"name": n, "mountPath": p} for n, p in volumes]
                + [{"name": "config", "mountPath": "/k8s-rdma-shared-dev-plugin"}],
            }
        ],
        "volumes": [{"name": n, "hostPath": {"path": p}} for n, p in volumes]
        + [
            {
                "name": "config",
                "configMap": {
                    "name": CONFIGMAP,
                    "items": [{"key": "config.json", "path": "config.json"}],
                },
            }
        ],
    }
    spec.update(pod_placement(site))
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": DAEMONSET, "namespace": plugin.namespace},
        "spec": {
            "selector": {"matchLabels": {"name": DAEMONSET}},
            "template": {
                "metadata": {
                    "labels": {"name": DAEMONSET},
                    **({"annotations": {CONFIG_DIGEST: digest}} if digest else {}),
                },
                "spec": spec,
            },
        },
    }


def nic_cluster_policy(site: Site, netdevs: list[str]) -> dict[str, Any]:
    """For a ConnectX node: the Network Operator's NicClusterPolicy with the same plugin."""
    return {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "NicClusterPolicy",
        "metadata": {"name": "nic-cluster-policy"},
        "spec": {
            "rdmaSharedDevicePlugin": {
                "image": "k8s-rdma-shared-dev-plugin",
                "repository": mirrored("nvcr.io/nvidia/mellanox", site.registry.mirror),
                "version": site.device_plugin.version,
                "config": json.dumps(plugin_config(site, netdevs), indent=2),
            }
        },
    }


def rdma_test_pod(site: Site, node: Node) -> dict[str, Any]:
    """A pod with the RDMA resource, IPC_LOCK and a memory-backed /dev/shm that lists the device."""
    container = {
        "name": "rdma",
        "image": mirror_ref(site.measurements.rdma_test_image, site.registry.mirror),
        "command": ["sh", "-c", "rdma link show; ibv_devinfo"],
        # The default image (nccl-tests) is CUDA-based: nvidia/cuda sets
        # NVIDIA_VISIBLE_DEVICES=all, so where nvidia is the default runtime the toolkit
        # would inject every GPU into a pod that asked for none. "void" injects none
        # (nvidia-container-toolkit's NVIDIA_VISIBLE_DEVICES values: all, none, void, ids).
        "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
        "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
        "resources": {"limits": {site.device_plugin.resource_name: 1}},
        "volumeMounts": [SHM_MOUNT],
    }
    return node_pod(
        site, node, f"gnw-rdma-test-{node.name}", TEST_NAMESPACE, container, [SHM_VOLUME]
    )


def project(live: Any, desired: Any) -> Any:
    """``live`` reduced to the keys ``desired`` has, so a diff shows only what we manage."""
    if isinstance(desired, dict) and isinstance(live, dict):
        return {k: project(live.get(k), v) for k, v in desired.items() if k in live}
    if isinstance(desired, list) and isinstance(live, list) and len(desired) == len(live):
        return [project(a, b) for a, b in zip(live, desired, strict=True)]
    return live


def discovered_netdevs(ctx: StepContext) -> list[str]:
    """The PF netdevs the nodes' RDMA devices sit on. The plugin's ifNames selector matches
    a PCI function's own netdev name exactly (ifNameSelector, pkg/resources): a bond is no
    PCI function and never matches, so a bond name is never put there."""
    bonds = {node.bond.name for node in ctx.site.nodes}
    netdevs = [ctx.need(RDMA_NETDEV, on=node.name) for node in ctx.site.nodes]
    return [netdev for netdev in netdevs if netdev not in bonds]


class InstallRdmaPlugin(Step):
    id = "rdma-plugin.install"
    title = "RDMA shared device plugin"
    kind = StepKind.APPLY
    gates = ("T03",)
    scope = Scope.CLUSTER
    # The DaemonSet's nodeSelector is the site's labels (daemonset() below): without
    # join.labels no plugin pod lands on the node and it never advertises the resource.
    requires = ("gpu-operator.verify", "join.labels")
    # The config's ifNames: every node's PF netdev, as irdma.verify found it (a node
    # without one blocks the step with the reason instead of getting no selector).
    needs = (RDMA_NETDEV,)
    # node.name: the config lists every node's netdev and verify checks every node's
    # allocatable, so a node added to the site resets this step.
    reads = ("device_plugin", "registry", "labels", "nic", "node.name")
    explain = (
        f"ConfigMap {CONFIGMAP} (config.json) with the site's resource name and rdmaHcaMax; "
        "selectors vendor 8086 and driver ice plus the netdevs `rdma link` showed on the nodes "
        f"(never a hard-coded interface); a DaemonSet {DAEMONSET} (plugin >= 1.5.2: older "
        "versions reject Intel NICs) with a nodeSelector on the site's labels, which only the "
        "new nodes carry. Its own names, beside any plugin the cluster already runs (upstream "
        "rdma-devices / rdma-shared-dp-ds are never touched); refused if an existing plugin "
        "already serves the same resource name. A config change rolls only this DaemonSet's "
        "pods (the template carries the config's digest); node allocatable then shows the "
        "resource. No Network Operator on an E810 (ConnectX/BlueField only)."
    )

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        ns = site.device_plugin.namespace
        if site.nic.profile == "connectx":
            return [
                k8s_object(
                    "cluster/k8s/nicclusterpolicy.yaml",
                    nic_cluster_policy(site, []),
                    "NicClusterPolicy nic-cluster-policy",
                    "the Network Operator's shared RDMA device plugin (ConnectX profile)",
                )
            ]
        return [
            k8s_object(
                "cluster/k8s/rdma-devices-configmap.yaml",
                configmap(site, []),
                f"ConfigMap {ns}/{CONFIGMAP}",
                "plugin config; at apply time ifNames are added from the netdevs each node shows",
            ),
            k8s_object(
                "cluster/k8s/rdma-plugin-daemonset.yaml",
                daemonset(site, config_digest(configmap(site, []))),
                f"DaemonSet {ns}/{DAEMONSET}",
                "the shared RDMA device plugin",
            ),
        ]

    def commands(self, site: Site, node: Node | None) -> list[str]:
        ns = q(site.device_plugin.namespace)
        return [
            f"kubectl -n {ns} get configmap {CONFIGMAP} -o yaml --ignore-not-found",
            f"kubectl -n {ns} apply -f cluster/k8s/rdma-devices-configmap.yaml "
            "-f cluster/k8s/rdma-plugin-daemonset.yaml",
            f"kubectl -n {ns} rollout status daemonset/{DAEMONSET} --timeout=300s",
        ]

    def _desired(self, ctx: StepContext) -> tuple[dict[str, Any], dict[str, Any]]:
        cm = configmap(ctx.site, discovered_netdevs(ctx))
        return cm, daemonset(ctx.site, config_digest(cm))

    async def preconditions(self, ctx: StepContext) -> list[Finding]:
        """An existing plugin that already serves our resource name refuses the step: the
        plugin's socket is ``<resourceName>.sock`` in the kubelet's device-plugins folder
        (pkg/resources/server.go newResourceServer), so two plugins with one resourceName on
        a node replace each other's registration whatever their prefixes."""
        if ctx.site.nic.profile != "intel-e810":
            return []
        report = Report("T03")
        ours = ctx.site.device_plugin.resource_name.partition("/")[2]
        existing = await existing_plugins(ctx.services.kube)
        clash = [p for p in existing if ours in p.resource_names]
        if clash:
            where = ", ".join(p.label for p in clash)
            report.fail(
                "existing-plugin",
                f"resource name {ours!r} is already served by the RDMA device plugin {where}: "
                "two plugins with one resourceName on a node take over each other's kubelet "
                "socket",
                "set device_plugin.resource_name to a name the existing plugin does not use "
                "(e.g. rdma/e810)",
            )
        return report.findings

    async def changes(self, ctx: StepContext) -> list[Change]:
        """The ConfigMap and DaemonSet against the live ones. Absent: new objects for the new
        nodes (listed in the report). Present (an earlier node addition made them) and
        different: an update of objects existing nodes run from, approved by name
        (rdma-plugin-update), its restarts the DaemonSet's pods on existing nodes (a changed
        template, or config digest, replaces every pod it owns). A new DaemonSet whose
        nodeSelector also picks existing nodes is the same named change."""
        if ctx.site.nic.profile != "intel-e810":
            raise NotAutomated
        kube = ctx.services.kube
        cm, ds = self._desired(ctx)
        ns = ctx.site.device_plugin.namespace
        live_cm = await kube.configmap(ns, CONFIGMAP)
        live_ds = next(
            (d for d in await kube.daemonsets(ns) if d["metadata"]["name"] == DAEMONSET), None
        )
        cm_live = None if live_cm is None else k8s_yaml(project(live_cm, cm))
        ds_live = None if live_ds is None else k8s_yaml(project(live_ds, ds))
        cm_artifact = k8s_object(
            "cluster/k8s/rdma-devices-configmap.yaml", cm, f"ConfigMap {ns}/{CONFIGMAP}",
            "plugin config",
        )  # fmt: skip
        ds_artifact = k8s_object(
            "cluster/k8s/rdma-plugin-daemonset.yaml", ds, f"DaemonSet {ns}/{DAEMONSET}",
            "the plugin",
        )  # fmt: skip
        new = {node.name for node in ctx.site.nodes}
        selector = dict(ctx.site.labels)
        picked = sorted(
            n["metadata"]["name"] for n in await kube.nodes()
            if n["metadata"]["name"] not in new
            and all((n["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
        )  # fmt: skip
        updated = [what for what, artifact, live in
                   ((f"ConfigMap {ns}/{CONFIGMAP}", cm_artifact, cm_live),
                    (f"DaemonSet {ns}/{DAEMONSET}", ds_artifact, ds_live))
                   if live is not None and live != artifact.content]  # fmt: skip
        effect = None
        if updated or picked:
            pods = await kube.pods(ns, label_selector=f"name={DAEMONSET}")
            restarts = tuple(sorted(
                f"{ns}/{p['metadata']['name']} on {p['spec'].get('nodeName')}" for p in pods
                if (p.get("spec") or {}).get("nodeName") not in new | {None}
            )) if updated else ()  # fmt: skip
            what = [f"updates the existing {', '.join(updated)}"] if updated else []
            if picked:
                what.append(f"its nodeSelector {selector} also picks the existing node(s) "
                            f"{', '.join(picked)}, which get (or keep) a plugin pod")  # fmt: skip
            effect = ClusterEffect(ClusterChange.RDMA_PLUGIN_UPDATE, "; ".join(what), restarts)
        for_new = "the new nodes' RDMA plugin (kube-system, the wizard's own name)"
        return [
            Change(
                cm_artifact, cm_live,
                adds=None if cm_live is not None else (f"ConfigMap {ns}/{CONFIGMAP}", for_new),
                effect=effect if cm_live is not None else None,
            ),
            Change(
                ds_artifact, ds_live,
                adds=None if ds_live is not None or picked else (
                    f"DaemonSet {ns}/{DAEMONSET}",
                    f"{for_new}; its nodeSelector {selector} picks only the new nodes"),
                effect=effect if ds_live is not None or picked else None,
            ),
        ]  # fmt: skip

    async def apply(self, ctx: StepContext, changes: list[Change]) -> None:
        """Only what differs: an unchanged ConfigMap is not written again."""
        kube = ctx.services.kube
        cm, ds = self._desired(ctx)
        ns = ctx.site.device_plugin.namespace
        changed = {c.artifact.path for c in changes if c.changed}
        if "cluster/k8s/rdma-devices-configmap.yaml" in changed:
            await kube.apply_configmap(ns, cm)
        if "cluster/k8s/rdma-plugin-daemonset.yaml" in changed:
            await kube.apply_daemonset(ns, ds)

    async def verify(self, ctx: StepContext) -> list[Finding]:
        report = Report("T03")
        kube = ctx.services.kube
        resource = ctx.site.device_plugin.resource_name
        cm, _ = self._desired(ctx)
        live = await kube.configmap(ctx.site.device_plugin.namespace, CONFIGMAP)
        if live is None:
            report.fail("config", f"ConfigMap {CONFIGMAP} is missing", "apply this step again")
        elif live.get("data") != cm["data"]:
            found = live.get("data") or {}
            lines = [
                line
                for key in sorted(set(found) | set(cm["data"]))
                if found.get(key) != cm["data"].get(key)
                for line in changed_lines(found.get(key, ""), cm["data"].get(key, ""), key)
            ]
            report.fail(
                "config",
                f"ConfigMap {CONFIGMAP} differs from the desired config in {len(lines)} "
                "line(s) (- found, + expected)",
                "apply this step again",
                Evidence(
                    f"kubectl -n {ctx.site.device_plugin.namespace} get configmap {CONFIGMAP} -o yaml",
                    diff_excerpt(lines),
                ),
            )
        existing = await existing_plugins(kube)
        if existing:
            report.ok(
                "existing-plugin",
                "existing RDMA device plugin(s) left as they are: "
                + "; ".join(p.label for p in existing)
                + f"; {DAEMONSET} runs beside them on the new nodes only",
            )
        counts = await self._advertised(ctx, resource)
        for node in ctx.site.nodes:
            count = counts.get(node.name)
            if count and count != "0":
                report.ok(
                    f"allocatable-{node.name}", f"{node.name} allocatable {resource} = {count}"
                )
            else:
                report.fail(
                    f"allocatable-{node.name}",
                    f"{node.name} does not advertise {resource} (allocatable: {count or 'absent'})",
                    f"check the plugin pod on the node (kubectl -n {ctx.site.device_plugin.namespace} logs "
                    f"-l name={DAEMONSET}): its selectors must match the node's RDMA netdev and driver ice",
                )
        return report.findings

    async def _advertised(self, ctx: StepContext, resource: str) -> dict[str, str | None]:
        """Each node's allocatable ``resource``, once the plugin's DaemonSet rolled out (and
        a grace for the kubelet to report what registered), or at the timeout; a server
        that tracks no rollout (no metadata.generation) is read once."""
        kube = ctx.services.kube
        ns = ctx.site.device_plugin.namespace
        deadline = time.monotonic() + ADVERTISE_TIMEOUT_S
        rolled_out_at: float | None = None
        told = False
        while True:
            counts = {}
            for node in ctx.site.nodes:
                obj = await kube.node(node.name) or {}
                counts[node.name] = obj.get("status", {}).get("allocatable", {}).get(resource)
            if all(c and c != "0" for c in counts.values()):
                return counts
            ds = next(
                (d for d in await kube.daemonsets(ns) if d["metadata"]["name"] == DAEMONSET), None
            )
            generation = ((ds or {}).get("metadata") or {}).get("generation")
            if ds is None or generation is None or time.monotonic() > deadline:
                return counts
            status = ds.get("status") or {}
            desired = status.get("desiredNumberScheduled", 0)
            # Settled when the DaemonSet controller has seen this generation and every pod it
            # schedules is updated and available. Zero scheduled is settled too (no node
            # matches its selectors, e.g. the labels were skipped): waiting cannot change
            # what the nodes advertise, so the grace and the findings follow at once.
            done = status.get("observedGeneration", 0) >= generation and (
                status.get("numberAvailable", 0) >= desired
                and status.get("updatedNumberScheduled", 0) >= desired
            )
            now = time.monotonic()
            if done:
                rolled_out_at = rolled_out_at or now
                if now - rolled_out_at > REGISTRATION_GRACE_S:
                    return counts
            if not told:
                told = True
                missing = ", ".join(n for n, c in counts.items() if not c or c == "0")
                ctx.wait_begins(
                    f"waiting for {DAEMONSET} to roll out and {missing} to advertise {resource}",
                    deadline - now,
                )
            await asyncio.sleep(1)


class ExistingPlugin:
    """An RDMA shared device plugin DaemonSet that is not the wizard's, with the resource
    names its ConfigMap's configList serves."""

    def __init__(self, namespace: str, name: str, configmap: str, resource_names: list[str]):
        self.namespace, self.name, self.configmap = namespace, name, configmap
        self.resource_names = resource_names

    @property
    def label(self) -> str:
        names = ", ".join(self.resource_names) or "no readable configList"
        return f"DaemonSet {self.namespace}/{self.name} (ConfigMap {self.configmap}: {names})"


async def existing_plugins(kube: Any) -> list[ExistingPlugin]:
    """Every DaemonSet in the cluster running the shared RDMA device plugin's image, other
    than the wizard's, with the resource names of the config.json it mounts."""
    found = []
    for ds in await kube.daemonsets(None):
        meta = ds.get("metadata", {})
        spec = ds.get("spec", {}).get("template", {}).get("spec", {})
        images = [c.get("image", "") for c in spec.get("containers", [])]
        if meta.get("name") == DAEMONSET or not any(PLUGIN_IMAGE_NAME in i for i in images):
            continue
        namespace = meta.get("namespace", "default")
        volumes = [v["configMap"]["name"] for v in spec.get("volumes", []) if "configMap" in v]
        names: list[str] = []
        for cm_name in volumes:
            live = await kube.configmap(namespace, cm_name) or {}
            try:
                config = json.loads((live.get("data") or {}).get("config.json") or "{}")
            except ValueError:
                continue
            entries = config.get("configList") if isinstance(config, dict) else None
            names += [
                str(e["resourceName"])
                for e in entries or []
                if isinstance(e, dict) and "resourceName" in e
            ]
        found.append(
            ExistingPlugin(namespace, meta.get("name", "?"), ", ".join(volumes) or "-", names)
        )
    return found


def evaluate_pod_rdma(logs: str, node: Node, report: Report, device: str | None = None) -> None:
    """The test pod must see the node's RDMA device with a port PORT_ACTIVE, link layer
    Ethernet (ibv_devinfo). ``rdma link`` names the netdev where the image has iproute2;
    the default image (nccl-tests) has only the verbs utilities, so it is not required.

    ``device``: the node's own RDMA device as irdma.verify found it on the host (its
    ``rdma_device``); when known, that device must be among the pod's ACTIVE ones, so that
    another active device (a foreign NIC the plugin also selected) does not pass for it.
    ibv_devinfo names the device as the host does (the shared plugin mounts the host's
    uverbs nodes; the hca_id is the kernel's ib_device name)."""
    try:
        devinfo = parse(parse_ibv_devinfo, logs)
    except ParseError:
        devinfo = None
    active = [
        d.hca_id
        for d in (devinfo.devices if devinfo is not None else [])
        if any(p.link_layer == "Ethernet" and p.state == "PORT_ACTIVE" for p in d.ports)
    ]
    if devinfo is None or not devinfo.devices:
        report.fail(
            "pod-rdma",
            "the RDMA test pod sees no RDMA device (ibv_devinfo lists none)",
            "check the plugin's selectors, IPC_LOCK and the resource request",
            gate="T04",
        )
        return
    try:
        netdevs = {link.device: link.netdev for link in parse(parse_rdma_link, logs).links}
    except ParseError:
        netdevs = {}
    if device is not None and device not in active:
        seen = ", ".join(active) or "none"
        report.fail(
            "pod-rdma",
            f"the pod on {node.name} does not see the node's RDMA device {device} ACTIVE with "
            f"link layer Ethernet (ACTIVE RoCE devices in the pod: {seen})",
            "the plugin's selectors must pick the E810's device (its ifNames/drivers); compare "
            "`ibv_devinfo` in the pod with the host's `rdma link`",
            gate="T04",
        )
        return
    if active:
        shown = [device] if device is not None else active
        names = ", ".join(f"{hca} ({netdevs[hca]})" if netdevs.get(hca) else hca for hca in shown)
        report.ok(
            "pod-rdma", f"a pod on {node.name} sees {names} ACTIVE, link layer Ethernet", gate="T04"
        )
    else:
        report.fail(
            "pod-rdma",
            f"the pod on {node.name} does not see an ACTIVE RoCE device",
            "compare `ibv_devinfo` in the pod with the host; check IPC_LOCK and the resource "
            "request",
            gate="T04",
        )


class RdmaPodTest(Step):
    id = "rdma-plugin.pod-test"
    title = "A pod with the RDMA resource sees the device"
    kind = StepKind.CHECK
    gates = ("T04",)
    requires = ("rdma-plugin.install",)
    reads = ("device_plugin",)
    # The node's own RDMA device, when irdma.verify recorded it (else any active RoCE port).
    uses = (RDMA_DEVICE,)
    explain = (
        "A pod requesting the RDMA resource, with capabilities.add [IPC_LOCK] and a "
        "memory-backed /dev/shm, runs `rdma link` and `ibv_devinfo` and sees the E810's RDMA "
        "device ACTIVE with link layer Ethernet."
    )

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        if node is None:
            return []
        return [
            k8s_object(
                f"nodes/{node.name}/k8s/rdma-test-pod.yaml",
                rdma_test_pod(site, node),
                f"Pod {TEST_NAMESPACE}/gnw-rdma-test-{node.name}",
                "a pod using the RDMA resource (IPC_LOCK, memory-backed /dev/shm)",
            )
        ]

    def commands(self, site: Site, node: Node | None) -> list[str]:
        name = node.name if node else "<node>"
        return [
            shown(["kubectl", "apply", "-f", f"nodes/{name}/k8s/rdma-test-pod.yaml"]),
            *finished_then_logs(TEST_NAMESPACE, f"pod/gnw-rdma-test-{name}", 300),
        ]

    async def verify(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        report = Report("T04")
        logs, phase = await run_test_pod(ctx, rdma_test_pod(ctx.site, ctx.node))
        if logs is None:
            report.fail(
                "pod-rdma", f"the RDMA test pod did not finish: {phase}", "kubectl describe the pod"
            )
        else:
            own = ctx.result_if_any(RDMA_DEVICE)
            evaluate_pod_rdma(logs, ctx.node, report, own or None)
        return report.findings


PHASE = Phase(
    id="rdma-plugin",
    number=9,
    title="RDMA device plugin",
    summary="Expose the irdma device to pods as a resource and prove a pod can use it.",
    steps=(InstallRdmaPlugin(), RdmaPodTest()),
)
