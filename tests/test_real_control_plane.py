"""The real tier: the lab served on the real control plane (etcd, kube-apiserver,
controller-manager, scheduler, helm built by `lab --build-control-plane`), the lab playing
only the kubelets. Skipped with the reason when the binaries are not built here; in CI
(.ci/run builds them first) a missing build fails instead of skipping."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

import pytest
import yaml

from simulator.controlplane.serve import UNPRIVILEGED_TOKEN
from simulator.controlplane.versions import HELM_VERSION, KUBERNETES_VERSION
from tests.real_tier import ServedLab, mpijob, require_real
from wizard.transports.kube import KubeClient, KubeError


def kube(lab: ServedLab) -> KubeClient:
    return KubeClient(str(lab.kubeconfig))


async def test_version_is_the_real_kube_apiservers(real_lab):
    info = await kube(real_lab).version()
    assert info["git_version"] == KUBERNETES_VERSION
    assert (info["major"], info["minor"]) == ("1", KUBERNETES_VERSION.split(".")[1])


async def test_an_invalid_object_is_rejected_with_422(real_lab):
    client = kube(real_lab)
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "no-containers"},
           "spec": {"containers": []}}  # fmt: skip
    with pytest.raises(KubeError) as caught:
        await client.create_pod("default", bad)
    assert caught.value.status == 422
    assert "spec.containers" in str(caught.value)


async def test_lab_nodes_are_registered_ready_with_leases(real_lab):
    client = kube(real_lab)
    nodes = {n["metadata"]["name"]: n for n in await client.nodes()}
    assert set(nodes) == {"cp-1", "cpu-worker-1", "cpu-worker-2", "gpu-b300-01"}
    for node in nodes.values():
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"
    lease = await client.request(
        "GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/gpu-b300-01"
    )
    assert lease["spec"]["holderIdentity"] == "gpu-b300-01"


async def test_a_pod_runs_on_its_simulated_host_and_its_log_comes_through_the_kubelet(real_lab):
    """The scheduler binds the pod (no nodeName given), the lab's kubelet runs it on the
    simulated host, and pods/log is fetched by the API server from the kubelet endpoint."""
    client = kube(real_lab)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "uname", "namespace": "default"},
           "spec": {"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": "gpu-b300-01"},
                    "containers": [{"name": "main", "image": "busybox", "command": ["sh", "-c", "uname -r"]}]}}  # fmt: skip
    await client.create_pod("default", pod)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        live = await client.pod("default", "uname")
        if live and live.get("status", {}).get("phase") == "Succeeded":
            break
        await asyncio.sleep(0.5)
    assert live["spec"]["nodeName"] == "gpu-b300-01"
    assert live["status"]["phase"] == "Succeeded"
    log = await client.pod_log("default", "uname")
    assert log.strip() == "6.12.0-124.8.1.el10_2.x86_64"
    await client.delete_pod("default", "uname")


async def test_rbac_is_on_and_a_denial_names_verb_resource_and_namespace(real_lab, tmp_path):
    config = yaml.safe_load(real_lab.kubeconfig.read_text())
    config["users"][0]["user"] = {"token": UNPRIVILEGED_TOKEN}
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    client = KubeClient(str(path))
    with pytest.raises(KubeError) as caught:
        await client.pods("gpu-operator")
    assert caught.value.status == 403
    message = str(caught.value)
    assert "list" in message and "pods" in message and "gpu-operator" in message


def test_the_real_helm_is_the_pinned_build(real_lab):
    result = subprocess.run([str(real_lab.helm), "version", "--short"], capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert result.stdout.startswith(HELM_VERSION), result.stdout + result.stderr


def test_the_real_helm_installs_the_gpu_operator_chart_from_the_lab_repository(real_lab):
    helm, kubeconfig = str(real_lab.helm), str(real_lab.kubeconfig)
    install = subprocess.run(
        [helm, "--kubeconfig", kubeconfig, "upgrade", "--install", "gpu-operator",
         "nvidia/gpu-operator", "--version", "v26.7.0", "--namespace", "gpu-operator",
         "--create-namespace"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    listed = subprocess.run([helm, "--kubeconfig", kubeconfig, "list", "-A", "-o", "json"],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    releases = json.loads(listed.stdout)
    assert [(r["name"], r["namespace"], r["chart"], r["status"]) for r in releases] == [
        ("gpu-operator", "gpu-operator", "gpu-operator-v26.7.0", "deployed")
    ]
    # The chart's CRDs (crds/) were installed with it: helm applies crds/ before the
    # templates and never lists them in the release's manifest, so the API server is
    # asked for the CRD itself.
    crd = asyncio.run(
        KubeClient(kubeconfig).request(
            "GET",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/clusterpolicies.nvidia.com",
        )
    )
    assert (crd["spec"]["group"], crd["spec"]["names"]["kind"]) == ("nvidia.com", "ClusterPolicy")
    conditions = {c["type"]: c["status"] for c in crd.get("status", {}).get("conditions", [])}
    assert conditions.get("Established") == "True"


def test_a_killed_lab_leaves_no_control_plane_process(tmp_path):
    """kill -9 of the lab: its children (etcd, kube-apiserver, ...) get SIGKILL from the
    kernel (PR_SET_PDEATHSIG) and nothing is left listening."""
    require_real()
    lab = ServedLab(tmp_path)
    children = lab.children()
    assert len(children) >= 4
    lab.process.kill()
    lab.process.wait(10)
    deadline = time.monotonic() + 30
    alive = children
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in children if _alive(pid)]
        time.sleep(0.2)
    assert alive == []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except OSError:
        return False


async def test_the_mpi_operator_acts_with_its_own_service_account(real_lab):
    """The MPI Operator's controller acts with its service account's token, bound by its
    manifests' ClusterRole (kubeflow/mpi-operator manifests/base/cluster-role.yaml): that
    account may create pods and watch MPIJobs, not change nodes, and an MPIJob's launcher
    still appears (created with its token)."""
    client = kube(real_lab)
    user = "system:serviceaccount:mpi-operator:mpi-operator"

    async def allowed(verb: str, resource: str, group: str = "", ns: str = "default") -> bool:
        review = await client.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": ["system:serviceaccounts"],
                     "resourceAttributes": {"verb": verb, "resource": resource, "group": group,
                                            "namespace": ns}}})  # fmt: skip
        return bool(review["status"].get("allowed"))

    assert await allowed("create", "pods")
    assert await allowed("watch", "mpijobs", "kubeflow.org")
    assert not await allowed("patch", "nodes", ns="")
    assert not await allowed("delete", "daemonsets", "apps", "kube-system")
    jobs = "/apis/kubeflow.org/v2beta1/namespaces/default/mpijobs"
    job = mpijob("gnw-sa")
    await client.request("POST", jobs, job)
    try:
        deadline = time.monotonic() + 60
        launchers: list = []
        while time.monotonic() < deadline and not launchers:
            launchers = [p for p in await client.pods("default")
                         if p["metadata"]["name"].startswith("gnw-sa-launcher")]  # fmt: skip
            await asyncio.sleep(0.5)
        assert launchers, "the MPI Operator created no launcher"
    finally:
        await client.request("DELETE", f"{jobs}/gnw-sa")
