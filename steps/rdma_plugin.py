"""Phase 9, the shared RDMA device plugin, and a pod that uses RDMA (T03, T04)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any

from steps.common import SHM_MOUNT, SHM_VOLUME, node_pod, pod_placement, q
from steps.gpu_operator import mirrored, run_test_pod
from steps.gpu_operator.values import mirror_ref
from wizard.artifacts import Artifact, k8s_object, k8s_yaml
from wizard.facts import ParseError, parse
from wizard.model import Finding, StepKind
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
    return [
        str(netdev)
        for node in ctx.site.nodes
        if (netdev := ctx.recorded("irdma.verify", node.name).get("rdma_netdev"))
        and netdev not in bonds
    ]


class InstallRdmaPlugin(Step):
    id = "rdma-plugin.install"
    title = "RDMA shared device plugin"
    kind = StepKind.APPLY
    gates = ("T03",)
    scope = Scope.CLUSTER
    # The DaemonSet's nodeSelector is the site's labels (daemonset() below): without
    # join.labels no plugin pod lands on the node and it never advertises the resource.
    requires = ("gpu-operator.verify", "join.labels")
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
            f"kubectl -n {ns} get configmap {CONFIGMAP} -o yaml",
            f"kubectl -n {ns} apply -f rdma-devices-configmap.yaml -f rdma-plugin-daemonset.yaml",
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
        if ctx.site.nic.profile != "intel-e810":
            raise NotAutomated
        kube = ctx.services.kube
        cm, ds = self._desired(ctx)
        ns = ctx.site.device_plugin.namespace
        live_cm = await kube.configmap(ns, CONFIGMAP)
        live_ds = next(
            (d for d in await kube.daemonsets(ns) if d["metadata"]["name"] == DAEMONSET), None
        )
        return [
            Change(
                k8s_object(
                    "cluster/k8s/rdma-devices-configmap.yaml",
                    cm,
                    f"ConfigMap {ns}/{CONFIGMAP}",
                    "plugin config",
                ),
                None if live_cm is None else k8s_yaml(project(live_cm, cm)),
            ),
            Change(
                k8s_object(
                    "cluster/k8s/rdma-plugin-daemonset.yaml",
                    ds,
                    f"DaemonSet {ns}/{DAEMONSET}",
                    "the plugin",
                ),
                None if live_ds is None else k8s_yaml(project(live_ds, ds)),
            ),
        ]

    async def apply(self, ctx: StepContext, changes: list[Change]) -> None:
        kube = ctx.services.kube
        cm, ds = self._desired(ctx)
        ns = ctx.site.device_plugin.namespace
        await kube.apply_configmap(ns, cm)
        await kube.apply_daemonset(ns, ds)

    async def verify(self, ctx: StepContext) -> list[Finding]:
        report = Report("T03")
        kube = ctx.services.kube
        resource = ctx.site.device_plugin.resource_name
        cm, _ = self._desired(ctx)
        live = await kube.configmap(ctx.site.device_plugin.namespace, CONFIGMAP)
        if live is None or live.get("data") != cm["data"]:
            report.fail(
                "config",
                f"ConfigMap {CONFIGMAP} differs from the desired config",
                "apply this step again",
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
            done = (
                status.get("observedGeneration", 0) >= generation
                and desired > 0
                and (
                    status.get("numberAvailable", 0) >= desired
                    and status.get("updatedNumberScheduled", 0) >= desired
                )
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


def evaluate_pod_rdma(logs: str, node: Node, report: Report) -> None:
    """The test pod must see the node's RDMA device ACTIVE with link layer Ethernet."""
    try:
        links = parse("rdma-link", logs)
    except ParseError:
        report.fail(
            "pod-rdma",
            "the RDMA test pod sees no RDMA link",
            "check the plugin's selectors",
            gate="T04",
        )
        return
    active = [link for link in links.links if link.state == "ACTIVE"]
    try:
        devinfo = parse("ibv-devinfo", logs)
    except ParseError:
        devinfo = None
    ethernet = devinfo is not None and any(
        p.link_layer == "Ethernet" and p.state == "PORT_ACTIVE"
        for d in devinfo.devices
        for p in d.ports
    )
    if active and ethernet:
        names = ", ".join(f"{link.device} ({link.netdev})" for link in active)
        report.ok(
            "pod-rdma", f"a pod on {node.name} sees {names} ACTIVE, link layer Ethernet", gate="T04"
        )
    else:
        report.fail(
            "pod-rdma",
            f"the pod on {node.name} does not see an ACTIVE RoCE device",
            "compare `rdma link` in the pod with the host; check IPC_LOCK and the resource request",
            gate="T04",
        )


class RdmaPodTest(Step):
    id = "rdma-plugin.pod-test"
    title = "A pod with the RDMA resource sees the device"
    kind = StepKind.CHECK
    gates = ("T04",)
    requires = ("rdma-plugin.install",)
    reads = ("device_plugin",)
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
        return [f"kubectl apply -f rdma-test-pod.yaml && kubectl logs gnw-rdma-test-{q(name)}"]

    async def verify(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        report = Report("T04")
        logs, phase = await run_test_pod(ctx, rdma_test_pod(ctx.site, ctx.node))
        if logs is None:
            report.fail(
                "pod-rdma", f"the RDMA test pod did not finish: {phase}", "kubectl describe the pod"
            )
        else:
            evaluate_pod_rdma(logs, ctx.node, report)
        return report.findings


PHASE = Phase(
    id="rdma-plugin",
    number=9,
    title="RDMA device plugin",
    summary="Expose the irdma device to pods as a resource and prove a pod can use it.",
    steps=(InstallRdmaPlugin(), RdmaPodTest()),
)
