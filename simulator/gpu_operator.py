"""What a Helm release of the GPU Operator makes appear in the lab: the release itself,
the operator's and its operands' pods on every GPU node, the ClusterPolicy and NFD worker
the chart renders, the GPUs on the nodes and the container toolkit's containerd config; and
the older release a site may already run (fault operator-preinstalled)."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from simulator.dcgm import exporter_page
from simulator.existing import other_gpu_node, pinned_release
from simulator.host import LabHost

if TYPE_CHECKING:
    from simulator.lab import Lab


class GpuOperator:
    """The helm stand-in's upgrades and what the GPU Operator chart does with them: the
    lab's ``operator``, a collaborator over the lab's cluster, hosts and releases."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab

    def helm_upgrade(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        key = f"{body['namespace']}/{body['name']}"
        previous = self.lab.releases.get(key)
        release = {
            **body,
            "revision": (previous["revision"] + 1) if previous else 1,
            "status": "deployed",
        }
        self.lab.releases[key] = release
        if body["chart"].endswith("gpu-operator"):
            # The same chart version and values render the same DaemonSet templates, and
            # the DaemonSet controller leaves pods of an unchanged template alone; a changed
            # template is rolled: each pod deleted and created again (kubernetes
            # pkg/controller/daemon/update.go, RollingUpdate by controller-revision-hash).
            rolled = previous is None or (previous.get("version"), previous.get("values")) != (
                body.get("version"),
                body.get("values"),
            )
            self.appears(body["namespace"], rolled=rolled)
            self.chart_objects(body["name"], body["namespace"], body["values"])
        return 200, release

    # A release of an older GPU Operator that the operator of the site installed by hand
    # (NVIDIA's install guide uses `helm install --generate-name`, hence the name), with user
    # values, and a GPU node of another generation that its driver runs on (fault
    # operator-preinstalled: the wizard's pinned version and values are an upgrade of it).
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

    def preinstall(self, which: str) -> None:
        """The release the cluster runs before the wizard: ``older`` (PREINSTALLED), or
        ``pinned`` (simulator/existing.py pinned_release)."""
        other_gpu_node(self.lab)
        if which == "older":
            self.helm_upgrade(copy.deepcopy(self.PREINSTALLED))
        else:
            self.helm_upgrade(pinned_release(self.lab.site_path, which))

    def chart_objects(self, release: str, namespace: str, values: dict[str, Any]) -> None:
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
        self.lab.cluster.put("nvidia.com/v1", "clusterpolicies", policy)
        crd_values = driver_values.get("nvidiaDriverCRD") or {}
        if crd and crd_values.get("deployDefaultCR", True):
            # templates/nvidiadriver.yaml: the chart's fallback NVIDIADriver (default: true,
            # no nodeSelector) for every GPU node no other NVIDIADriver selects.
            self.lab.cluster.put("nvidia.com/v1alpha1", "nvidiadrivers", {
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
        self.lab.cluster.put("apps/v1", "daemonsets", worker)

    OPERANDS = ("nvidia-driver-daemonset", "nvidia-container-toolkit-daemonset",
                "nvidia-device-plugin-daemonset", "nvidia-dcgm", "nvidia-dcgm-exporter",
                "gpu-feature-discovery", "gpu-operator-node-feature-discovery-worker")  # fmt: skip

    def appears(self, namespace: str, *, rolled: bool = True) -> None:
        """The operator and its operands on every GPU node in the cluster; ``rolled``: the
        release's templates changed, so the pods that exist are replaced (new uid)."""
        if self.lab.cluster.get("v1", "namespaces", "", namespace) is None:
            self.lab.cluster.put("v1", "namespaces", {"metadata": {"name": namespace}})
        crash = "operator-crashloop" in self.lab.faults
        for pod in (
            self.lab.cluster_objects.pod(namespace, "gpu-operator-657c5b798d-x7k2p", "cp-1", owner="ReplicaSet",
                      ready=not crash, restarts=12 if crash else 0,
                      waiting="CrashLoopBackOff" if crash else None),
            self.lab.cluster_objects.pod(namespace, "gpu-operator-node-feature-discovery-master-d8597-cx849", "cp-1",
                      owner="ReplicaSet"),
        ):  # fmt: skip
            if (
                rolled
                or self.lab.cluster.get("v1", "pods", namespace, pod["metadata"]["name"]) is None
            ):
                self.lab.cluster.put("v1", "pods", pod)
        for index, host in enumerate(self.lab.gpu_hosts()):
            if self.lab.cluster.node(host.name) is not None:
                self.operands_on(namespace, host.name, index, rolled=rolled)
        # The operands run on every GPU node the operator manages, not only the lab's own
        # (gpu-h100-01 of the default lab): each DaemonSet selects nodes by the operator's
        # nvidia.com/gpu.present label.
        hosts = {h.name for h in self.lab.gpu_hosts()}
        others = [n["metadata"]["name"] for n in self.lab.cluster.list("v1", "nodes", None)
                  if n["metadata"].get("labels", {}).get("nvidia.com/gpu.present") == "true"
                  and n["metadata"]["name"] not in hosts]  # fmt: skip
        for index, name in enumerate(others, start=len(hosts)):
            self.operands_on(namespace, name, index, rolled=rolled)

    def operands_on(self, namespace: str, node: str, index: int, *, rolled: bool) -> None:
        """The operand DaemonSets' pods on one node (and what they do to a lab host)."""
        suffix = f"{index:05x}"
        for component in self.OPERANDS:
            name = f"{component}-{suffix}"
            if rolled or self.lab.cluster.get("v1", "pods", namespace, name) is None:
                self.lab.cluster.put(
                    "v1", "pods", self.lab.cluster_objects.pod(namespace, name, node)
                )
        host = self.lab.hosts.get(node)
        if host is None or host.role != "gpu":
            return
        validator = f"nvidia-cuda-validator-{suffix}"
        if rolled or self.lab.cluster.get("v1", "pods", namespace, validator) is None:
            self.lab.cluster.put("v1", "pods", self.lab.cluster_objects.pod(namespace, validator, node, owner="Job",
                                                     phase="Succeeded", ready=False))  # fmt: skip
        host.state.gpu_driver = True
        self.toolkit_configures(host)
        with self.lab.cluster.lock:
            live = self.lab.cluster.node(host.name)
            if live is not None:
                count = str(host.state.gpus_present)
                live["status"]["capacity"]["nvidia.com/gpu"] = count
                live["status"]["allocatable"]["nvidia.com/gpu"] = count
                live["metadata"]["labels"]["nvidia.com/gpu.present"] = "true"

    def reaches(self, name: str) -> None:
        """A node that joins a cluster running the GPU Operator: NFD labels it (PCI vendor
        10de), the operator labels it nvidia.com/gpu.present, and every operand DaemonSet
        selects it (controllers/state_manager.go labelGPUNodes); nothing else is rolled."""
        for release in self.lab.releases.values():
            if str(release.get("chart", "")).endswith("gpu-operator"):
                index = [h.name for h in self.lab.gpu_hosts()].index(name)
                self.operands_on(release["namespace"], name, index, rolled=False)
                return

    def pod_proxy(self, pod: dict[str, Any], port: str, path: str) -> tuple[int, str]:
        """What a pod's server answers through the API server's pod proxy: dcgm-exporter on
        :9400 (the operator's assets/state-dcgm-exporter: containerPort 9400, its
        DCGM_EXPORTER_LISTEN ":9400") serves /metrics (simulator/dcgm.py) and 404s other
        paths (its Go http.ServeMux); nothing else in the lab listens."""
        app = pod.get("metadata", {}).get("labels", {}).get("app")
        host = self.lab.hosts.get(pod.get("spec", {}).get("nodeName") or "")
        if app != "nvidia-dcgm-exporter" or host is None or port != "9400":
            return 503, "connection refused"
        if pod.get("status", {}).get("phase") != "Running":
            return 503, "connection refused"
        if path.rstrip("/") != "/metrics":
            return 404, "404 page not found\n"
        return 200, exporter_page(host.state)

    def toolkit_configures(self, host: LabHost) -> None:
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
        dropped = "containerd-imports-dropped" in self.lab.faults
        host.files["/etc/containerd/config.toml"] = base if dropped else imports + base
        host.files["/etc/containerd/conf.d/99-nvidia.toml"] = (
            "version = 3\n\n"
            '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia]\n'
            '  runtime_type = "io.containerd.runc.v2"\n\n'
            '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.nvidia.options]\n'
            '  BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime"\n'
            "  SystemdCgroup = true\n"
        )
