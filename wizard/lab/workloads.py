"""What the lab's cluster does with the workloads the wizard creates: pods and Jobs run
against the simulated host they land on (a perftest client in a pod reaching its server,
nvidia-smi, NCCL's all_reduce_perf), an MPIJob's launcher log, and the RDMA device plugin's
DaemonSet advertising its resource on the nodes."""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Any

from wizard.lab.host import LabHost
from wizard.lab.kubeapi import owner_reference
from wizard.lab.nccl import inter_node_log, single_node_log
from wizard.lab.perf import PERFTEST, PerftestArgs, PerftestUsageError, client_output

if TYPE_CHECKING:
    from wizard.lab.lab import Lab


class WorkloadsMixin:
    """Pods, Jobs, MPIJobs and DaemonSets, run or answered as they are created."""

    def _on_create(self: Lab, plural: str, obj: dict[str, Any]) -> None:
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
                             "labels": {"job-name": name, **template.get("metadata", {}).get("labels", {})},
                             "ownerReferences": [owner_reference(obj)]},
                "spec": {**template.get("spec", {}), "restartPolicy": "Never"},
            }  # fmt: skip
            self._on_create("pods", pod)
            self.cluster.put("v1", "pods", pod)
            obj["status"] = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}

    def _run_pod_now(self: Lab, pod: dict[str, Any]) -> bool:
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
        self: Lab, host: LabHost, container: dict[str, Any], argv: list[str]
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

    def _mpijob_launcher(self: Lab, job: dict[str, Any]) -> None:
        """What the MPI Operator does with an MPIJob: a launcher pod (labelled with the job
        name and role, kubeflow/mpi-operator v2beta1) that runs mpirun across the workers;
        here the launcher's log is computed from where the workers would land."""
        meta = job["metadata"]
        name, namespace = meta["name"], meta.get("namespace", "default")
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
            # The MPI Operator owns what it creates: deleting the MPIJob removes it.
            "metadata": {
                "name": pod_name,
                "namespace": namespace,
                "labels": labels,
                "ownerReferences": [owner_reference(job)],
            },
            "spec": {**launcher, "restartPolicy": "Never", "nodeName": "cpu-worker-1"},
            "status": {"phase": "Failed" if "No transport found" in log else "Succeeded"},
        }
        self.cluster.put("v1", "pods", pod)

    def _rdma_plugin_appears(self: Lab, daemonset: dict[str, Any]) -> None:
        if "plugin-missing-resource" in self.faults:
            return
        namespace = daemonset["metadata"]["namespace"]
        # The plugin reads the config.json of the ConfigMap its DaemonSet mounts at
        # /k8s-rdma-shared-dev-plugin (deployment/k8s/base/daemonset.yaml).
        template = daemonset.get("spec", {}).get("template", {}).get("spec", {})
        mounted = [v["configMap"].get("name") for v in template.get("volumes", [])
                   if isinstance(v.get("configMap"), dict)]  # fmt: skip
        configmap = next(
            (cm for n in mounted if (cm := self.cluster.get("v1", "configmaps", namespace, n))),
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

    def _pod_logs(self: Lab, pod: dict[str, Any]) -> str:
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
