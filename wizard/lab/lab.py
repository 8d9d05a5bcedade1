"""The lab: a whole simulated site on this machine, for ``demo``, ``lab`` and the tests.

- one asyncssh server per GPU node and AIStor peer, each on its own loopback address
  (127.0.0.x) so the site file looks like a real one, in front of a stateful host model;
- a Kubernetes API server on loopback with a control plane, CPU workers and the GPU nodes
  (joined, as if the operator had run Kubespray's scale.yml);
- a ``helm`` stand-in that records releases and makes the GPU Operator appear;
- a site file, an SSH key, a known_hosts file and a kubeconfig written into a folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import shlex
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh
import yaml

from wizard.lab import persist
from wizard.lab.effects import EffectLog
from wizard.lab.faults import check_faults
from wizard.lab.host import LabHost
from wizard.lab.kubeapi import ClusterState, KubeApiServer
from wizard.lab.kubespray import JOIN_PATH, write_checkout
from wizard.lab.nccl import inter_node_log, single_node_log
from wizard.lab.perf import PERFTEST, Broker, PerftestArgs, PerftestUsageError, client_output
from wizard.lab.shell import LabShell
from wizard.lab.sshd import LabSshServer

KUBERNETES_VERSION = "1.33.5"
# Loopback addresses 127.0.2.1 ... give each GPU node its own sshd; 250 fit the lab's plan.
MAX_NODES = 250
LAB_TOKEN = "lab-token-not-a-secret"
# A thousand simulated GPU nodes: each is one listening socket and, while the wizard probes
# it, one connection, so the lab needs about two descriptors per node (see _descriptors).
MAX_NODES = 1000
MAX_PEERS = 250  # 127.0.1.1-250


@dataclass
class Lab:
    directory: Path
    nodes: int = 1
    faults: tuple[str, ...] = ()
    peers: int = 1
    reboot_seconds: float = 2.0
    site_name: str = "site.yaml"
    slow_seconds: float = 1.0  # the slow-ssh fault's delay per command
    hosts: dict[str, LabHost] = field(default_factory=dict)
    servers: dict[str, LabSshServer] = field(default_factory=dict)
    cluster: ClusterState = field(default_factory=lambda: ClusterState(KUBERNETES_VERSION))
    api: KubeApiServer | None = None
    releases: dict[str, dict[str, Any]] = field(default_factory=dict)
    broker: Broker = field(default_factory=Broker)
    # What a finished pod printed, when it ran at creation (perftest clients, MPI launchers).
    pod_outputs: dict[tuple[str, str], str] = field(default_factory=dict)
    # Crash tests (wizard/lab/effects.py): record every change received; kill on each new one.
    record_effects: Path | None = None
    kill_control: Path | None = None
    effects: EffectLog | None = None
    shell: LabShell | None = None  # the hosts' /bin/sh for scripts (wizard/lab/shell.py)
    kubespray_inventory: Path | None = None  # the stand-in checkout's (fault not-joined)
    # Kept in ``directory`` across restarts (the demo with a state directory): the same
    # ports, keys, hosts and cluster when started again (wizard/lab/persist.py).
    persist: bool = False
    _saver: asyncio.Task | None = field(default=None, repr=False)
    _client_key: asyncssh.SSHKey | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        check_faults(self.faults)
        if not 1 <= self.nodes <= MAX_NODES:
            raise ValueError(f"the lab serves 1 to {MAX_NODES} GPU nodes, not {self.nodes}")
        if not 1 <= self.peers <= MAX_PEERS:
            raise ValueError(f"the lab serves 1 to {MAX_PEERS} AIStor peers, not {self.peers}")
        if self.record_effects is not None or self.kill_control is not None:
            self.effects = EffectLog(self.record_effects, self.kill_control)

    @property
    def site_path(self) -> Path:
        return self.directory / self.site_name

    def gpu_hosts(self) -> list[LabHost]:
        return [h for h in self.hosts.values() if h.role == "gpu"]

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> Path:
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        saved = (
            persist.load(self.directory, self.nodes, self.peers, self.faults)
            if self.persist
            else None
        )
        if saved is not None:
            client_key = asyncssh.import_private_key(saved.client_key)
            self.releases.update(saved.releases)
        else:
            client_key = asyncssh.generate_private_key("ssh-ed25519", comment="gpu-node-wizard-lab")
        key_path = self.directory / "id_ed25519"
        key_path.write_bytes(client_key.export_private_key())
        os.chmod(key_path, 0o600)
        public = client_key.export_public_key().decode()
        faults = set(self.faults)
        _descriptors(4 * (self.nodes + self.peers) + 256)
        self.shell = LabShell(self.hosts)
        await self.shell.start()
        known_hosts = []
        for i in range(self.nodes):
            name = f"gpu-b300-{i + 1:02d}"
            host = LabHost(name, "gpu", *_gpu_addresses(i), faults=faults)
            # All of 127.0.0.0/8 is loopback on Linux: 127.0.2-5.x hold 1000 nodes.
            known_hosts.append(
                await self._serve(
                    _saved_host(saved, host), f"127.0.{2 + i // 250}.{1 + i % 250}", public, saved
                )
            )
        for i in range(self.peers):
            name = f"aistor-{i + 1:02d}"
            peer_faults = {f for f in faults if f.startswith("peer-")}
            host = LabHost(name, "peer", *_peer_addresses(i), gpu_count=0,
                           faults=peer_faults)  # fmt: skip
            known_hosts.append(
                await self._serve(_saved_host(saved, host), f"127.0.1.{1 + i}", public, saved)
            )
        (self.directory / "known_hosts").write_text("".join(known_hosts))
        if saved is not None:
            with self.cluster.lock:
                self.cluster.objects.update(saved.objects)
                self.cluster._rv = saved.resource_version
        else:
            self._seed_cluster()
        self.api = KubeApiServer(self.cluster, port=saved.api_port if saved else 0)
        self.api.httpd.effects = self.effects  # type: ignore[attr-defined]
        self.api.add_lab_handler("GET", "/lab/v1/helm/releases", lambda _: (200, self.releases))
        self.api.add_lab_handler("POST", "/lab/v1/helm/upgrade", self._helm_upgrade)
        self.api.add_lab_handler(
            "GET",
            "/lab/v1/hosts",
            lambda _: (200, {n: h.snapshot() for n, h in self.hosts.items()}),
        )
        if "operator-preinstalled" in self.faults:
            self._preinstall_operator()
        self.cluster.pod_logs = self._pod_logs
        self.cluster.on_create.append(self._on_create)
        self.api.start()
        self._write_kubeconfig()
        helm = self._write_helm()
        if "not-joined" in self.faults:
            self.api.add_lab_handler("POST", JOIN_PATH, self._kubespray_join)
            existing = [("cp-1", "10.10.1.1"), ("cpu-worker-1", "10.10.1.11"),
                        ("cpu-worker-2", "10.10.1.12")]  # fmt: skip
            self.kubespray_inventory = write_checkout(
                self.directory / "kubespray", self.api.url, existing
            )
        self._write_site(key_path, helm)
        self._client_key = client_key
        if self.persist:
            self.save()
            self._saver = asyncio.create_task(persist.keep_saving(self, SAVE_EVERY_S))
        return self.site_path

    # -- kept across restarts (persist) ---------------------------------------------------------

    def save(self) -> None:
        """Write what this lab is now into its directory (see wizard/lab/persist.py)."""
        persist.save(self.directory, persist.capture(self))

    async def _serve(
        self,
        host: LabHost,
        address: str,
        client_public: str,
        saved: persist.Saved | None = None,
    ) -> str:
        if saved is not None and host.name in saved.host_keys:
            host_key = asyncssh.import_private_key(saved.host_keys[host.name])
        else:
            host_key = asyncssh.generate_private_key("ssh-ed25519")
        server = LabSshServer(
            host,
            address,
            host_key,
            client_public,
            reboot_seconds=self.reboot_seconds,
            slow_seconds=self.slow_seconds,
            broker=self.broker,
            effects=self.effects,
            shell=self.shell,
        )
        port = await _listen(server, saved.ssh_ports.get(host.name, 0) if saved else 0)
        self.hosts[host.name] = host
        self.servers[host.name] = server
        return f"[{address}]:{port} {host_key.export_public_key().decode().strip()}\n"

    async def stop(self) -> None:
        if self._saver is not None:
            self._saver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._saver
            self._saver = None
            with contextlib.suppress(OSError):
                self.save()
        for server in self.servers.values():
            await server.stop()
        if self.shell is not None:
            await self.shell.stop()
            self.shell = None
        if self.api is not None:
            self.api.stop()
            self.api = None

    async def __aenter__(self) -> Lab:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- files for the wizard ----------------------------------------------------------------------

    def _write_kubeconfig(self) -> None:
        assert self.api is not None
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "lab", "cluster": {"server": self.api.url}}],
            "users": [{"name": "lab-admin", "user": {"token": LAB_TOKEN}}],
            "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "lab-admin"}}],
            "current-context": "lab",
        }
        path = self.directory / "kubeconfig"
        path.write_text(yaml.safe_dump(kubeconfig, sort_keys=False))
        os.chmod(path, 0o600)

    def _write_helm(self) -> Path:
        bin_dir = self.directory / "bin"
        bin_dir.mkdir(exist_ok=True)
        helm = bin_dir / "helm"
        root = Path(__file__).resolve().parents[2]
        helm.write_text(
            f"#!{sys.executable}\n"
            "# gpu-node-wizard lab: a helm stand-in that records releases in the lab.\n"
            f"import sys\nsys.path.insert(0, {str(root)!r})\n"
            "from wizard.lab.helm_standin import main\nsys.exit(main(sys.argv[1:]))\n"
        )
        helm.chmod(helm.stat().st_mode | stat.S_IXUSR)
        return helm

    def _write_site(self, key_path: Path, helm: Path) -> None:
        nodes = []
        for name, server in self.servers.items():
            host = self.hosts[name]
            if host.role != "gpu":
                continue
            nodes.append(
                {
                    "name": name,
                    "host": server.address,
                    "ssh": {"port": server.port},
                    "os": host.os,
                    "gpu_count": host.gpu_count,
                    "bond": {"name": host.bond_name, "ports": [p.name for p in host.ports]},
                    "rdma_ip": host.rdma_ip,
                }
            )
        peers = [
            {"name": name, "host": server.address, "ssh": {"port": server.port},
             "rdma_ip": self.hosts[name].rdma_ip}
            for name, server in self.servers.items()
            if self.hosts[name].role == "peer"
        ]  # fmt: skip
        site = {
            "name": "lab",
            "ssh": {
                "user": "root",
                "key": key_path.name,
                "known_hosts": "known_hosts",
                "config": "none",
                "connect_timeout": 5.0,
                "command_timeout": 60.0,
            },
            "cluster": {
                "kubeconfig": "kubeconfig",
                "kubernetes_version": "1.33",
                "helm": str(helm),
                **(
                    {
                        "kubespray": {
                            "checkout": "kubespray",
                            "inventory": str(self.kubespray_inventory.relative_to(self.directory)),
                        }
                    }
                    if self.kubespray_inventory
                    else {}
                ),
            },
            "nodes": nodes,
            "aistor": {"peers": peers},
            "registry": {"mirror": "nexus.lab.internal:8443/nvidia", "pull_secret": "nexus-pull"},
            "max_parallel_nodes": min(64, max(16, self.nodes)),
            "measurements": {
                "duration_s": 2,
                "soak_seconds": 3,
                "aistor_tcp": {
                    "command": "warp get --host=aistor --duration=10s",
                    "metric_regex": r"Average: (?P<value>[\d.]+) GiB/s",
                    "unit": "GiB/s",
                },
                "aistor_direct": {
                    "command": "warp get --host=aistor --duration=10s --rdma",
                    "metric_regex": r"Average: (?P<value>[\d.]+) GiB/s",
                    "unit": "GiB/s",
                },
                "vllm": {
                    "command": "vllm bench serve --model lab --num-prompts 64",
                    "metric_regex": r"Output token throughput \(tok/s\):\s+(?P<value>[\d.]+)",
                    "unit": "tok/s",
                },
            },
        }
        header = (
            "# gpu-node-wizard lab site: simulated hosts on loopback, written by `lab`/`demo`.\n"
            f"# Faults: {', '.join(self.faults) or 'none'}\n"
        )
        self.site_path.write_text(header + yaml.safe_dump(site, sort_keys=False))

    # -- the simulated cluster --------------------------------------------------------------------------

    def _node_object(
        self, name: str, ip: str, *, control_plane: bool, gpu_host: LabHost | None
    ) -> dict:
        runtime = "containerd://2.1.4"
        kernel = "6.12.0-124.8.1.el10_2.x86_64"
        if gpu_host is not None:
            kernel = gpu_host.kernel
            if "containerd-1.7" in gpu_host.faults:
                runtime = "containerd://1.7.27"
        labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }
        if control_plane:
            labels["node-role.kubernetes.io/control-plane"] = ""
        resources = {
            "cpu": "128",
            "memory": "2113515520Ki",
            "pods": "110",
            "ephemeral-storage": "936Gi",
        }
        return {
            "metadata": {"name": name, "labels": labels},
            "spec": {"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}
            if control_plane
            else {},
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                "message": "kubelet is posting ready status"}],
                "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
                "capacity": dict(resources),
                "allocatable": dict(resources),
                "nodeInfo": {
                    "architecture": "amd64", "bootID": "", "containerRuntimeVersion": runtime,
                    "kernelVersion": kernel, "kubeProxyVersion": "", "kubeletVersion": f"v{KUBERNETES_VERSION}",
                    "machineID": "", "operatingSystem": "linux",
                    "osImage": "Red Hat Enterprise Linux 10.2 (Coughlan)", "systemUUID": "",
                },
            },
        }  # fmt: skip

    def _seed_cluster(self) -> None:
        for ns in ("default", "kube-system", "kube-public"):
            self.cluster.put("v1", "namespaces", {"metadata": {"name": ns}})
        self.cluster.put(
            "v1", "nodes", self._node_object("cp-1", "10.10.1.1", control_plane=True, gpu_host=None)
        )
        for i in (1, 2):
            node = self._node_object(
                f"cpu-worker-{i}", f"10.10.1.{10 + i}", control_plane=False, gpu_host=None
            )
            self.cluster.put("v1", "nodes", node)
        for host in self.gpu_hosts():
            if "not-joined" in self.faults:
                break  # they join when the stand-in Kubespray's scale.yml runs
            self.cluster.put(
                "v1",
                "nodes",
                self._node_object(host.name, host.rdma_ip, control_plane=False, gpu_host=host),
            )
        if "no-mpi-operator" not in self.faults:
            # kubeflow/mpi-operator manifests/base/kubeflow.org_mpijobs.yaml (v2beta1).
            self.cluster.put("apiextensions.k8s.io/v1", "customresourcedefinitions", {
                "metadata": {"name": "mpijobs.kubeflow.org"},
                "spec": {"group": "kubeflow.org", "scope": "Namespaced",
                         "names": {"kind": "MPIJob", "plural": "mpijobs"},
                         "versions": [{"name": "v2beta1", "served": True, "storage": True}]}})  # fmt: skip
        self.cluster.put(
            "apps/v1",
            "daemonsets",
            {"metadata": {"name": "cilium", "namespace": "kube-system"},
             "spec": {"selector": {"matchLabels": {"k8s-app": "cilium"}}, "template": {
                 "metadata": {"labels": {"k8s-app": "cilium"}},
                 "spec": {"containers": [{"name": "cilium-agent", "image": "quay.io/cilium/cilium:v1.17.6"}]}}},
             "status": {"currentNumberScheduled": 3 + self.nodes, "desiredNumberScheduled": 3 + self.nodes,
                        "numberMisscheduled": 0, "numberReady": 3 + self.nodes}},
        )  # fmt: skip

    def _pod(self, namespace: str, name: str, node: str | None, *, owner: str = "DaemonSet",
             phase: str = "Running", ready: bool = True, restarts: int = 0, waiting: str | None = None) -> dict:  # fmt: skip
        state: dict[str, Any] = {"running": {"startedAt": "2026-11-30T00:00:00Z"}}
        if waiting:
            state = {
                "waiting": {
                    "reason": waiting,
                    "message": "back-off 5m0s restarting failed container",
                }
            }
        if phase == "Succeeded":
            state = {"terminated": {"exitCode": 0, "reason": "Completed"}}
        return {
            "metadata": {"name": name, "namespace": namespace, "labels": {"app": name.rsplit("-", 1)[0]},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner, "name": name.rsplit("-", 1)[0],
                                              "uid": "lab"}]},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "lab"}]},
            "status": {"phase": phase, "containerStatuses": [{
                "name": "main", "ready": ready, "restartCount": restarts, "image": "lab", "imageID": "lab",
                "state": state}]},
        }  # fmt: skip

    def _helm_upgrade(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
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

    def _kubespray_join(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The stand-in scale.yml's join: the GPU host of that name becomes a cluster node
        (Ready, as the lab's seeded nodes are); a node already in the cluster is unchanged."""
        name = str((body or {}).get("name", ""))
        host = self.hosts.get(name)
        if host is None or host.role != "gpu":
            return 200, {"changed": False, "skipped": f"{name} is not a lab GPU node"}
        if self.cluster.node(name) is not None:
            return 200, {"changed": False}
        node = self._node_object(name, host.rdma_ip, control_plane=False, gpu_host=host)
        self.cluster.put("v1", "nodes", node)
        return 200, {"changed": True}

    def _preinstall_operator(self) -> None:
        other = self._node_object("gpu-h100-01", "10.10.1.40", control_plane=False, gpu_host=None)
        other["metadata"]["labels"]["nvidia.com/gpu.present"] = "true"
        other["status"]["capacity"]["nvidia.com/gpu"] = "8"
        other["status"]["allocatable"]["nvidia.com/gpu"] = "8"
        self.cluster.put("v1", "nodes", other)
        self._helm_upgrade(copy.deepcopy(self.PREINSTALLED))

    def _gpu_operator_objects(self, release: str, namespace: str, values: dict[str, Any]) -> None:
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

    def _gpu_operator_appears(self, namespace: str) -> None:
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

    def _toolkit_configures(self, host: LabHost) -> None:
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

    def _on_create(self, plural: str, obj: dict[str, Any]) -> None:
        if plural == "pods":
            spec = obj.setdefault("spec", {})
            node = spec.get("nodeName") or spec.get("nodeSelector", {}).get(
                "kubernetes.io/hostname"
            )
            spec["nodeName"] = node
            done = spec.get("restartPolicy") == "Never"
            failed = done and not self._run_pod_now(obj)
            obj["status"] = {
                "phase": "Failed" if failed else "Succeeded" if done else "Running",
                "containerStatuses": [
                    {"name": c.get("name", "main"), "ready": not done, "restartCount": 0,
                     "image": c.get("image", ""), "imageID": "",
                     "state": {"terminated": {"exitCode": 0, "reason": "Completed"}} if done
                     else {"running": {"startedAt": "2026-11-30T00:00:00Z"}}}
                    for c in spec.get("containers", [])
                ],
            }  # fmt: skip
        elif plural == "mpijobs":
            self._mpijob_launcher(obj)
        elif plural == "daemonsets" and "rdma" in obj["metadata"]["name"]:
            self._rdma_plugin_appears(obj)
        elif plural == "jobs":
            template = obj.get("spec", {}).get("template", {})
            name = obj["metadata"]["name"]
            pod = {
                "metadata": {"name": f"{name}-x7k2p", "namespace": obj["metadata"]["namespace"],
                             "labels": {"job-name": name, **template.get("metadata", {}).get("labels", {})}},
                "spec": {**template.get("spec", {}), "restartPolicy": "Never"},
            }  # fmt: skip
            self._on_create("pods", pod)
            self.cluster.put("v1", "pods", pod)
            obj["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}

    def _run_pod_now(self, pod: dict[str, Any]) -> bool:
        """Run a pod whose work involves another host at once (a perftest client reaching
        a server on the AIStor peer); False when it failed. Other pods run at log time."""
        host = self.hosts.get(pod["spec"].get("nodeName") or "")
        containers = pod["spec"].get("containers", [])
        if host is None or len(containers) != 1:
            return True
        container = containers[0]
        argv = list(container.get("command") or []) + list(container.get("args") or [])
        if not argv or argv[0] not in PERFTEST:
            return True
        key = (pod["metadata"].get("namespace", "default"), pod["metadata"]["name"])
        output, ok = self._perftest_in_pod(host, container, argv)
        self.pod_outputs[key] = output
        return ok

    def _perftest_in_pod(
        self, host: LabHost, container: dict[str, Any], argv: list[str]
    ) -> tuple[str, bool]:
        """A perftest client in a container: it sees the GPU and the RDMA devices only if
        the pod asked for them, and registers memory only with IPC_LOCK."""
        limits = container.get("resources", {}).get("limits", {})
        capabilities = container.get("securityContext", {}).get("capabilities", {}).get("add", [])
        try:
            args = PerftestArgs.parse(argv)
        except PerftestUsageError as exc:
            return f"{exc}\n Parser function exited with Error\n", False
        if args.cuda is not None and "perftest-no-cuda" in self.faults:
            return (
                "Perftest was built without CUDA support\n Parser function exited with Error\n",
                False,
            )
        if not _asks_for_rdma(limits) or not host.rdma_devices:
            # perftest_resources.c ctx_find_dev(): no /dev/infiniband in the container.
            return " Did not detect devices \n If device exists, check if driver is up\n", False
        if args.cuda is not None and not limits.get("nvidia.com/gpu"):
            # (simplified) without a GPU the container toolkit injects no CUDA driver.
            return (
                "initializing CUDA\ncuInit() failed: CUDA driver version is insufficient\n",
                False,
            )
        if args.cuda is not None and not args.dmabuf and "nvidia_peermem" not in host.modules:
            # Without DMA-BUF, ibv_reg_mr of GPU memory needs nvidia-peermem (the GPU
            # Operator's driver.rdma.enabled, off by design here): the kernel refuses it.
            return " Couldn't allocate MR\n Failed to create MR\n", False
        if "IPC_LOCK" not in capabilities:
            # perftest_resources.c create_mr(): ibv_reg_mr fails without locked memory.
            return " Couldn't allocate MR\n Failed to create MR\n", False
        if args.server is None or not self.broker.connect_threadsafe(
            args.server, args.port, host.name
        ):
            return (f"Couldn't connect to {args.server}:{args.port}\n"
                    "Unable to open file descriptor for socket connection Unable to init the socket connection\n"), False  # fmt: skip
        return client_output(args, host), True

    def _mpijob_launcher(self, job: dict[str, Any]) -> None:
        """What the MPI Operator does with an MPIJob: a launcher pod (labelled with the job
        name and role, kubeflow/mpi-operator v2beta1) that runs mpirun across the workers;
        here the launcher's log is computed from where the workers would land."""
        meta = job["metadata"]
        name, namespace = meta["name"], meta.get("namespace", "default")
        labels = {
            "training.kubeflow.org/job-name": name,
            "training.kubeflow.org/job-role": "launcher",
        }
        for old in self.cluster.list("v1", "pods", namespace):  # garbage collection of a rerun
            if old["metadata"].get("labels", {}).get("training.kubeflow.org/job-name") == name:
                self.cluster.delete("v1", "pods", namespace, old["metadata"]["name"])
        specs = job.get("spec", {}).get("mpiReplicaSpecs", {})
        worker = specs.get("Worker", {}).get("template", {}).get("spec", {})
        launcher = specs.get("Launcher", {}).get("template", {}).get("spec", {})
        terms = worker.get("affinity", {}).get("nodeAffinity", {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])  # fmt: skip
        nodes = [
            v for t in terms for e in t.get("matchExpressions", []) for v in e.get("values", [])
        ]
        container = (worker.get("containers") or [{}])[0]
        limits = container.get("resources", {}).get("limits", {})
        env = {
            e["name"]: e.get("value")
            for e in (launcher.get("containers") or [{}])[0].get("env", [])
        }
        hosts = [self.hosts.get(n) for n in nodes]
        rdma_everywhere = all(h is not None and h.rdma_devices for h in hosts) and _asks_for_rdma(
            limits
        )
        gpus = int(job.get("spec", {}).get("slotsPerWorker", 1))
        log = inter_node_log(
            nodes, gpus, hca=env.get("NCCL_IB_HCA") or "irdma0", tc=env.get("NCCL_IB_TC"),
            socket="nccl-socket" in self.faults or not rdma_everywhere,
            no_transport="nccl-no-transport" in self.faults,
        )  # fmt: skip
        pod_name = f"{name}-launcher-x7k2p"
        self.pod_outputs[(namespace, pod_name)] = log
        pod = {
            "metadata": {"name": pod_name, "namespace": namespace, "labels": labels},
            "spec": {**launcher, "restartPolicy": "Never", "nodeName": "cpu-worker-1"},
            "status": {"phase": "Failed" if "No transport found" in log else "Succeeded"},
        }
        self.cluster.put("v1", "pods", pod)

    def _rdma_plugin_appears(self, daemonset: dict[str, Any]) -> None:
        if "plugin-missing-resource" in self.faults:
            return
        namespace = daemonset["metadata"]["namespace"]
        configmap = self.cluster.get("v1", "configmaps", namespace, "rdma-devices")
        if configmap is None:
            return
        try:
            config = json.loads(configmap.get("data", {}).get("config.json", "{}"))
        except ValueError:
            return
        selector = (
            daemonset.get("spec", {}).get("template", {}).get("spec", {}).get("nodeSelector", {})
        )
        with self.cluster.lock:
            for host in self.gpu_hosts():
                node = self.cluster.node(host.name)
                labels = node["metadata"].get("labels", {}) if node else {}
                if node is None or any(labels.get(k) != v for k, v in selector.items()):
                    continue
                for entry in config.get("configList", []):
                    prefix = entry.get("resourcePrefix", config.get("resourcePrefix", "rdma"))
                    resource = f"{prefix}/{entry['resourceName']}"
                    # rdma_device_spec.go: a device without its rdma_cm, umad and uverbs
                    # character devices is skipped, and the pool advertises 0.
                    devices = host.infiniband_devices()
                    complete = all(
                        any(d.startswith(n) for d in devices) for n in ("rdma_cm", "umad", "uverbs")
                    )
                    count = (
                        str(entry.get("rdmaHcaMax", 1000))
                        if host.rdma_devices and complete
                        else "0"
                    )
                    node["status"]["capacity"][resource] = count
                    node["status"]["allocatable"][resource] = count

    def _pod_logs(self, pod: dict[str, Any]) -> str:
        """What the pod's command prints, run against the simulated host it is on."""
        meta = pod.get("metadata", {})
        stored = self.pod_outputs.get((meta.get("namespace", ""), meta.get("name", "")))
        if stored is not None:
            return stored
        host = self.hosts.get(pod.get("spec", {}).get("nodeName") or "")
        if host is None:
            return ""
        output = []
        for container in pod.get("spec", {}).get("containers", []):
            argv = list(container.get("command") or []) + list(container.get("args") or [])
            script = argv[-1] if argv[:2] in (["sh", "-c"], ["bash", "-c"]) else shlex.join(argv)
            if "all_reduce_perf" in script:
                env = {e["name"]: e.get("value") for e in container.get("env", [])}
                gpus = int(
                    container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 1)
                )
                rdma = any(
                    "/" in k and not k.startswith("nvidia.com/")
                    for k in container.get("resources", {}).get("limits", {})
                )
                hca = env.get("NCCL_IB_HCA") or (
                    host.rdma_devices[0][0] if rdma and host.rdma_devices else None
                )
                output.append(single_node_log(host.name, min(gpus, host.gpus_present),
                                              p2p=env.get("NCCL_P2P_DISABLE") != "1",
                                              shm=env.get("NCCL_SHM_DISABLE") != "1", hca=hca))  # fmt: skip
                continue
            gpus = container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
            for part in script.replace("&&", ";").replace("\n", ";").split(";"):
                if not part.strip():
                    continue
                words = shlex.split(part.strip())
                if words[:1] == ["nvidia-smi"] and gpus:
                    # The container toolkit puts nvidia-smi into a container given GPUs.
                    result = host.nvidia_smi(words[1:])
                else:
                    result = host.execute(part.strip())
                output.append(result.stdout + result.stderr)
        return "".join(output)


