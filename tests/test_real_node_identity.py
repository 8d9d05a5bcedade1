"""Each lab kubelet acts as its node on the real control plane, not as the admin: its own
client certificate (CN system:node:NAME, O system:nodes), judged by the Node authorizer and
the NodeRestriction admission plugin (kube-apiserver --authorization-mode=Node,RBAC
--enable-admission-plugins=NodeRestriction, as kubeadm and Kubespray run it), so it may write
only its own Node, Lease and the status of its own pods. The wizard's kubeconfig stays the
admin's. etcd serves its clients over TLS and asks for a certificate of its own CA."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import urllib.error
import urllib.request
from urllib.parse import quote

import pytest
import yaml

from simulator.controlplane.client import Api, ApiError
from simulator.controlplane.kubelets import kubelet_may_set
from simulator.lab import Lab
from tests.real_tier import require_real

REVIEW = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
MERGE = "application/merge-patch+json"


def _who(api: Api) -> tuple[str, list[str]]:
    user = api.create(
        REVIEW, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    info = user["status"]["userInfo"]
    return info["username"], info.get("groups", [])


def _refused(call, *args) -> str:
    with pytest.raises(ApiError) as caught:
        call(*args)
    assert caught.value.status == 403, caught.value
    return str(caught.value)


async def test_each_kubelet_is_its_node_and_only_its_node(tmp_path):
    require_real()
    async with Lab(tmp_path / "lab", control_plane="real") as lab:
        kubelets = lab.real.kubelets
        plane = lab.real.plane
        one, other = kubelets.api_of("cpu-worker-1"), kubelets.api_of("cpu-worker-2")
        # The kubelets' own APIs are the nodes' identities; the wizard's kubeconfig the admin's.
        assert _who(one) == ("system:node:cpu-worker-1", ["system:nodes", "system:authenticated"])
        config = yaml.safe_load((lab.directory / "kubeconfig").read_text())
        assert config["users"][0]["user"]["client-certificate"] == str(plane.pki.admin.cert)
        assert "system:masters" in _who(lab.real.api)[1]

        # Its own Node's status: yes; another node's: refused by NodeRestriction.
        one.merge_patch("/api/v1/nodes/cpu-worker-1/status", {"status": {"capacity": {"lab.example/x": "1"}}})  # fmt: skip
        message = _refused(one.merge_patch, "/api/v1/nodes/cpu-worker-2/status",
                           {"status": {"capacity": {"lab.example/x": "1"}}})  # fmt: skip
        assert 'node "cpu-worker-1" is not allowed to modify node "cpu-worker-2"' in message
        # Labels that steer workloads are the installer's, not the kubelet's.
        message = _refused(one.merge_patch, "/api/v1/nodes/cpu-worker-1",
                           {"metadata": {"labels": {"node-role.kubernetes.io/gpu": ""}}})  # fmt: skip
        assert "is not allowed to modify labels: node-role.kubernetes.io/gpu" in message
        # ... which the installer did set at registration (kubeadm's mark-control-plane).
        cp = lab.real.api.get("/api/v1/nodes/cp-1")
        assert "node-role.kubernetes.io/control-plane" in cp["metadata"]["labels"]
        # Nor may it change its taints.
        message = _refused(one.merge_patch, "/api/v1/nodes/cpu-worker-1", {"spec": {"taints": [
            {"key": "lab.example/t", "effect": "NoSchedule"}]}})  # fmt: skip
        assert "is not allowed to modify taints" in message

        # Pods: only its own, listed by spec.nodeName; another node's pod status is refused.
        _refused(one.get, "/api/v1/pods")
        mine = one.get(f"/api/v1/pods?fieldSelector={quote('spec.nodeName=cpu-worker-1')}")
        assert all(p["spec"]["nodeName"] == "cpu-worker-1" for p in mine["items"])
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "gnw-identity"},
               "spec": {"nodeName": "cpu-worker-2", "containers": [{"name": "main", "image": "lab"}]}}  # fmt: skip
        lab.real.api.create("/api/v1/namespaces/default/pods", pod)
        path = "/api/v1/namespaces/default/pods/gnw-identity"
        for _ in range(100):  # cpu-worker-2's kubelet runs it, with its own identity
            if (lab.real.api.get(path).get("status") or {}).get("phase") == "Running":
                break
            await asyncio.sleep(0.3)
        assert lab.real.api.get(path)["status"]["phase"] == "Running"
        message = _refused(one.merge_patch, f"{path}/status", {"status": {"phase": "Failed"}})
        assert "can only update pod status for pods with spec.nodeName set to itself" in message
        other.merge_patch(f"{path}/status", {"status": {"message": "seen by its own kubelet"}})
        # A kubelet may not make pods, only mirror pods bound to itself.
        _refused(one.create, "/api/v1/namespaces/default/pods",
                 {**pod, "metadata": {"name": "gnw-identity-2"}})  # fmt: skip
        # Its Lease, not another's.
        lease = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        _refused(one.merge_patch, f"{lease}/cpu-worker-2", {"spec": {"holderIdentity": "x"}})
        assert one.get(f"{lease}/cpu-worker-1")["spec"]["holderIdentity"] == "cpu-worker-1"

        # etcd: TLS, and only for a certificate of its own CA (the API server's etcd client).
        pki = plane.pki
        health = f"{plane.etcd_url}/health"
        trusted = ssl.create_default_context(cafile=str(pki.etcd_ca))
        trusted.load_cert_chain(str(pki.etcd_client.cert), str(pki.etcd_client.key))
        with urllib.request.urlopen(health, context=trusted, timeout=10) as answer:
            assert json.loads(answer.read())["health"] == "true"
        for pair in (pki.admin, None):  # a cluster certificate, or none at all
            context = ssl.create_default_context(cafile=str(pki.etcd_ca))
            if pair is not None:
                context.load_cert_chain(str(pair.cert), str(pair.key))
            with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
                urllib.request.urlopen(health, context=context, timeout=10).read()
        # Nor in the clear (etcd closes the connection, or answers 400).
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(health.replace("https:", "http:"), timeout=10).read()


async def test_the_gpu_operators_controller_acts_as_its_service_account(tmp_path):
    """The lab plays the GPU Operator's controller with the token of the service account
    the chart gives its pod, so the chart's RBAC judges what it writes."""
    require_real()
    async with Lab(tmp_path / "lab", control_plane="real") as lab:
        helm = [
            str(lab.directory / "bin" / "helm"),
            "--kubeconfig",
            str(lab.directory / "kubeconfig"),
        ]
        installed = await asyncio.to_thread(subprocess.run, [*helm, "upgrade", "--install",
            "gpu-operator", "nvidia/gpu-operator", "--version", "v26.7.0", "--namespace",
            "gpu-operator", "--create-namespace"], capture_output=True, text=True, timeout=300)  # fmt: skip
        assert installed.returncode == 0, installed.stderr
        admin = lab.real.api
        daemonsets = "/apis/apps/v1/namespaces/gpu-operator/daemonsets/nvidia-driver-daemonset"
        for _ in range(200):  # the controller's first operand, written with its token
            if admin.get_or_none(daemonsets) is not None:
                break
            await asyncio.sleep(0.3)
        assert admin.get_or_none(daemonsets) is not None, lab.real.vendors.errors
        operator = lab.real.vendors.operator_api
        assert _who(operator)[0] == "system:serviceaccount:gpu-operator:gpu-operator"
        # What the chart does not grant it, it may not do.
        message = _refused(operator.create, "/api/v1/namespaces/default/configmaps",
                           {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})  # fmt: skip
        assert "system:serviceaccount:gpu-operator:gpu-operator" in message


def test_the_labels_a_kubelet_may_set_are_node_restrictions():
    """NodeRestriction's label rule (getForbiddenLabels with k8s.io/kubelet IsKubeletLabel):
    the registration splits the lab's node labels by it (no build needed)."""
    allowed = ["kubernetes.io/hostname", "kubernetes.io/arch", "node.kubernetes.io/instance-type",
               "x.node.kubernetes.io/y", "kubelet.kubernetes.io/z", "nvidia.com/gpu.present",
               "feature.node.kubernetes.io/pci-10de.present", "plain"]  # fmt: skip
    refused = ["node-role.kubernetes.io/control-plane", "node-restriction.kubernetes.io/pool",
               "a.node-restriction.kubernetes.io/b", "example.k8s.io/x", "kubernetes.io/other"]  # fmt: skip
    assert [label for label in allowed if not kubelet_may_set(label)] == []
    assert [label for label in refused if kubelet_may_set(label)] == []
