"""What a Helm release of the GPU Operator makes appear in the lab: the release itself,
the operator's and its operands' pods on every GPU node, the ClusterPolicy and NFD worker
the chart renders, the GPUs on the nodes and the container toolkit's containerd config; and
the older release a site may already run (fault operator-preinstalled)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from wizard.lab.existing import other_gpu_node
from wizard.lab.host import LabHost

if TYPE_CHECKING:
    from wizard.lab.lab import Lab


class GpuOperatorMixin:
    """The helm stand-in's upgrades and what the GPU Operator chart does with them."""

    def _helm_upgrade(self: Lab, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        key = f"{body['namespace']}/{body['name']}"
        previous = self.releases.get(key)
        release = {
            **body,
            "revision": (previous["revision"] + 1) if previous else 1,
            "status": "deployed",
        }
        self.releases[key] = release
        if body["chart"].endswith("gpu-operator"):
            self._gpu_operator_appears(body["namespace"])
            self._gpu_operator_objects(body["name"], body["namespace"], body["values"])
        return 200, release

    # A release of an older GPU Operator that the operator of the site installed by hand
    # (NVIDIA's install guide uses `helm install --generate-name`, hence the name), with user
    # values, and a GPU node of another generation that its driver runs on.
    PREINSTALLED = {
        "name": "gpu-operator-1764547200",
        "namespace": "gpu-operator",
        "chart": "nvidia/gpu-operator",
        "version": "v26.3.3",
        "values": {
            "driver": {"version": "580.126.20"},
            "devicePlugin": {"config": {"name": "time-slicing", "default": "any"}},
            "daemonsets": {"priorityClassName": "site-gpu-critical"},
        },
    }

    def _preinstall_operator(self: Lab) -> None:
        other_gpu_node(self)
        self._helm_upgrade(copy.deepcopy(self.PREINSTALLED))

    def _gpu_operator_objects(
        self: Lab, release: str, namespace: str, values: dict[str, Any]
    ) -> None:
        """The ClusterPolicy and the NFD worker DaemonSet the chart renders, as far as the
        wizard reads them: tolerations from the values or the chart's defaults (v26.7.0
        templates/clusterpolicy.yaml `daemonsets.tolerations`; the NFD subchart's
        templates/worker.yaml `worker.tolerations`; defaults from values.yaml), and the
        driver settings the ClusterPolicy carries only without the NVIDIADriver CRD."""
        operand_default = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        worker_default = [
            {"key": "node-role.kubernetes.io/control-plane", "operator": "Equal", "value": "",
             "effect": "NoSchedule"},
            *operand_default,
        ]  # fmt: skip
        driver_values = values.get("driver") or {}
        crd = bool((driver_values.get("nvidiaDriverCRD") or {}).get("enabled"))
        driver: dict[str, Any] = {"enabled": True, "useNvidiaDriverCRD": crd}
        if not crd:
            driver["kernelModuleType"] = driver_values.get("kernelModuleType", "auto")
        policy = {
            "apiVersion": "nvidia.com/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "cluster-policy", "labels": {"app.kubernetes.io/instance": release}},
            "spec": {
                "daemonsets": {"tolerations": (values.get("daemonsets") or {}).get("tolerations", operand_default)},
                "driver": driver,
            },
        }  # fmt: skip
        self.cluster.put("nvidia.com/v1", "clusterpolicies", policy)
        crd_values = driver_values.get("nvidiaDriverCRD") or {}
        if crd and crd_values.get("deployDefaultCR", True):
            # templates/nvidiadriver.yaml: the chart's fallback NVIDIADriver (default: true,
            # no nodeSelector) for every GPU node no other NVIDIADriver selects.
            self.cluster.put("nvidia.com/v1alpha1", "nvidiadrivers", {
                "apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver",
                "metadata": {"name": "default", "labels": {"app.kubernetes.io/instance": release}},
                "spec": {"default": True, "driverType": "gpu", "image": "driver",
                         "version": driver_values.get("version", "595.91.07"),
                         "kernelModuleType": driver_values.get("kernelModuleType", "auto")},
            })  # fmt: skip
        # The NFD subchart's fullname: the release name, suffixed with the chart name unless
        # it already contains it (node-feature-discovery templates/_helpers.tpl).
        chart = "node-feature-discovery"
        full = release if chart in release else f"{release}-{chart}"
        nfd = values.get(chart) or {}
        worker = {
            "metadata": {"name": f"{full}-worker", "namespace": namespace,
                         "labels": {"app.kubernetes.io/instance": release, "app.kubernetes.io/name": chart}},
            "spec": {"selector": {"matchLabels": {"role": "worker"}}, "template": {
                "metadata": {"labels": {"role": "worker"}},
                "spec": {"tolerations": (nfd.get("worker") or {}).get("tolerations", worker_default),
                         "containers": [{"name": "worker", "image": "lab", "command": ["nfd-worker"]}]}}},
        }  # fmt: skip
        self.cluster.put("apps/v1", "daemonsets", worker)

    def _gpu_operator_appears(self: Lab, namespace: str) -> None:
        if self.cluster.get("v1", "namespaces", "", namespace) is None:
            self.cluster.put("v1", "namespaces", {"metadata": {"name": namespace}})
        crash = "operator-crashloop" in self.faults
        self.cluster.put("v1", "pods", self._pod(
            namespace, "gpu-operator-657c5b798d-x7k2p", "cp-1", owner="ReplicaSet",
            ready=not crash, restarts=12 if crash else 0, waiting="CrashLoopBackOff" if crash else None))  # fmt: skip
        self.cluster.put("v1", "pods", self._pod(namespace, "gpu-operator-node-feature-discovery-master-d8597-cx849",
                                                 "cp-1", owner="ReplicaSet"))  # fmt: skip
        for index, host in enumerate(self.gpu_hosts()):
            suffix = f"{index:05x}"
            for component in ("nvidia-driver-daemonset", "nvidia-container-toolkit-daemonset",
                              "nvidia-device-plugin-daemonset", "nvidia-dcgm", "nvidia-dcgm-exporter",
                              "gpu-feature-discovery", "gpu-operator-node-feature-discovery-worker"):  # fmt: skip
                self.cluster.put(
                    "v1", "pods", self._pod(namespace, f"{component}-{suffix}", host.name)
                )
            self.cluster.put("v1", "pods", self._pod(namespace, f"nvidia-cuda-validator-{suffix}", host.name,
                                                     owner="Job", phase="Succeeded", ready=False))  # fmt: skip
            host.gpu_driver = True
            self._toolkit_configures(host)
            with self.cluster.lock:
                node = self.cluster.node(host.name)
                if node is not None:
                    count = str(host.gpus_present)
                    node["status"]["capacity"]["nvidia.com/gpu"] = count
                    node["status"]["allocatable"]["nvidia.com/gpu"] = count
                    node["metadata"]["labels"]["nvidia.com/gpu.present"] = "true"
        # The operands run on every GPU node the operator manages, not only the lab's own
        # (gpu-h100-01 of operator-preinstalled / existing-rdma-plugin): each DaemonSet
        # selects nodes by the operator's nvidia.com/gpu.present label.
        hosts = {h.name for h in self.gpu_hosts()}
        others = [n["metadata"]["name"] for n in self.cluster.list("v1", "nodes", None)
                  if n["metadata"].get("labels", {}).get("nvidia.com/gpu.present") == "true"
                  and n["metadata"]["name"] not in hosts]  # fmt: skip
        for index, name in enumerate(others, start=len(hosts)):
            for component in ("nvidia-driver-daemonset", "nvidia-container-toolkit-daemonset",
                              "nvidia-device-plugin-daemonset", "nvidia-dcgm", "nvidia-dcgm-exporter",
                              "gpu-feature-discovery", "gpu-operator-node-feature-discovery-worker"):  # fmt: skip
                self.cluster.put(
                    "v1", "pods", self._pod(namespace, f"{component}-{index:05x}", name)
                )

    def _toolkit_configures(self: Lab, host: LabHost) -> None:
        """containerd's config as Kubespray v2.29.1 templates it (version 3, no imports
        line: roles/container-engine/containerd/templates/config.toml.j2) after the
        container toolkit ran: the toolkit (v1.20.0, cmd/nvidia-ctk-installer .../containerd)
        writes the nvidia runtime into /etc/containerd/conf.d/99-nvidia.toml and prepends
        ``imports = ["/etc/containerd/conf.d/*.toml"]`` to config.toml. The fault
        containerd-imports-dropped is a later Kubespray run without the wizard's group_vars:
        config.toml templated again, the imports line gone, the drop-in left behind."""
        base = (
            'version = 3\nroot = "/var/lib/containerd"\nstate = "/run/containerd"\noom_score = 0\n\n'
            '[plugins]\n  [plugins."io.containerd.cri.v1.runtime".containerd]\n'
            '    default_runtime_name = "runc"\n'
            '    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]\n'
            '      runtime_type = "io.containerd.runc.v2"\n'
        )
        imports = 'imports = ["/etc/containerd/conf.d/*.toml"]\n'
        dropped = "containerd-imports-dropped" in self.faults
        host.files["/etc/containerd/config.toml"] = base if dropped else imports + base
        host.files["/etc/containerd/conf.d/99-nvidia.toml"] = (
            "version = 3\n\n"
            '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]\n'
            '  runtime_type = "io.containerd.runc.v2"\n\n'
            '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]\n'
            '  BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime"\n'
            "  SystemdCgroup = true\n"
        )
