"""The lab's API server removes what an object owns as Kubernetes' garbage collector does,
so that a workload the wizard leaves behind shows in a test (before, the lab's MPI Operator
quietly deleted an earlier launcher pod on every rerun)."""

from __future__ import annotations

from simulator.kubeapi import ClusterState, owner_reference


def seeded():
    cluster = ClusterState()
    job = cluster.put("batch/v1", "jobs", {"metadata": {"name": "gnw-nccl", "namespace": "t"}})
    cluster.put("v1", "pods", {"metadata": {"name": "gnw-nccl-x", "namespace": "t",
                                            "ownerReferences": [owner_reference(job)]}})  # fmt: skip
    mpijob = cluster.put("kubeflow.org/v2beta1", "mpijobs",
                         {"metadata": {"name": "gnw-ar", "namespace": "t"}})  # fmt: skip
    cluster.put("v1", "pods", {"metadata": {"name": "gnw-ar-launcher", "namespace": "t",
                                            "ownerReferences": [owner_reference(mpijob)]}})  # fmt: skip
    cluster.put("v1", "pods", {"metadata": {"name": "unrelated", "namespace": "t"}})
    return cluster


def names(cluster):
    return [p["metadata"]["name"] for p in cluster.list("v1", "pods", "t")]


def test_a_batch_v1_job_orphans_its_pods_by_default_and_not_in_the_background():
    cluster = seeded()
    cluster.delete("batch/v1", "jobs", "t", "gnw-nccl")
    assert "gnw-nccl-x" in names(cluster)  # batch/v1's default: OrphanDependents
    cluster = seeded()
    cluster.delete("batch/v1", "jobs", "t", "gnw-nccl", propagation="Background")
    assert "gnw-nccl-x" not in names(cluster)


def test_a_custom_resource_takes_what_it_owns_with_it():
    cluster = seeded()
    cluster.delete("kubeflow.org/v2beta1", "mpijobs", "t", "gnw-ar")
    assert names(cluster) == ["gnw-nccl-x", "unrelated"]
    cluster = seeded()
    cluster.delete("kubeflow.org/v2beta1", "mpijobs", "t", "gnw-ar", propagation="Orphan")
    assert "gnw-ar-launcher" in names(cluster)
