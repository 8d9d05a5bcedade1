"""The Kubernetes objects of the NCCL / GPUDirect proof: the CUDA perftest pod, the NVLink
baseline Job, the inter-node MPIJob and the single-node diagnostic Job.

Why three NCCL shapes: NCCL picks a transport per rank pair in a fixed order, P2P, SHM,
NET (src/transport.cc, ``ncclTransports[]`` and ``selectTransport()``), and between two GPUs
of one node it takes NET only when both GPUs reach a NIC at PXB or closer *and* that path is
faster than their own GPU-to-GPU path (src/graph/paths.cc, ``ncclTopoCheckNet``). A 100 Gb/s
E810 next to NVLink never is, so a single-node run with P2P and SHM off ends in "No
transport found" and never touches the switch. The network proof therefore needs ranks on
two nodes (the MPIJob); the single-node run with P2P on is the NVLink baseline the network
number is compared with.
"""

from __future__ import annotations

from typing import Any

from steps.common import SHM_MOUNT, SHM_VOLUME, node_pod, pod_placement
from steps.gpu_operator.values import mirror_ref
from wizard.site import Node, Site

NAMESPACE = "default"
MPIJOB_API = "kubeflow.org/v2beta1"
MPIJOB_CRD = "mpijobs.kubeflow.org"
# kubeflow/mpi-operator (pkg/apis/kubeflow/v2beta1, common labels): the launcher's pod.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
ALL_REDUCE_ARGS = ["-b", "8", "-e", "16G", "-f", "2"]
# mpirun refuses to start as root unless told it may (Open MPI 4.1 orte/tools/orterun and
# 5.x prte: geteuid() == 0 without --allow-run-as-root, or without both
# OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, exits 1 with "mpirun has
# detected an attempt to run as root"). The MPI Operator (v0.8) sets neither; its README, its
# v2beta1 examples and its e2e test (test/e2e/mpi_job_test.go) add the flag, and the
# nccl-tests image has no USER, so its launcher runs as root.
MPIRUN_AS_ROOT = "--allow-run-as-root"


def all_reduce(site: Site) -> list[str]:
    """all_reduce_perf by the path the nccl-tests image has: the image builds the tests in
    its WORKDIR (coreweave/nccl-tests Dockerfile: ``WORKDIR /opt/nccl-tests``, ``make MPI=1``
    writes ``build/``), which is not on its PATH; ``measurements.nccl_tests_dir`` names it."""
    return [f"{site.measurements.nccl_tests_dir.rstrip('/')}/all_reduce_perf", *ALL_REDUCE_ARGS]


def image(site: Site, reference: str) -> str:
    """An image reference behind the site's mirror (the registry part replaced), as every
    other image the plan renders (``mirror_ref``)."""
    return mirror_ref(reference, site.registry.mirror)


# The nccl-tests image registers HPC-X's nccl_rdma_sharp_plugin (its libnccl-net.so) through
# /etc/ld.so.conf.d/hpcx.conf and LD_LIBRARY_PATH (coreweave/nccl-tests Dockerfile), and NCCL
# loads libnccl-net.so by default: the proof would measure the plugin's IB transport on the
# E810, not NCCL's own. CoreWeave's B300 MPIJob example passes NCCL_NET_PLUGIN=none too.
NO_NET_PLUGIN = {"name": "NCCL_NET_PLUGIN", "value": "none"}


def nccl_env(site: Site, hca: str | None, qos_on: bool, *, subsys: str = "INIT,NET") -> list[dict]:
    env = [
        NO_NET_PLUGIN,
        {"name": "NCCL_DEBUG", "value": "INFO"},
        {"name": "NCCL_DEBUG_SUBSYS", "value": subsys},
        *([{"name": "NCCL_IB_HCA", "value": hca}] if hca else []),
    ]
    if qos_on:
        env.append({"name": "NCCL_IB_TC", "value": str(site.qos.roce_tos)})
    return env


def _job(name: str, pod_spec: dict[str, Any], app: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "backoffLimit": 0,
            "template": {"metadata": {"labels": {"app": app}}, "spec": pod_spec},
        },
    }


