"""Phase 9, the shared RDMA device plugin, and a pod that uses RDMA (T03, T04)."""

from __future__ import annotations

from steps.common import q
from wizard.model import StepKind
from wizard.plan import Phase, Scope, Step
from wizard.site import Node, Site


class InstallRdmaPlugin(Step):
    id = "rdma-plugin.install"
    title = "RDMA shared device plugin"
    kind = StepKind.APPLY
    gates = ("T03",)
    scope = Scope.CLUSTER
    reads = ("device_plugin", "registry", "labels")
    explain = (
        "ConfigMap rdma-devices (config.json) with the site's resource name and rdmaHcaMax; "
        "selectors from what the node shows (`rdma link` netdevs, vendor 8086, driver ice), "
        "never a hard-coded interface; a DaemonSet (plugin >= 1.5.2, older versions reject "
        "Intel NICs) with a nodeSelector on the GPU label. Node allocatable then shows the "
        "resource. No Network Operator on an E810 (ConnectX/BlueField only)."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        ns = q(site.device_plugin.namespace)
        return [
            f"kubectl -n {ns} get configmap rdma-devices -o yaml",
            f"kubectl -n {ns} apply -f rdma-devices-configmap.yaml -f rdma-plugin-daemonset.yaml",
        ]


class RdmaPodTest(Step):
    id = "rdma-plugin.pod-test"
    title = "A pod with the RDMA resource sees the device"
    kind = StepKind.CHECK
    gates = ("T03", "T04")
    requires = ("rdma-plugin.install",)
    reads = ("device_plugin",)
    explain = (
        "Allocatable shows the RDMA resource on the node; a pod requesting it, with "
        "capabilities.add [IPC_LOCK] and a memory-backed /dev/shm, runs `rdma link` and "
        "`ibv_devinfo` and sees the E810's RDMA device ACTIVE."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        name = q(node.name) if node else "<node>"
        resource = site.device_plugin.resource_name
        return [
            f"kubectl get node {name} -o jsonpath='{{.status.allocatable}}'  # {resource}",
            "kubectl logs <rdma-test-pod>  # rdma link; ibv_devinfo",
        ]


PHASE = Phase(
    id="rdma-plugin",
    number=9,
    title="RDMA device plugin",
    summary="Expose the irdma device to pods as a resource and prove a pod can use it.",
    steps=(InstallRdmaPlugin(), RdmaPodTest()),
)
