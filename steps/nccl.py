"""Phase 14, NCCL proof: GPU memory over RDMA, with the log read channel by channel (T11, T12)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from steps.common import SHM_MOUNT, SHM_VOLUME, node_pod, q, shown
from steps.gpu_operator import mirrored
from steps.perf import BW_QPS, endpoint_lines, endpoints, perftest_lines, perftest_pair
from wizard.artifacts import Artifact, k8s_object
from wizard.facts import ParseError, parse
from wizard.facts.nccl import NcclLog
from wizard.model import Finding, StepKind
from wizard.plan import Phase, Step, StepContext
from wizard.probe import Report
from wizard.site import Node, Site

JOB_NAMESPACE = "default"
VENDOR_SUPPORTED = {"connectx"}  # NVIDIA's GPUDirect RDMA matrix: ConnectX / BlueField only


# The exported Job (no wizard at hand to discover the device) finds it in the pod: the RDMA
# device the shared device plugin exposes is the node's (Intel's LAG registers one).
FIND_HCA = (
    'NCCL_IB_HCA="$(ls /sys/class/infiniband | head -n 1)"; export NCCL_IB_HCA; '
    'echo "NCCL_IB_HCA=$NCCL_IB_HCA"; exec "$@"'
)


def nccl_job(site: Site, node: Node, hca: str | None, qos_on: bool) -> dict[str, Any]:
    """all_reduce_perf on every GPU of the node, forced through the NIC (P2P/SHM off).
    ``hca`` None: the Job finds the RDMA device itself (the exported form)."""
    env = [
        {"name": "NCCL_DEBUG", "value": "INFO"},
        {"name": "NCCL_DEBUG_SUBSYS", "value": "INIT,NET"},
        *([{"name": "NCCL_IB_HCA", "value": hca}] if hca else []),
        # One node, all GPUs: turn off NVLink/shared memory so that the traffic crosses the NIC.
        {"name": "NCCL_P2P_DISABLE", "value": "1"},
        {"name": "NCCL_SHM_DISABLE", "value": "1"},
    ]
    if qos_on:
        env.append({"name": "NCCL_IB_TC", "value": str(site.qos.roce_tos)})
    image = site.measurements.nccl_tests_image
    if site.registry.mirror:
        registry_path, _, rest = image.partition("/")
        image = f"{mirrored(registry_path + '/x', site.registry.mirror).rsplit('/x', 1)[0]}/{rest}"
    container = {
        "name": "nccl-tests",
        "image": image,
        "command": [
            "all_reduce_perf",
            "-b",
            "8",
            "-e",
            "16G",
            "-f",
            "2",
            "-g",
            str(node.gpu_count),
        ],
        "env": env,
        "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
        "resources": {
            "limits": {"nvidia.com/gpu": node.gpu_count, site.device_plugin.resource_name: 1}
        },
        "volumeMounts": [SHM_MOUNT],
    }
    if hca is None:
        container["command"] = ["sh", "-c", FIND_HCA, "sh", *container["command"]]
    pod = node_pod(site, node, "unused", JOB_NAMESPACE, container, [SHM_VOLUME])["spec"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"gnw-nccl-{node.name}", "namespace": JOB_NAMESPACE},
        "spec": {
            "backoffLimit": 0,
            "template": {"metadata": {"labels": {"app": "gnw-nccl"}}, "spec": pod},
        },
    }


def explain_verdict(log: NcclLog, readiness: dict[str, Any], profile: str, report: Report) -> None:
    """Apply DOMAIN.md's verdict table to what NCCL itself said."""
    devices = ", ".join(f"{d.name}/{d.link_layer}" for d in log.net_devices) or "none"
    if log.verdict == "socket":
        report.fail(
            "nccl-path",
            f"NCCL fell back to sockets (NET/Socket): no RDMA at all (NET/IB devices: {devices})",
            "the pod sees no RDMA device: check NCCL_IB_HCA, the RDMA resource request and IPC_LOCK",
            gate="T11",
        )
        report.fail(
            "gdr", "no GPUDirect RDMA: the traffic never reached RDMA", "fix T11 first", gate="T12"
        )
        return
    if log.verdict == "no-net":
        report.fail(
            "nccl-path",
            "NCCL used no network channel",
            "check NCCL_P2P_DISABLE/SHM_DISABLE",
            gate="T11",
        )
        return
    report.ok("nccl-path", f"NCCL used RDMA ({devices})", gate="T11")
    far = [
        g
        for g, d in (readiness.get("distances") or {}).items()
        if d not in ("X", "PIX", "PXB", "?")
    ]
    if log.verdict == "host-memory":
        why = []
        if far:
            why.append(
                f"{', '.join(far)} are farther than PXB from the NIC (NCCL's default GDR limit)"
            )
        if log.gdr_disabled:
            why.append(
                "NCCL says GPU Direct RDMA is disabled for "
                + ", ".join(
                    f"{d['hca']}{' (' + d['reason'] + ')' if d['reason'] else ''}"
                    for d in log.gdr_disabled
                )
            )
        if not log.dmabuf_gpus:
            why.append(
                "no 'DMA-BUF is available' line: the open kernel module / kernel >= 5.12 are missing"
            )
        report.fail(
            "gdr",
            "RDMA works but through host memory (no /GDRDMA on the channels)"
            + (f": {'; '.join(why)}" if why else ""),
            "see the GPUDirect readiness findings; NCCL_NET_GDR_LEVEL only lifts the distance limit",
            gate="T12",
        )
        return
    if log.verdict == "mixed":
        report.warn(
            "gdr",
            "some channels use GPUDirect RDMA, some host memory",
            "check per-GPU distances",
            gate="T12",
        )
        return
    dmabuf = "DMA-BUF" if log.dmabuf_gpus else "peermem"
    if profile in VENDOR_SUPPORTED:
        report.ok(
            "gdr",
            f"every NET channel uses GPUDirect RDMA ({dmabuf}): production candidate",
            gate="T12",
        )
    else:
        report.warn(
            "gdr",
            f"every NET channel uses GPUDirect RDMA ({dmabuf}) over an Intel E810: technically working, "
            "Experimental / vendor support risk (NVIDIA supports GPUDirect RDMA with ConnectX/BlueField only)",
            "accept as experimental, or run the same gates on a ConnectX node (Architecture B) to decide on numbers",
            gate="T12",
        )