def nvlink_job(site: Site, node: Node) -> dict[str, Any]:
    """all_reduce_perf over every GPU of one node with P2P and SHM allowed: the NVLink
    baseline (seed 002 section 20), not a network test."""
    container = {
        "name": "nccl-tests",
        "image": image(site, site.measurements.nccl_tests_image),
        "command": [*all_reduce(site), "-g", str(node.gpu_count)],
        "env": nccl_env(site, None, False, subsys="INIT,P2P"),
        "resources": {"limits": {"nvidia.com/gpu": node.gpu_count}},
        "volumeMounts": [SHM_MOUNT],
    }
    pod = node_pod(site, node, "unused", NAMESPACE, container, [SHM_VOLUME])["spec"]
    return _job(f"gnw-nccl-nvlink-{node.name}", pod, "gnw-nccl-nvlink")


# The exported forms find the RDMA device in the pod: the one the shared device plugin
# exposes is the node's (Intel's LAG registers one).
FIND_HCA = (
    'for d in /sys/class/infiniband/*; do NCCL_IB_HCA="${d##*/}"; break; done; export NCCL_IB_HCA; '
    'echo "NCCL_IB_HCA=$NCCL_IB_HCA"; exec "$@"'
)


def diagnostic_job(site: Site, node: Node) -> dict[str, Any]:
    """One node, P2P and SHM off: a labelled diagnostic only. NCCL refuses NET between GPUs
    of one node that NVLink joins (``ncclTopoCheckNet``), so on a B300 node this prints
    "No transport found"; it is never the proof."""
    rdma = site.device_plugin.resource_name
    container = {
        "name": "nccl-tests",
        "image": image(site, site.measurements.nccl_tests_image),
        "command": ["sh", "-c", FIND_HCA, "sh", *all_reduce(site), "-g", str(node.gpu_count)],
        "env": [
            *nccl_env(site, None, True),
            {"name": "NCCL_P2P_DISABLE", "value": "1"},
            {"name": "NCCL_SHM_DISABLE", "value": "1"},
        ],
        "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
        "resources": {"limits": {"nvidia.com/gpu": node.gpu_count, rdma: 1}},
        "volumeMounts": [SHM_MOUNT],
    }
    pod = node_pod(site, node, "unused", NAMESPACE, container, [SHM_VOLUME])["spec"]
    return _job(f"gnw-nccl-diagnostic-{node.name}", pod, "gnw-nccl-diagnostic")


def mpijob_name(nodes: list[str]) -> str:
    return f"gnw-nccl-{nodes[0]}-x{len(nodes)}"[:63].rstrip("-")


