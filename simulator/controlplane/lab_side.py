"""The lab on the real control plane (``lab --control-plane real``): the real processes judge
every API call; the lab adds only what a cluster gets from its machines and its vendors.

- the machines: the lab's kubelets (kubelets.py), each with its node's own identity
  (``system:node:NAME``), register the same nodes the embedded lab seeds (cp-1, two CPU
  workers, the GPU nodes; simulator/cluster.py) and run the pods bound to them with the
  embedded lab's host simulation (simulator/workloads.py);
- what the site already runs: Cilium's DaemonSet and the MPIJob CRD, created through the API
  (the real DaemonSet controller and scheduler then place Cilium's pods);
- the vendor's chart repository: the GPU Operator chart of ../shared/refs/charts/, packaged
  by the real helm and served on loopback as an HTTP chart repository named ``nvidia``
  (NVIDIA's install guide: ``helm repo add nvidia https://helm.ngc.nvidia.com/nvidia``);
- the real helm, behind a small ``bin/helm`` that points it at the lab's own helm folders.
"""

from __future__ import annotations

import functools
import json
import os
import re
import stat
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from simulator.controlplane.client import Api
from simulator.controlplane.kubelets import Kubelets
from simulator.controlplane.serve import ControlPlaneError, RealControlPlane
from simulator.controlplane.vendors import Vendors
from simulator.existing import (
    OTHER_GPU_NODE,
    SITE_TAINT,
    connectx_pools,
    other_gpu_node_object,
    pinned_release,
    pull_secret_objects,
    upstream_plugin_objects,
    variant_of,
    workload_objects,
)
from simulator.kubeapi import SHUTDOWN_POLL_S
from simulator.kubespray import JOIN_PATH, write_checkout

if TYPE_CHECKING:
    from simulator.lab import Lab

SHARED_ENV = "GNW_SHARED"
CHART_REPO = "nvidia"


def charts_folder() -> Path:
    """The lab's stand-in for the vendor's chart repository: shared/refs/charts."""
    shared = os.environ.get(SHARED_ENV)
    root = Path(shared) if shared else Path(__file__).resolve().parents[3] / "shared"
    return root / "refs" / "charts"


