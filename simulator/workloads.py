"""What the lab's cluster does with the workloads the wizard creates: pods and Jobs run
against the simulated host they land on (a perftest client in a pod reaching its server,
nvidia-smi, NCCL's all_reduce_perf), an MPIJob's launcher log, and the RDMA device plugin's
DaemonSet advertising its resource on the nodes."""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Any

from simulator.host import LabHost
from simulator.kubeapi import owner_reference, settled_daemonset_status
from simulator.nccl import (
    exec_failure,
    inter_node_log,
    is_nccl_tests_image,
    launcher_failure,
    single_node_log,
)
from simulator.perf import (
    PERFTEST,
    PerftestArgs,
    PerftestUsageError,
    client_output,
    tos_refusal,
)

if TYPE_CHECKING:
    from simulator.lab import Lab


class Workloads:
    """Pods, Jobs, MPIJobs and DaemonSets, run or answered as they are created: the lab's
    ``workloads``, a collaborator over the lab's cluster and hosts."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab

    def on_create(self, plural: str, obj: dict[str, Any]) -> None:
        if plural == "pods":
            spec = obj.setdefault("spec", {})
            node = spec.get("nodeName") or spec.get("nodeSelector", {}).get(
                "kubernetes.io/hostname"
            )
            spec["nodeName"] = node
            done = spec.get("restartPolicy") == "Never"
            failed = done and not self.run_pod_now(obj)
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
            self.lab.cluster.put("v1", "pods", self.mpijob_launcher(obj))
        elif plural == "daemonsets" and "rdma" in obj["metadata"]["name"]:
            self.rdma_plugin_appears(obj)
        elif plural == "jobs":
            template = obj.get("spec", {}).get("template", {})
            name = obj["metadata"]["name"]
            pod = {
                "metadata": {"name": f"{name}-x7k2p", "namespace": obj["metadata"]["namespace"],
                             "labels": {"job-name": name, **template.get("metadata", {}).get("labels", {})},
                             "ownerReferences": [owner_reference(obj)]},
                "spec": {**template.get("spec", {}), "restartPolicy": "Never"},
            }  # fmt: skip
            self.on_create("pods", pod)
            self.lab.cluster.put("v1", "pods", pod)
            obj["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}

    def run_pod_now(self, pod: dict[str, Any]) -> bool:
        """Run a pod whose work involves another host at once (a perftest client reaching
        a server on the AIStor peer); False when it failed. Other pods run at log time."""
        host = self.lab.hosts.get(pod["spec"].get("nodeName") or "")
        containers = pod["spec"].get("containers", [])
        if host is None or len(containers) != 1:
            return True
        container = containers[0]
        argv = list(container.get("command") or []) + list(container.get("args") or [])
        key = (pod["metadata"].get("namespace", "default"), pod["metadata"]["name"])
        failure = exec_failure(argv) if is_nccl_tests_image(container.get("image", "")) else None
        if failure is not None:
            self.lab.pod_outputs[key] = failure
            return False
        if not argv or argv[0] not in PERFTEST:
            return True
        output, ok = self.perftest_in_pod(host, container, argv)
        self.lab.pod_outputs[key] = output
        return ok

    def perftest_in_pod(
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
        if (refused := tos_refusal(args)) is not None:
            return refused, False
        if args.cuda is not None and "perftest-no-cuda" in self.lab.faults:
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
        if args.cuda is not None and not args.dmabuf and "nvidia_peermem" not in host.state.modules:
            # Without DMA-BUF, ibv_reg_mr of GPU memory needs nvidia-peermem (the GPU
            # Operator's driver.rdma.enabled, off by design here): the kernel refuses it.
            return " Couldn't allocate MR\n Failed to create MR\n", False
        if "IPC_LOCK" not in capabilities:
            # perftest_resources.c create_mr(): ibv_reg_mr fails without locked memory.
            return " Couldn't allocate MR\n Failed to create MR\n", False
        visible = None
        if args.cuda is not None:
            env = {e["name"]: e.get("value") for e in container.get("env", [])}
            visible = visible_gpus(host.state.gpus_present, int(limits["nvidia.com/gpu"]), env)
            if args.cuda >= len(visible):
                # perftest src/cuda_memory.c init_gpu(): the id is checked against
                # cuDeviceGetCount (wording as perftest prints it, approximately).
                return (f"initializing CUDA\nThere are {len(visible)} devices supporting CUDA, "
                        f"but device {args.cuda} was requested\n Couldn't init GPU context\n"), False  # fmt: skip
        if args.server is None or not self.lab.broker.connect_threadsafe(
            args.server, args.port, host.name
        ):
            return (f"Couldn't connect to {args.server}:{args.port}\n"
                    "Unable to open file descriptor for socket connection Unable to init the socket connection\n"), False  # fmt: skip
        return client_output(args, host, visible=visible), True

    def mpijob_launcher(self, job: dict[str, Any]) -> dict[str, Any]:
        """What the MPI Operator does with an MPIJob: a launcher pod (labelled with the job
        name and role, kubeflow/mpi-operator v2beta1) that runs mpirun across the workers;
        here the launcher's log is computed from where the workers would land."""
        name = job["metadata"]["name"]
        labels = {
            "training.kubeflow.org/job-name": name,
            "training.kubeflow.org/job-role": "launcher",
        }
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
        pod_name = f"{name}-launcher-x7k2p"
        refusal = _launcher_refusal(launcher)
        if refusal is not None:
            return self.launcher_pod(job, pod_name, launcher, labels, refusal, failed=True)
        hosts = [self.lab.hosts.get(n) for n in nodes]
        rdma_everywhere = all(h is not None and h.rdma_devices for h in hosts) and _asks_for_rdma(
            limits
        )
        gpus = int(job.get("spec", {}).get("slotsPerWorker", 1))
        log = inter_node_log(
            nodes, gpus, hca=env.get("NCCL_IB_HCA") or "irdma0", tc=env.get("NCCL_IB_TC"),
            socket="nccl-socket" in self.lab.faults or not rdma_everywhere,
            no_transport="nccl-no-transport" in self.lab.faults,
        )  # fmt: skip
        return self.launcher_pod(job, pod_name, launcher, labels, log,
                                  failed="No transport found" in log)  # fmt: skip

    def launcher_pod(
        self,
        job: dict[str, Any],
        pod_name: str,
        launcher: dict[str, Any],
        labels: dict[str, str],
        log: str,
        *,
        failed: bool,
    ) -> dict[str, Any]:
        namespace = job["metadata"].get("namespace", "default")
        self.lab.pod_outputs[(namespace, pod_name)] = log
        pod = {
            # The MPI Operator owns what it creates: deleting the MPIJob removes it.
            "metadata": {
                "name": pod_name,
                "namespace": namespace,
                "labels": labels,
                "ownerReferences": [owner_reference(job)],
            },
            "spec": {**launcher, "restartPolicy": "Never", "nodeName": "cpu-worker-1"},
            "status": {"phase": "Failed" if failed else "Succeeded"},
        }
        return pod

    def rdma_plugin_appears(self, daemonset: dict[str, Any]) -> None:
        self._daemonset_rolled_out(daemonset)
        if "plugin-missing-resource" in self.lab.faults:
            return
        namespace = daemonset["metadata"]["namespace"]
        # The plugin reads the config.json of the ConfigMap its DaemonSet mounts at
        # /k8s-rdma-shared-dev-plugin (deployment/k8s/base/daemonset.yaml).
        template = daemonset.get("spec", {}).get("template", {}).get("spec", {})
        mounted = [v["configMap"].get("name") for v in template.get("volumes", [])
                   if isinstance(v.get("configMap"), dict)]  # fmt: skip
        configmap = next(
            (cm for n in mounted if (cm := self.lab.cluster.get("v1", "configmaps", namespace, n))),
            None,
        )
        if configmap is None:
            return
        try:
            config = json.loads(configmap.get("data", {}).get("config.json", "{}"))
        except ValueError:
            return
        selector = (
            daemonset.get("spec", {}).get("template", {}).get("spec", {}).get("nodeSelector", {})
        )
        with self.lab.cluster.lock:
            for host in self.lab.gpu_hosts():
                node = self.lab.cluster.node(host.name)
                labels = node["metadata"].get("labels", {}) if node else {}
                if node is None or any(labels.get(k) != v for k, v in selector.items()):
                    continue
                for resource, count in self.rdma_pools(host, config).items():
                    node["status"]["capacity"][resource] = count
                    node["status"]["allocatable"][resource] = count

    def _daemonset_rolled_out(self, daemonset: dict[str, Any]) -> None:
        """The DaemonSet controller's status once its pods run on every lab GPU node its
        nodeSelector picks (simulator/kubeapi.py settled_daemonset_status), which a rollout
        wait (steps/rdma_plugin.py) reads as on a real cluster."""
        nodes = [
            node
            for host in self.lab.gpu_hosts()
            if (node := self.lab.cluster.node(host.name)) is not None
        ]
        daemonset["status"] = {}
        settled_daemonset_status(daemonset, nodes)

    def rdma_pools(self, host: LabHost, config: dict[str, Any]) -> dict[str, str]:
        """The resources the RDMA shared device plugin registers for this host, from its
        ConfigMap's config.json (also the real control plane's kubelets' answer)."""
        pools = {}
        for entry in config.get("configList", []):
            prefix = entry.get("resourcePrefix", config.get("resourcePrefix", "rdma"))
            resource = f"{prefix}/{entry['resourceName']}"
            # rdma_device_spec.go: a device without its rdma_cm, umad and uverbs
            # character devices is skipped, and the pool advertises 0.
            devices = host.kmod.infiniband_devices()
            complete = all(
                any(d.startswith(n) for d in devices) for n in ("rdma_cm", "umad", "uverbs")
            )
            count = str(entry.get("rdmaHcaMax", 1000)) if host.rdma_devices and complete else "0"
            pools[resource] = count
        return pools

    def pod_logs(self, pod: dict[str, Any]) -> str:
        """What the pod's command prints, run against the simulated host it is on."""
        meta = pod.get("metadata", {})
        stored = self.lab.pod_outputs.get((meta.get("namespace", ""), meta.get("name", "")))
        if stored is not None:
            return stored
        host = self.lab.hosts.get(pod.get("spec", {}).get("nodeName") or "")
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
                output.append(single_node_log(host.name, min(gpus, host.state.gpus_present),
                                              p2p=env.get("NCCL_P2P_DISABLE") != "1",
                                              shm=env.get("NCCL_SHM_DISABLE") != "1", hca=hca))  # fmt: skip
                continue
            gpus = container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
            for part in script.replace("&&", ";").replace("\n", ";").split(";"):
                if not part.strip():
                    continue
                words = shlex.split(part.strip())
                if words[:1] == ["rdma"] and is_nccl_tests_image(container.get("image", "")):
                    # The nccl-tests image installs the verbs utilities, not iproute2
                    # (coreweave/nccl-tests Dockerfile.ubuntu22: ibverbs-utils,
                    # infiniband-diags, --no-install-recommends); the lab takes its base image
                    # to lack iproute2 too, the worse case for the pod's check. dash says so
                    # and the script goes on.
                    output.append("sh: 1: rdma: not found\n")
                    continue
                if words[:1] == ["nvidia-smi"] and gpus:
                    # The container toolkit puts nvidia-smi into a container given GPUs.
                    result = host.pci.nvidia_smi(words[1:])
                else:
                    result = host.execute(part.strip())
                output.append(result.stdout + result.stderr)
        return "".join(output)


