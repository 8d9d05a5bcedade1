"""The lab: a whole simulated site on this machine, for ``demo``, ``lab`` and the tests.

- one asyncssh server per GPU node and AIStor peer, each on its own loopback address
  (127.0.0.x) so the site file looks like a real one, in front of a stateful host model;
- a Kubernetes API server on loopback with an existing production cluster (a control plane,
  CPU workers, an H100 node with its own RDMA plugin, a GPU Operator release, workloads
  behind PDBs: simulator/existing.py) that the GPU nodes join with the stand-in Kubespray's
  scale.yml (fault greenfield: a cluster built for the wizard, the GPU nodes already in it);
- a ``helm`` stand-in that records releases and makes the GPU Operator appear;
- a site file, an SSH key, a known_hosts file and a kubeconfig written into a folder.

The lab composes four collaborators, each over the lab's state: ``cluster_objects`` (the
cluster's seeded objects and the nodes that join it, simulator/cluster.py), ``workloads``
(pods, Jobs, MPIJobs and DaemonSets as they are created, workloads.py), ``operator`` (the
GPU Operator's release and what its chart makes appear, gpu_operator.py) and ``site_files``
(the files the wizard is given, site_files.py); the node counts and addresses are
simulator/addresses.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from simulator import persist
from simulator.addresses import MAX_NODES, MAX_PEERS, _gpu_addresses, _peer_addresses
from simulator.cluster import KUBERNETES_VERSION, ClusterObjects
from simulator.effects import EffectLog
from simulator.existing import OTHER_GPU_NODE, variant_of
from simulator.faults import check_faults
from simulator.gpu_operator import GpuOperator
from simulator.host import LabHost
from simulator.kubeapi import ClusterState, KubeApiServer
from simulator.kubespray import JOIN_PATH, write_checkout
from simulator.perf import Broker
from simulator.shell import LabShell
from simulator.site_files import SiteFiles
from simulator.sshd import LabSshServer
from simulator.workloads import Workloads
from wizard.private import private_dir


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
    # Crash tests (simulator/effects.py): record every change received; kill on each new one.
    record_effects: Path | None = None
    kill_control: Path | None = None
    effects: EffectLog | None = None
    shell: LabShell | None = None  # the hosts' /bin/sh for scripts (simulator/shell.py)
    kubespray_inventory: Path | None = None  # the stand-in checkout's (GPU nodes not joined)
    # Kept in ``directory`` across restarts (the demo with a state directory): the same
    # ports, keys, hosts and cluster when started again (simulator/persist.py).
    persist: bool = False
    # "embedded": the lab's own API server (kubeapi.py) and helm stand-in; "real": etcd,
    # kube-apiserver, controllers, scheduler and helm built from their Go modules, the lab
    # playing the kubelets (simulator/controlplane/).
    control_plane: str = "embedded"
    real: Any = None
    site_files: SiteFiles = field(init=False, repr=False)
    cluster_objects: ClusterObjects = field(init=False, repr=False)
    operator: GpuOperator = field(init=False, repr=False)
    workloads: Workloads = field(init=False, repr=False)
    _saver: asyncio.Task | None = field(default=None, repr=False)
    _client_key: asyncssh.SSHKey | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # Absolute: the site file it writes names the helm stand-in, the key and the
        # kubeconfig, and a site file's relative paths are read from its own folder (a
        # relative `demo --state-dir` doubled them, and T00 found no helm).
        self.directory = Path(self.directory).absolute()
        check_faults(self.faults)
        if not 1 <= self.nodes <= MAX_NODES:
            raise ValueError(f"the lab serves 1 to {MAX_NODES} GPU nodes, not {self.nodes}")
        if not 1 <= self.peers <= MAX_PEERS:
            raise ValueError(f"the lab serves 1 to {MAX_PEERS} AIStor peers, not {self.peers}")
        if self.control_plane not in ("embedded", "real"):
            raise ValueError(f"control plane {self.control_plane!r}: embedded or real")
        if self.control_plane == "real" and self.persist:
            raise ValueError("a kept lab (--state-dir) runs on the embedded control plane only")
        if self.record_effects is not None or self.kill_control is not None:
            self.effects = EffectLog(self.record_effects, self.kill_control)
        # The site file, kubeconfig and helm stand-in the wizard is given (site_files.py).
        self.site_files = SiteFiles(self)
        # The cluster's seeded objects and the nodes that join it (cluster.py).
        self.cluster_objects = ClusterObjects(self)
        # The helm stand-in's releases and what the GPU Operator chart makes of them.
        self.operator = GpuOperator(self)
        # Pods, Jobs, MPIJobs and DaemonSets run or answered as they are created.
        self.workloads = Workloads(self)

    @property
    def site_path(self) -> Path:
        return self.directory / self.site_name

    # Thin forwarding for simulator/existing.py and simulator/controlplane/lab_side.py, which
    # other work edits now: a Node and a Pod object as the lab's cluster has them.
    def _node_object(
        self, name: str, ip: str, *, control_plane: bool, gpu_host: LabHost | None
    ) -> dict:
        return self.cluster_objects.node_object(
            name, ip, control_plane=control_plane, gpu_host=gpu_host
        )

    def _pod(self, namespace: str, name: str, node: str | None, **status: Any) -> dict:
        return self.cluster_objects.pod(namespace, name, node, **status)

    def gpu_hosts(self) -> list[LabHost]:
        return [h for h in self.hosts.values() if h.role == "gpu"]

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> Path:
        # 0700 when the lab makes its folder or owns it; never a shared folder the site file
        # was put in (`lab --write-site /tmp/s.yaml`: /tmp keeps its 1777).
        private_dir(self.directory)
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
        if self.control_plane == "real":
            from simulator.controlplane.lab_side import RealSide

            self.real = RealSide(self)
            try:
                helm = self.real.start()
            except BaseException:
                await self.stop()  # the hosts already listen; the control plane is stopped
                raise
            self.site_files.write_site(key_path, helm)
            try:
                if variant_of(self.faults).operator is not None:
                    self.real.preinstall_operator()  # reads the site file: after it
            except BaseException:
                await self.stop()
                raise
            self._client_key = client_key
            return self.site_path
        if saved is not None:
            with self.cluster.lock:
                self.cluster.objects.update(saved.objects)
                self.cluster._rv = saved.resource_version
        else:
            self.cluster_objects.seed()
        self.api = KubeApiServer(self.cluster, port=saved.api_port if saved else 0)
        self.api.httpd.effects = self.effects  # type: ignore[attr-defined]
        self.api.add_lab_handler("GET", "/lab/v1/helm/releases", lambda _: (200, self.releases))
        self.api.add_lab_handler("POST", "/lab/v1/helm/upgrade", self.operator.helm_upgrade)
        self.api.add_lab_handler(
            "GET",
            "/lab/v1/hosts",
            lambda _: (200, {n: h.state.snapshot() for n, h in self.hosts.items()}),
        )
        self.cluster.pod_logs = self.workloads.pod_logs
        self.cluster.pod_proxy = self.operator.pod_proxy
        self.cluster.on_create.append(self.workloads.on_create)
        self.api.start()
        self.site_files.write_kubeconfig()
        helm = self.site_files.write_helm()
        variant = variant_of(self.faults)
        if not variant.joined:
            self.api.add_lab_handler("POST", JOIN_PATH, self.cluster_objects.kubespray_join)
            existing = [("cp-1", "10.10.1.1"), ("cpu-worker-1", "10.10.1.11"),
                        ("cpu-worker-2", "10.10.1.12")]  # fmt: skip
            if variant.other_gpu_node:
                existing.append(OTHER_GPU_NODE)
            self.kubespray_inventory = write_checkout(
                self.directory / "kubespray", self.api.url, existing
            )
        self.site_files.write_site(key_path, helm)
        if variant.operator is not None and saved is None:
            self.operator.preinstall(variant.operator)  # reads the site file: after it
        self._client_key = client_key
        if self.persist:
            self.save()
            self._saver = asyncio.create_task(persist.keep_saving(self, SAVE_EVERY_S))
        return self.site_path

    # -- kept across restarts (persist) ---------------------------------------------------------

    def save(self) -> None:
        """Write what this lab is now into its directory (see simulator/persist.py)."""
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
        if self.real is not None:
            self.real.stop()
            self.real = None
        if self.api is not None:
            self.api.stop()
            self.api = None

    async def __aenter__(self) -> Lab:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


SAVE_EVERY_S = 1.0  # a kept lab saves at most this often, and only after a change


def _saved_host(saved: persist.Saved | None, fresh: LabHost) -> LabHost:
    """The host as saved (its files, modules, QoS, machine-id...), or the fresh one."""
    if saved is not None and fresh.name in saved.hosts:
        return LabHost.from_state(saved.hosts[fresh.name])
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