def mpijob(
    site: Site,
    nodes: list[str],
    gpus_per_node: int,
    hca: str | None,
    qos_on: bool,
    *,
    gdr_level: str | None = None,
) -> dict[str, Any]:
    """all_reduce_perf with one rank per GPU across ``nodes``, through the Kubeflow MPI
    Operator (MPIJob kubeflow.org/v2beta1: one launcher, one worker per node).

    The workers ask for every GPU and the RDMA resource, lock memory (IPC_LOCK), get a
    memory-backed /dev/shm, tolerate the taint, and are pinned one per listed node.
    ``hca`` None (the export): the launcher passes nothing and each rank finds its device.
    """
    name = mpijob_name(nodes) if gdr_level is None else f"{mpijob_name(nodes)[:55]}-gdr-sys"
    ranks = len(nodes) * gpus_per_node
    env = nccl_env(site, hca, qos_on)
    if gdr_level is not None:
        # NCCL's distance limit for GPUDirect RDMA (default PXB); SYS lifts it (a diagnostic).
        env.append({"name": "NCCL_NET_GDR_LEVEL", "value": gdr_level})
    exported = [f"-x {e['name']}" for e in env]
    mpirun = [
        "mpirun", MPIRUN_AS_ROOT, "-np", str(ranks), "--bind-to", "none",
        *" ".join(exported).split(), *all_reduce(site), "-g", "1",
    ]  # fmt: skip
    placement = pod_placement(site)
    worker_affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}
                        ]
                    }
                ]
            }
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {JOB_NAME_LABEL: name}},
                    "topologyKey": "kubernetes.io/hostname",
                }
            ]
        },
    }
    nccl_image = image(site, site.measurements.nccl_tests_image)
    return {
        "apiVersion": MPIJOB_API,
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            # What the operator's validation requires (pkg/apis/kubeflow/validation), given
            # explicitly rather than left to its defaulting.
            "slotsPerWorker": gpus_per_node,
            "runPolicy": {"cleanPodPolicy": "Running", "activeDeadlineSeconds": 1800},
            "mpiImplementation": "OpenMPI",
            "sshAuthMountPath": "/root/.ssh",
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "spec": {
                            "restartPolicy": "OnFailure",
                            "containers": [
                                {
                                    "name": "launcher",
                                    "image": nccl_image,
                                    "command": mpirun,
                                    "env": env,
                                }
                            ],
                            **placement,
                        }
                    },
                },
                "Worker": {
                    "replicas": len(nodes),
                    "restartPolicy": "Never",
                    "template": {
                        "spec": {
                            "affinity": worker_affinity,
                            "containers": [
                                {
                                    "name": "worker",
                                    "image": nccl_image,
                                    "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
                                    "resources": {
                                        "limits": {
                                            "nvidia.com/gpu": gpus_per_node,
                                            site.device_plugin.resource_name: 1,
                                        }
                                    },
                                    "volumeMounts": [SHM_MOUNT],
                                }
                            ],
                            "volumes": [SHM_VOLUME],
                            **placement,
                        }
                    },
                },
            },
        },
    }


# CUDA numbers the GPUs it sees in PCI bus order only when told to (CUDA C Programming Guide,
# "CUDA Environment Variables": CUDA_DEVICE_ORDER defaults to FASTEST_FIRST, which leaves
# the order of equal GPUs unspecified; PCI_BUS_ID orders them as nvidia-smi does).
CUDA_PCI_ORDER = {"name": "CUDA_DEVICE_ORDER", "value": "PCI_BUS_ID"}


def cuda_perftest_pod(site: Site, node: Node, name: str, client_argv: list[str]) -> dict[str, Any]:
    """The perftest client with its buffers in GPU memory, in a pod on the GPU node.

    On the host the GPU Operator's driver gives no CUDA and no nvidia-smi on the PATH; in a
    pod that asks for a GPU the container toolkit injects them. The RDMA resource gives the
    pod the /dev/infiniband devices, IPC_LOCK lets perftest pin (register) its buffers, and
    /dev/shm is memory-backed.

    The pod asks for every GPU of the node: NVIDIA's device plugin cannot be asked for one
    particular GPU. With ``nvidia.com/gpu: 1`` the kubelet's device manager takes whichever
    free GPU the plugin's preferred allocation names (k8s-device-plugin
    internal/rm/nvml_manager.go alignedAlloc: gpuallocator's BestEffortPolicy, NVLink-aligned,
    blind to NICs) and the plugin exposes only that one (a CDI device under GPU Operator
    26.7's cdi.enabled: true; the same effect as NVIDIA_VISIBLE_DEVICES=<its UUID>), as CUDA
    device 0, possibly a GPU that is SYS from the NIC. Given all of them, in PCI order
    (``CUDA_PCI_ORDER``), ``--use_cuda=N`` in ``client_argv`` is nvidia-smi's GPU N: the
    one nearest the NIC.
    """
    container = {
        "name": "perftest",
        "image": image(site, site.measurements.cuda_perftest_image),
        "command": client_argv,
        "env": [CUDA_PCI_ORDER],
        "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
        "resources": {
            "limits": {"nvidia.com/gpu": node.gpu_count, site.device_plugin.resource_name: 1}
        },
        "volumeMounts": [SHM_MOUNT],
    }
    return node_pod(site, node, name, NAMESPACE, container, [SHM_VOLUME])