def visible_gpus(present: int, asked: int, env: dict[str, str | None]) -> list[int]:
    """The host GPUs a container given ``asked`` GPUs sees, in CUDA's device order.

    NVIDIA's device plugin exposes only the GPUs the kubelet allocated (under GPU Operator
    26.7's cdi.enabled: true as CDI devices, the same effect as NVIDIA_VISIBLE_DEVICES=<their
    UUIDs>); which ones is the plugin's preferred allocation (k8s-device-plugin
    internal/rm/nvml_manager.go alignedAlloc: gpuallocator's BestEffortPolicy, NVLink-aligned,
    blind to NICs), so the lab hands out the highest-numbered free GPUs, an adversarial
    choice the pod cannot rule out. CUDA numbers them in PCI bus order with
    CUDA_DEVICE_ORDER=PCI_BUS_ID; its default, FASTEST_FIRST, leaves equal GPUs in an
    unspecified order: reversed in the lab, an adversarial choice, not observed behaviour.
    """
    allocated = list(range(present))[-asked:] if 0 < asked < present else list(range(present))
    if env.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID":
        return allocated
    return allocated[::-1]


def _launcher_refusal(launcher: dict[str, Any]) -> str | None:
    """What the launcher container's mpirun prints when it does not start (simulator.nccl
    launcher_failure: Open MPI's root check, the image's layout). It runs as the pod's or
    container's runAsUser, else as the image's user: root (the nccl-tests image has no USER)."""
    container = (launcher.get("containers") or [{}])[0]
    if not is_nccl_tests_image(container.get("image", "")):
        return None
    argv = list(container.get("command") or []) + list(container.get("args") or [])
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    uid = container.get("securityContext", {}).get(
        "runAsUser", launcher.get("securityContext", {}).get("runAsUser", 0)
    )
    return launcher_failure(argv, env, int(uid))


def _asks_for_rdma(limits: dict[str, Any]) -> bool:
    """A container limit on an extended resource other than the GPU: the RDMA device plugin's
    pool (the lab serves one), which brings the /dev/infiniband devices into the container."""
    return any(key != "nvidia.com/gpu" and "/" in key for key in limits)