def _asks_for_rdma(limits: dict[str, Any]) -> bool:
    """A container limit on an extended resource other than the GPU: the RDMA device plugin's
    pool (the lab serves one), which brings the /dev/infiniband devices into the container."""
    return any(key != "nvidia.com/gpu" and "/" in key for key in limits)


SAVE_EVERY_S = 1.0  # a kept lab saves at most this often, and only after a change


def _saved_host(saved: persist.Saved | None, fresh: LabHost) -> LabHost:
    """The host as saved (its files, modules, QoS, machine-id...), or the fresh one."""
    if saved is not None and fresh.name in saved.hosts:
        return saved.hosts[fresh.name]
    return fresh


async def _listen(server: LabSshServer, port: int) -> int:
    """Listen on the saved port; if another program took it meanwhile, on a new one (the
    wizard then sees a changed site file and says which steps it resets)."""
    if port:
        try:
            return await server.start(port)
        except OSError:
            pass
    return await server.start()


def _gpu_addresses(index: int) -> tuple[str, str]:
    """GPU node ``index``'s management and bond (RoCE) addresses: racks of 200 nodes, one
    /24 each (a routed leaf per rack), so that a thousand nodes get valid, distinct
    addresses; the first 200 keep 10.10.0.21+ and 192.168.50.21+."""
    rack, slot = divmod(index, 200)
    return f"10.10.{rack}.{21 + slot}", f"192.168.{50 + rack}.{21 + slot}"


def _peer_addresses(index: int) -> tuple[str, str]:
    """AIStor peer ``index``'s addresses: .225-.254 of the racks' /24s, which no GPU node
    uses (theirs end at .220)."""
    rack, slot = divmod(index, 30)
    return f"10.20.{rack}.{31 + slot}", f"192.168.{50 + rack}.{225 + slot}"


def _descriptors(needed: int) -> None:
    """Raise this process's soft open-files limit towards ``needed`` (up to the hard limit):
    a 1000-node lab holds a listening socket per node and a connection per probed node,
    past the common soft default of 1024. A limit that cannot be raised is left as it is;
    the lab then fails on accept with the OS's own EMFILE message."""
    try:
        import resource
    except ImportError:  # not on Linux/macOS
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