PERFTEST_HELP = ["ib_write_bw", "--help"]
GPU_MEMORY = ["--use_cuda=0"]  # the client's buffers in GPU 0's memory
GPU_RUNS = (  # (check, gate, client options): GPU memory, then through DMA-BUF
    ("cuda-perftest", "T11", []),
    ("dmabuf-perftest", "T12", ["--use_cuda_dmabuf"]),
)


class CudaPerftest(Step):
    id = "nccl.cuda-perftest"
    title = "perftest from GPU memory (--use_cuda, DMA-BUF)"
    kind = StepKind.MEASURE
    one_node_at_a_time = True  # against the shared AIStor peer
    gates = ("T11", "T12")
    reads = ("aistor",)
    explain = (
        "A CPU-memory ib_write_bw does not prove the GPU path: perftest built with CUDA runs "
        "with --use_cuda=<gpu> (T11) and --use_cuda_dmabuf (T12) when the installed perftest "
        "supports it (detected from its --help)."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        if node is None:
            return []
        lines = [shown(PERFTEST_HELP, "does it have --use_cuda?"), *endpoint_lines(site, node)]
        for _, _, extra in GPU_RUNS:
            lines += perftest_lines(
                site, node, "ib_write_bw", qps=BW_QPS, client_extra=[*GPU_MEMORY, *extra]
            )
        return lines

    async def measure(self, ctx: StepContext) -> list[Finding]:
        report = Report("T11")
        helptext = await ctx.run(PERFTEST_HELP)
        if "--use_cuda" not in helptext.stdout + helptext.stderr:
            report.skip(
                "cuda-perftest", "the installed perftest has no CUDA support (--use_cuda missing)"
            )
            report.skip("dmabuf-perftest", "perftest without CUDA cannot test DMA-BUF", gate="T12")
            return report.findings
        client, server, _ = await endpoints(ctx)
        if client is None or server is None:
            report.fail("cuda-perftest", "no RDMA endpoint pair", "run the RDMA phases first")
            return report.findings
        for name, gate, extra in GPU_RUNS:
            fact, problem = await perftest_pair(
                ctx,
                "ib_write_bw",
                client,
                server,
                qps=BW_QPS,
                client_extra=[*GPU_MEMORY, *extra],
            )
            if fact is None or problem or fact.best_bw_gbps is None:
                report.fail(
                    name,
                    f"GPU-memory ib_write_bw failed: {problem}",
                    "read the perftest output",
                    gate=gate,
                )
                continue
            ctx.record(f"gpu.{name}", fact.best_bw_gbps, "Gb/s")
            report.ok(
                name,
                f"ib_write_bw from GPU 0 memory{' (DMA-BUF)' if extra else ''}: "
                f"{fact.best_bw_gbps:.1f} Gb/s",
                gate=gate,
            )
        return report.findings


class NcclTests(Step):
    id = "nccl.all-reduce"
    title = "nccl-tests all_reduce_perf with NCCL_DEBUG=INFO"
    kind = StepKind.MEASURE
    gates = ("T11", "T12")
    reads = ("qos", "device_plugin", "measurements")
    needs = (("irdma.verify", "rdma_device"),)
    explain = (
        "all_reduce_perf -b 8 -e 16G -f 2 runs as a Kubernetes Job (IPC_LOCK, memory-backed "
        "/dev/shm, NCCL_IB_HCA from discovery, NCCL_IB_TC=96 with QoS on). The log decides: every "
        "net channel 'via NET/IB/N/GDRDMA' = GPU memory direct; 'via NET/IB/N' = through host "
        "memory; 'NET/Socket' = no RDMA at all. On an E810, a T12 pass is 'Experimental / vendor "
        "support risk', never 'Production candidate'."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        name = node.name if node else "<node>"
        return ["kubectl apply -f nccl-job.yaml", f"kubectl logs job/gnw-nccl-{q(name)}"]

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        if node is None:
            return []
        job = nccl_job(site, node, None, qos_on=True)
        return [
            k8s_object(
                f"nodes/{node.name}/k8s/nccl-job.yaml",
                job,
                f"Job {JOB_NAMESPACE}/gnw-nccl-{node.name}",
                "nccl-tests all_reduce_perf with NCCL_DEBUG=INFO",
            )
        ]

    async def measure(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        report = Report("T11")
        hca = str(ctx.need("rdma_device"))
        qos_on = ctx.engine.checkpoint.step_state("qos.apply", ctx.target).value == "done"
        job = nccl_job(ctx.site, ctx.node, hca, qos_on)
        kube = ctx.services.kube
        name = job["metadata"]["name"]
        await kube.delete_job(JOB_NAMESPACE, name)
        await kube.create_job(JOB_NAMESPACE, job)
        logs = None
        try:
            deadline = time.monotonic() + 1800
            while time.monotonic() < deadline:
                pods = await kube.pods(JOB_NAMESPACE, label_selector=f"job-name={name}")
                done = [
                    p for p in pods if p.get("status", {}).get("phase") in ("Succeeded", "Failed")
                ]
                if done:
                    logs = await kube.pod_log(JOB_NAMESPACE, done[0]["metadata"]["name"])
                    break
                await asyncio.sleep(2)
        finally:
            await kube.delete_job(JOB_NAMESPACE, name)
            for pod in await kube.pods(JOB_NAMESPACE, label_selector=f"job-name={name}"):
                await kube.delete_pod(JOB_NAMESPACE, pod["metadata"]["name"])
        if logs is None:
            report.fail(
                "nccl-path", "the nccl-tests Job did not finish", f"kubectl describe job {name}"
            )
            return report.findings
        try:
            log = parse("nccl-log", logs)
        except ParseError as exc:
            report.fail(
                "nccl-path",
                f"no NCCL INFO lines in the Job's log ({exc.reason})",
                "check NCCL_DEBUG=INFO",
            )
            return report.findings
        ctx.data["nccl_verdict"] = log.verdict
        explain_verdict(log, ctx.recorded("gpudirect.readiness"), ctx.site.nic.profile, report)
        try:
            table = parse("nccl-tests", logs)
            if table.avg_busbw is not None:
                ctx.record("nccl.all_reduce.avg_busbw", table.avg_busbw, "GB/s")
                if table.rows:
                    ctx.record(
                        "nccl.all_reduce.max_busbw",
                        max(r["oop_busbw"] or 0 for r in table.rows),
                        "GB/s",
                    )
                report.ok("nccl-busbw", f"all_reduce average bus bandwidth {table.avg_busbw} GB/s")
        except ParseError:
            report.warn("nccl-busbw", "no nccl-tests result table in the log", "read the Job's log")
        return report.findings


PHASE = Phase(
    id="nccl",
    number=14,
    title="NCCL / GPUDirect proof",
    summary="Prove GPU memory goes straight to the NIC, with numbers and NCCL's own words.",
    steps=(CudaPerftest(), NcclTests()),
)