class RealSide:
    """Starts and stops the real control plane for one lab, and plays its machines."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.plane = RealControlPlane(lab.directory / "control-plane")
        self.api: Api | None = None
        self.kubelets: Kubelets | None = None
        self.repo: ThreadingHTTPServer | None = None
        self.vendors: Vendors | None = None
        self.join: _JoinServer | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Path:
        """Serve it all; the helm the site file names."""
        plane = self.plane
        plane.start()
        assert plane.pki is not None
        self.api = Api(plane.url, plane.ssl_context(plane.pki.admin))
        self.vendors = Vendors(self.lab, self.api, plane.ssl_context())
        self.kubelets = Kubelets(
            self.api,
            lambda node: Api(plane.url, plane.ssl_context(plane.pki.node(node))),
            (str(plane.pki.kubelet_serving.cert), str(plane.pki.kubelet_serving.key)),
            str(plane.pki.ca),
            run_pod=self._run_pod,
            pod_logs=self.lab.workloads.pod_logs,
            plugin_resources=self._plugin_resources,
        )
        self._seed()
        self.kubelets.start()
        self.vendors.start()
        self._wait_for_service_accounts()
        plane.write_kubeconfig(self.lab.directory / "kubeconfig")
        self._kubectl()
        return self._helm()

    def preinstall_operator(self) -> None:
        """The default lab's existing release (simulator/existing.py pinned_release),
        installed by the real helm from the lab's chart repository, as the site installed it."""
        release = pinned_release(self.lab.site_path, variant_of(self.lab.faults).operator or "")
        values = self.lab.directory / "existing-gpu-operator-values.yaml"
        values.write_text(json.dumps(release["values"]))
        values.chmod(0o600)
        self._run_helm(
            self.lab.directory / "bin" / "helm", "upgrade", "--install", release["name"],
            release["chart"], "--namespace", release["namespace"], "--create-namespace",
            "--version", release["version"], "--values", str(values), "--wait", "--timeout", "5m",
            "--kubeconfig", str(self.lab.directory / "kubeconfig"),
        )  # fmt: skip

    def _join(self, name: str) -> bool:
        """scale.yml's join of one node: its kubelet registers it; False when already in."""
        host = self.lab.hosts.get(name)
        assert self.kubelets is not None
        if host is None or host.role != "gpu" or name in self.kubelets.nodes:
            return False
        self.kubelets.register(
            self.lab._node_object(name, host.state.rdma_ip, control_plane=False, gpu_host=host)
        )
        return True

    def stop(self) -> None:
        if self.join is not None:
            self.join.stop()
            self.join = None
        # The kubelets first: a pod they run may ask the vendors what it was planned to do.
        if self.kubelets is not None:
            self.kubelets.stop()
            self.kubelets = None
        if self.vendors is not None:
            self.vendors.stop()
            self.vendors = None
        if self.repo is not None:
            self.repo.shutdown()
            self.repo.server_close()
            self.repo = None
        self.plane.stop()

    def _wait_for_service_accounts(self, timeout: float = 120.0) -> None:
        """Until the service account controller made each namespace's ``default`` account:
        before it, the ServiceAccount admission plugin refuses every pod (403)."""
        assert self.api is not None
        deadline = time.monotonic() + timeout
        for namespace in ("default", "kube-system"):
            path = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
            while self.api.get_or_none(path) is None:
                if time.monotonic() > deadline:
                    raise ControlPlaneError(
                        f"no default service account in {namespace} after {timeout:.0f} s: "
                        f"see {self.plane.folder / 'logs' / 'kube-controller-manager.log'}"
                    )
                time.sleep(0.2)

    # -- the site as it stands -------------------------------------------------------------------

    def _seed(self) -> None:
        lab, kubelets, api = self.lab, self.kubelets, self.api
        assert kubelets is not None and api is not None
        variant = variant_of(lab.faults)
        if variant.operator == "older":
            raise ControlPlaneError(
                "fault operator-preinstalled needs GPU Operator chart v26.3.3, which the real "
                f"control plane's chart repository ({charts_folder()}) does not hold; run it on "
                "the embedded control plane"
            )
        kubelets.register(lab._node_object("cp-1", "10.10.1.1", control_plane=True, gpu_host=None))
        existing = [("cp-1", "10.10.1.1")]
        for i in (1, 2):
            worker = lab._node_object(
                f"cpu-worker-{i}", f"10.10.1.{10 + i}", control_plane=False, gpu_host=None
            )
            if variant.workloads and worker["metadata"]["name"] == SITE_TAINT[0]:
                # Registered with it, as kubelet --register-with-taints does.
                worker["spec"] = {"taints": [dict(SITE_TAINT[1])]}
            kubelets.register(worker)
            existing.append((worker["metadata"]["name"], f"10.10.1.{10 + i}"))
        if variant.other_gpu_node:
            kubelets.register(other_gpu_node_object(lab))
            existing.append(OTHER_GPU_NODE)
        if variant.joined:
            for host in lab.gpu_hosts():
                kubelets.register(
                    lab._node_object(
                        host.name, host.state.rdma_ip, control_plane=False, gpu_host=host
                    )
                )
        else:
            # The stand-in Kubespray's scale.yml joins them through the lab's own endpoint,
            # which registers the node as its kubelet would once kubeadm join ran.
            self.join = _JoinServer(self._join)
            lab.kubespray_inventory = write_checkout(
                lab.directory / "kubespray", self.join.url, existing
            )
        if variant.rdma_plugin:
            for obj in upstream_plugin_objects():
                kind = obj["kind"].lower() + "s"
                group = "/api/v1" if obj["apiVersion"] == "v1" else f"/apis/{obj['apiVersion']}"
                api.ensure(f"{group}/namespaces/kube-system/{kind}", obj)
        if variant.workloads:
            for path, obj in workload_objects():
                api.ensure(path, obj)
        if "no-mpi-operator" not in lab.faults:
            # kubeflow/mpi-operator manifests/base/kubeflow.org_mpijobs.yaml (v2beta1), its
            # schema cut to "any object" (the lab does not validate MPIJobs' fields).
            api.ensure("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", {
                "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "mpijobs.kubeflow.org"},
                "spec": {"group": "kubeflow.org", "scope": "Namespaced",
                         "names": {"kind": "MPIJob", "plural": "mpijobs", "singular": "mpijob",
                                   "listKind": "MPIJobList"},
                         "versions": [{"name": "v2beta1", "served": True, "storage": True,
                                       "schema": {"openAPIV3Schema": {
                                           "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
            })  # fmt: skip
            assert self.vendors is not None
            self.vendors.install_mpi_operator()
        # The mirror's pull secret where the cluster's workloads already pull (as embedded).
        for secret in pull_secret_objects(faults=lab.faults):
            namespace = secret["metadata"]["namespace"]
            api.ensure(f"/api/v1/namespaces/{namespace}/secrets", secret)
        # cilium install/kubernetes/cilium/templates/cilium-agent/daemonset.yaml: the agent
        # tolerates every taint (operator: Exists) so that it runs on every node.
        api.ensure("/apis/apps/v1/namespaces/kube-system/daemonsets", {
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "cilium", "namespace": "kube-system", "labels": {"k8s-app": "cilium"}},
            "spec": {"selector": {"matchLabels": {"k8s-app": "cilium"}}, "template": {
                "metadata": {"labels": {"k8s-app": "cilium"}},
                "spec": {"tolerations": [{"operator": "Exists"}],
                         "containers": [{"name": "cilium-agent", "image": "quay.io/cilium/cilium:v1.17.6"}]}}},
        })  # fmt: skip

    # -- the machines' side of a pod ---------------------------------------------------------------

    def _run_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        """The embedded lab's simulation of a pod on its host; a Job's pod runs to its end
        (the embedded lab's Jobs run their pod at once, restartPolicy Never)."""
        meta = pod.get("metadata", {})
        assert self.vendors is not None
        planned = self.vendors.planned.get((meta.get("namespace"), meta.get("name")))
        if planned is not None:
            return {**planned, "containerStatuses": _statuses(pod, planned["phase"])}
        if (meta.get("labels") or {}).get("app") == "gpu-operator" and (
            "operator-crashloop" in self.lab.faults
        ):
            # As the embedded lab's operator-crashloop: the operator's container restarting.
            crash = self.lab._pod(meta["namespace"], meta["name"], None, ready=False, restarts=12,
                                  waiting="CrashLoopBackOff")  # fmt: skip
            return {"phase": "Running", "containerStatuses": [
                {**crash["status"]["containerStatuses"][0], "name": c.get("name", "main"),
                 "image": c.get("image", "")} for c in pod["spec"].get("containers", [])]}  # fmt: skip
        owners = meta.get("ownerReferences", [])
        if any(o.get("kind") == "Job" for o in owners):
            pod["spec"]["restartPolicy"] = "Never"
        self.lab.workloads.on_create("pods", pod)
        return pod["status"]

    def _plugin_resources(self, node: str, pod: dict[str, Any]) -> dict[str, str]:
        """The RDMA shared device plugin (k8s-rdma-shared-dev-plugin) registering its pools
        with this node's kubelet: the pools of its ConfigMap, with the device count the
        embedded lab computes for this host."""
        assert self.vendors is not None
        operand = self.vendors.operand_started(node, pod)
        if operand:
            return operand
        owners = pod.get("metadata", {}).get("ownerReferences", [])
        if not any(o.get("kind") == "DaemonSet" and "rdma" in o.get("name", "") for o in owners):
            return {}
        host = self.lab.hosts.get(node)
        if node != OTHER_GPU_NODE[0] and (
            host is None or "plugin-missing-resource" in self.lab.faults
        ):
            return {}
        assert self.kubelets is not None
        namespace = pod["metadata"]["namespace"]
        # The plugin reads the config.json of the ConfigMap its pod mounts at
        # /k8s-rdma-shared-dev-plugin (deployment/k8s/base/daemonset.yaml), whatever its name:
        # the node's kubelet reads it to mount it (the Node authorizer lets a node read the
        # ConfigMaps its pods mount, and no other).
        mounted = [
            v["configMap"].get("name")
            for v in pod.get("spec", {}).get("volumes", [])
            if isinstance(v.get("configMap"), dict)
        ]
        configmap = next(
            (
                found
                for name in mounted
                if name
                and (
                    found := self.kubelets.api_of(node).get_or_none(
                        f"/api/v1/namespaces/{quote(namespace)}/configmaps/{quote(name)}"
                    )
                )
            ),
            None,
        )
        try:
            config = json.loads(((configmap or {}).get("data") or {}).get("config.json", "{}"))
        except ValueError:
            return {}
        if host is None:  # gpu-h100-01: its ConnectX NICs (simulator/existing.py)
            return connectx_pools(config)
        return self.lab.workloads.rdma_pools(host, config)

    def _kubectl(self) -> Path:
        """The lab's bin folder (beside helm) carries kubectl v1.33, built with the control
        plane, so what runs with that folder on PATH (the exported Ansible play's drain and
        uncordon, an operator's shell) talks to the API server with its own minor version."""
        link = self.lab.directory / "bin" / "kubectl"
        link.parent.mkdir(exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(self.plane.kubectl)
        return link

    # -- helm and the chart repository ----------------------------------------------------------

    def _helm(self) -> Path:
        folder = self.lab.directory / "helm"
        for sub in ("config", "cache", "data", "repo"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        wrapper = self.lab.directory / "bin" / "helm"
        wrapper.parent.mkdir(exist_ok=True)
        env = {
            "HELM_CONFIG_HOME": folder / "config",
            "HELM_CACHE_HOME": folder / "cache",
            "HELM_DATA_HOME": folder / "data",
        }
        lines = [
            "#!/bin/sh",
            "# gpu-node-wizard lab: the real helm, with the lab's own helm folders.",
        ]
        lines += [f"export {k}='{v}'" for k, v in env.items()]
        lines += [f"exec '{self.plane.helm}' \"$@\"", ""]
        wrapper.write_text("\n".join(lines))
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
        charts = charts_folder()
        sources = sorted(p for p in charts.glob("*") if (p / "Chart.yaml").is_file())
        if not sources:
            raise ControlPlaneError(
                f"no chart in {charts}: the real control plane's chart repository is "
                f"shared/refs/charts (set {SHARED_ENV} to the shared/ folder)"
            )
        repo = folder / "repo"
        for source in sources:
            # The tag's source tree carries placeholders (Chart.yaml version v1.0.0-devel,
            # appVersion main-latest); the published chart is that tree packaged with the
            # release's version (the folder's suffix) as both, as NVIDIA's release does.
            released = re.search(r"-(v\d+\.\d+\.\d+)$", source.name)
            stamp = ["--version", released[1], "--app-version", released[1]] if released else []
            self._run_helm(wrapper, "package", str(source), *stamp, "--destination", str(repo))
        handler = functools.partial(_QuietFiles, directory=str(repo))
        self.repo = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(
            target=self.repo.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_S},
            daemon=True, name="lab-chart-repo",
        ).start()  # fmt: skip
        url = f"http://127.0.0.1:{self.repo.server_address[1]}"
        self._run_helm(wrapper, "repo", "index", str(repo), "--url", url)
        self._run_helm(wrapper, "repo", "add", "--force-update", CHART_REPO, url)
        return wrapper

    @staticmethod
    def _run_helm(helm: Path, *args: str) -> str:
        result = subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise ControlPlaneError(f"helm {' '.join(args[:2])}: {result.stderr.strip()}")
        return result.stdout


def _statuses(pod: dict[str, Any], phase: str) -> list[dict[str, Any]]:
    done = phase in ("Succeeded", "Failed")
    return [
        {"name": c.get("name", "main"), "ready": not done, "restartCount": 0,
         "image": c.get("image", ""), "imageID": "",
         "state": {"terminated": {"exitCode": 0 if phase == "Succeeded" else 1,
                                  "reason": "Completed" if phase == "Succeeded" else "Error"}}
         if done else {"running": {}}}
        for c in pod.get("spec", {}).get("containers", [])
    ]  # fmt: skip


class _QuietFiles(SimpleHTTPRequestHandler):
    """The chart repository's files; the lab's output stays the wizard's."""

    def log_message(self, *args: object) -> None:
        pass


class _JoinServer:
    """The lab's endpoint for the stand-in Kubespray's scale.yml (simulator/kubespray.py),
    on loopback: POST {"name": NODE} joins that lab GPU node."""

    def __init__(self, join: Any) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(min(length, 65536)) or b"{}")
                    name = str(body.get("name", "")) if isinstance(body, dict) else ""
                except ValueError:
                    name = ""
                if self.path != JOIN_PATH or not name:
                    self.send_response(404)
                    self.end_headers()
                    return
                changed = owner.join(name)
                data = json.dumps({"changed": changed}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.join = join
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_S},
            daemon=True, name="lab-join",
        ).start()  # fmt: skip
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
