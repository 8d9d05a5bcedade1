"""The lab on the real control plane (``lab --control-plane real``): the real processes judge
every API call; the lab adds only what a cluster gets from its machines and its vendors.

- the machines: the lab's kubelets (kubelets.py) register the same nodes the embedded lab
  seeds (cp-1, two CPU workers, the GPU nodes; wizard/lab/cluster.py) and run the pods bound
  to them with the embedded lab's host simulation (wizard/lab/workloads.py);
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
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from wizard.lab.controlplane.client import Api
from wizard.lab.controlplane.kubelets import Kubelets
from wizard.lab.controlplane.serve import ControlPlaneError, RealControlPlane
from wizard.lab.controlplane.vendors import Vendors
from wizard.lab.existing import pull_secret_objects

if TYPE_CHECKING:
    from wizard.lab.lab import Lab

SHARED_ENV = "GNW_SHARED"
CHART_REPO = "nvidia"


def charts_folder() -> Path:
    """The lab's stand-in for the vendor's chart repository: shared/refs/charts."""
    shared = os.environ.get(SHARED_ENV)
    root = Path(shared) if shared else Path(__file__).resolve().parents[4] / "shared"
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

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Path:
        """Serve it all; the helm the site file names."""
        plane = self.plane
        plane.start()
        assert plane.pki is not None
        self.api = Api(plane.url, plane.ssl_context(plane.pki.admin))
        self.vendors = Vendors(self.lab, self.api)
        self.kubelets = Kubelets(
            self.api,
            (str(plane.pki.kubelet_serving.cert), str(plane.pki.kubelet_serving.key)),
            str(plane.pki.ca),
            run_pod=self._run_pod,
            pod_logs=self.lab._pod_logs,
            plugin_resources=self._plugin_resources,
        )
        self._seed()
        self.kubelets.start()
        self.vendors.start()
        self._wait_for_service_accounts()
        plane.write_kubeconfig(self.lab.directory / "kubeconfig")
        return self._helm()

    def stop(self) -> None:
        if self.vendors is not None:
            self.vendors.stop()
            self.vendors = None
        if self.kubelets is not None:
            self.kubelets.stop()
            self.kubelets = None
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
        kubelets.register(lab._node_object("cp-1", "10.10.1.1", control_plane=True, gpu_host=None))
        for i in (1, 2):
            kubelets.register(
                lab._node_object(
                    f"cpu-worker-{i}", f"10.10.1.{10 + i}", control_plane=False, gpu_host=None
                )
            )
        if "not-joined" not in lab.faults:
            for host in lab.gpu_hosts():
                kubelets.register(
                    lab._node_object(host.name, host.rdma_ip, control_plane=False, gpu_host=host)
                )
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
        # The mirror's pull secret where the cluster's workloads already pull (as embedded).
        for secret in pull_secret_objects():
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
        self.lab._on_create("pods", pod)
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
        if host is None or "plugin-missing-resource" in self.lab.faults:
            return {}
        assert self.api is not None
        namespace = pod["metadata"]["namespace"]
        # The plugin reads the config.json of the ConfigMap its pod mounts at
        # /k8s-rdma-shared-dev-plugin (deployment/k8s/base/daemonset.yaml), whatever its name.
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
                    found := self.api.get_or_none(
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
        return self.lab.rdma_pools(host, config)

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
        threading.Thread(target=self.repo.serve_forever, daemon=True, name="lab-chart-repo").start()
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
