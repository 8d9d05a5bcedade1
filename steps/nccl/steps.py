"""Phase 14's steps: perftest from GPU memory in a pod, the NVLink baseline, and the
inter-node NCCL run that proves (or not) GPU memory over the E810."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from steps.common import bonding_command, finished_then_logs, on_host, q, shown
from steps.gpudirect import DISTANCES, NCCL_DEFAULT_GDR_LEVEL
from steps.irdma import GID_INDEX, RDMA_DEVICE
from steps.nccl.manifests import (
    JOB_NAME_LABEL,
    JOB_ROLE_LABEL,
    MPIJOB_API,
    MPIJOB_CRD,
    NAMESPACE,
    cuda_perftest_pod,
    diagnostic_job,
    mpijob,
    mpijob_name,
    nvlink_job,
)
from steps.nccl.verdict import VENDOR_SUPPORTED, explain_verdict, explain_warnings
from steps.perf import (
    BW_QPS,
    endpoint_lines,
    endpoints,
    line_rate_gbps,
    over_cap,
    perftest_run,
    planned_endpoints,
    rate_cap_gbps,
)
from steps.perf import _stop_server as stop_server
from steps.perf.model import SERVER_EXITS
from steps.qos.steps import QOS_VERIFIED
from wizard.artifacts import Artifact, k8s_object
from wizard.facts import ParseError, parse
from wizard.facts.gpu import LINK_ORDER, link_rank
from wizard.facts.nccl import parse_nccl_log, parse_nccl_tests
from wizard.facts.perftest import parse_perftest
from wizard.model import Finding, StepKind
from wizard.plan import Phase, Step, StepContext, measurement_far_end
from wizard.probe import Report
from wizard.result_keys import ResultKey
from wizard.site import Node, Site

POD_TIMEOUT_S = 600
JOB_TIMEOUT_S = 1800
POLL_S = 2.0
MPIJOBS = f"/apis/{MPIJOB_API}/namespaces/{NAMESPACE}/mpijobs"

GPU_RUNS = (  # (check, client options, path name): DMA-BUF first, then the legacy path
    ("dmabuf-perftest", ["--use_cuda_dmabuf"], "DMA-BUF"),
    ("peermem-perftest", [], "legacy nvidia-peermem"),
)
EXPERIMENTAL_FIX = (
    "accept as experimental, or run the same gates on a ConnectX node (Architecture B) to "
    "decide on numbers"
)
DMABUF_FIX = (
    "DMA-BUF needs the open kernel module and kernel >= 5.12 (see GPUDirect readiness); read "
    "the pod's log"
)
# NCCL's default NCCL_NET_GDR_LEVEL (steps.gpudirect): a GPU within PXB of the NIC gets
# GPUDirect RDMA from NCCL as it is configured. Farther (PHB, NODE: through the CPU's root
# complex; SYS: across the sockets) GPUDirect still works, NCCL just will not use it by
# default, and that is the usual HGX B300 case with an add-in NIC on a CPU root port. So the
# proof measures the nearest GPU there is and names the distance; it never refuses it.
NEAREST_LIMIT = NCCL_DEFAULT_GDR_LEVEL


def nearest_gpu(distances: dict[str, str]) -> tuple[int, str] | None:
    """The GPU nearest the RDMA NIC in ``nvidia-smi topo -m`` (gpudirect.readiness's
    distances, ``{"GPU0": "PXB", ...}``): (its index, its link), the lowest-ranked link
    (PIX < PXB < PHB < NODE < SYS), the lowest index among equals; None only when no GPU
    has a known link to the NIC."""
    ranked = sorted(
        (link_rank(link), int(gpu[3:]), link)
        for gpu, link in distances.items()
        if gpu.startswith("GPU") and gpu[3:].isdigit() and link_rank(link) < len(LINK_ORDER)
    )
    if not ranked:
        return None
    return ranked[0][1], ranked[0][2]


def distance_warning(gpu: int, link: str, device: str) -> tuple[str, str] | None:
    """(message, remediation) when even the nearest GPU is beyond NCCL's default GDR level:
    the measurement is valid for GPUDirect, not for what NCCL will do unconfigured."""
    if link_rank(link) <= link_rank(NEAREST_LIMIT):
        return None
    if link == "SYS":
        return (
            f"the nearest GPU to {device} is GPU{gpu} at SYS (across the CPU sockets): GPUDirect "
            "RDMA between them crosses the SMP interconnect, which NVIDIA's GPUDirect RDMA guide "
            "warns performs poorly or not at all on some platforms, and NCCL will not use it "
            f"by default (NCCL_NET_GDR_LEVEL={NEAREST_LIMIT})",
            "put the NIC on the socket of the GPUs that use it (or a NIC per socket); "
            "NCCL_NET_GDR_LEVEL=SYS only lifts NCCL's limit, not the path",
        )
    return (
        f"the nearest GPU to {device} is GPU{gpu} at {link} (through the CPU's PCIe root "
        "complex, the usual place of an add-in NIC on HGX): GPUDirect RDMA works, but NCCL's "
        f"default NCCL_NET_GDR_LEVEL ({NEAREST_LIMIT}) will not use it; NCCL stages through "
        "host memory unless told otherwise",
        f"accept it, or set NCCL_NET_GDR_LEVEL={link} for NCCL jobs on this node after the "
        "T12 numbers below are good enough",
    )


def gpu_memory(index: int | str) -> list[str]:
    """perftest's buffers on nvidia-smi's GPU ``index`` (the pod sees every GPU in PCI
    order: steps.nccl.manifests.cuda_perftest_pod)."""
    return [f"--use_cuda={index}"]


async def _wait_for_pod(ctx: StepContext, label_selector: str, timeout: float) -> dict | None:
    """The first pod matching ``label_selector`` that ended (Succeeded or Failed)."""
    kube = ctx.services.kube
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = await kube.pods(NAMESPACE, label_selector=label_selector)
        for pod in pods:
            if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                return pod
        await asyncio.sleep(POLL_S)
    return None


async def _pod_log(ctx: StepContext, pod: dict) -> str:
    return await ctx.services.kube.pod_log(NAMESPACE, pod["metadata"]["name"])


async def run_to_end(
    ctx: StepContext,
    what: str,
    selector: str,
    timeout: float,
    create: Callable[[], Awaitable[Any]],
    remove: Callable[[], Awaitable[Any]],
) -> tuple[str | None, dict | None, str]:
    """Create a workload (a pod, a Job, an MPIJob), wait for the pod ``selector`` picks to
    end, read its log: (log, the pod, problem). A leftover of an earlier run is removed
    first, and the workload after, whatever happened (a failed run leaves nothing behind
    to collide with the next one)."""
    await remove()
    await create()
    try:
        ended = await _wait_for_pod(ctx, selector, timeout)
        if ended is None:
            return None, None, f"{what} did not finish in {timeout} s"
        return await _pod_log(ctx, ended), ended, ""
    finally:
        await remove()


def _pod_name(kind: str, node: str) -> str:
    return f"gnw-{kind}-{node}"[:63].rstrip("-")


class CudaPerftest(Step):
    id = "nccl.cuda-perftest"
    loads_far_end = True  # an AIStor peer: gated when it is production
    title = "perftest from GPU memory, in a pod (--use_cuda, DMA-BUF)"
    kind = StepKind.MEASURE
    one_node_at_a_time = True  # against the shared AIStor peer
    needs = (RDMA_DEVICE, GID_INDEX, DISTANCES)
    gates = ("T11", "T12")
    reads = ("aistor", "device_plugin", "measurements", "registry", "taint")
    explain = (
        "A CPU-memory ib_write_bw does not prove the GPU path. The client runs in a pod on the "
        "GPU node (one GPU and the RDMA resource, IPC_LOCK, memory-backed /dev/shm, the taint "
        "tolerated): the GPU Operator's driver gives the host no CUDA. Its buffers are in GPU "
        "memory, first through CUDA peer memory (--use_cuda, T11), then through DMA-BUF "
        "(--use_cuda_dmabuf, T12), against a perftest server on the AIStor peer's host. The "
        "GPU is the one nearest the NIC in nvidia-smi topo -m (PIX < PXB < PHB < NODE < SYS; "
        "beyond PXB a warning: GPUDirect works, NCCL's default GDR level will not use it): the "
        "pod is given every GPU in PCI order, since the device plugin cannot be asked for one."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        if node is None or not site.aistor.peers:
            return []
        client, server = planned_endpoints(site, node)
        assert server is not None
        lines = [*endpoint_lines(site, node), shown(bonding_command(node), "line rate")]
        for check, extra, path in GPU_RUNS:
            pod = _pod_name(check, node.name)
            run = perftest_run(
                site, node.name, "ib_write_bw", client, server,
                qps=BW_QPS, client_extra=[*gpu_memory("<nearest-gpu>"), *extra],
            )  # fmt: skip
            lines += [
                shown(run.server, on_host(server.host, "first")),
                shown(["kubectl", "apply", "-f", f"nodes/{node.name}/k8s/{check}-pod.yaml"],
                      f"the client in GPU memory, {path}"),
                *finished_then_logs(NAMESPACE, f"pod/{pod}", POD_TIMEOUT_S),
                shown(run.stop, on_host(server.host, "if that server still waits")),
                shown(["kubectl", "delete", "-n", NAMESPACE, f"pod/{pod}"]),
            ]  # fmt: skip
        return lines

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        """The pods as the export ships them: the RDMA device and its RoCEv2 GID index are
        found inside the pod (the same names as on the node: the shared device plugin)."""
        peer = measurement_far_end(site, node.name) if node else None
        if node is None or peer is None:
            return []
        client, server = planned_endpoints(site, node)
        assert server is not None
        out = []
        for check, extra, path in GPU_RUNS:
            # The client of the very run the runbook starts the server of (same port); the
            # pod finds its device, GID index and nearest GPU itself.
            run = perftest_run(
                site, node.name, "ib_write_bw", client, server, qps=BW_QPS, client_extra=extra
            )
            argv = ["sh", "-c", FIND_DEVICE_AND_GID, "sh", *_without_device(run.client)]
            pod = cuda_perftest_pod(site, node, _pod_name(check, node.name), argv)
            out.append(
                k8s_object(
                    f"nodes/{node.name}/k8s/{check}-pod.yaml",
                    pod,
                    f"Pod {NAMESPACE}/{pod['metadata']['name']}",
                    f"ib_write_bw from GPU memory ({path}) against {peer.name}",
                )
            )
        return out

    async def measure(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        report = Report("T11")
        client, server, _ = await endpoints(ctx)
        if client is None or server is None:
            report.fail("gpu-memory-rdma", "no RDMA endpoint pair", "run the RDMA phases first")
            report.fail("dmabuf-perftest", "no RDMA endpoint pair", "run the RDMA phases first",
                        gate="T12")  # fmt: skip
            return report.findings
        distances = ctx.need(DISTANCES)
        nearest = nearest_gpu(distances)
        if nearest is None:
            detail = ", ".join(f"{g}: {d}" for g, d in distances.items()) or "none listed"
            why = (f"no GPU has a known link to {client.device} in nvidia-smi topo -m "
                   f"({detail}): there is no GPU to measure from")  # fmt: skip
            fix = "check that nvidia-smi topo -m lists the GPUs and the RDMA NIC"
            report.fail("gpu-memory-rdma", why, fix)
            report.fail("dmabuf-perftest", why, fix, gate="T12")
            return report.findings
        gpu, link = nearest
        far = distance_warning(gpu, link, client.device)
        if far is not None:
            report.warn("nearest-gpu-distance", *far, gate="T12")
        ctx.data["gpu"] = gpu
        where = f"GPU{gpu}, {link} from {client.device}"
        rate, _ = await line_rate_gbps(ctx)  # RDMA over a LAG runs on one port
        results: dict[str, tuple[float | None, str]] = {}
        for check, extra, _ in GPU_RUNS:
            run = perftest_run(
                ctx.site, ctx.target, "ib_write_bw", client, server,
                qps=BW_QPS, client_extra=[*gpu_memory(gpu), *extra],
            )  # fmt: skip
            results[check] = await self._measure_one(ctx, check, run, server.host)
        dmabuf, dmabuf_problem = results["dmabuf-perftest"]
        legacy, legacy_problem = results["peermem-perftest"]

        cap = rate_cap_gbps(ctx.site, ctx.target, "ib_write_bw")

        def rate_text(gbps: float) -> str:
            if cap is not None:
                # Both paths ran under the same rate limit: their numbers say that GPU
                # memory reaches the NIC, not which path is faster.
                return (f"{gbps:.1f} Gb/s, capped at {cap:g} Gb/s on the production peer: "
                        f"DMA-BUF and peermem are not comparable ({where})")  # fmt: skip
            share = f", {gbps / rate:.0%} of the {rate:.0f} Gb/s line" if rate else ""
            return f"{gbps:.1f} Gb/s{share} ({where})"

        if dmabuf is not None and ctx.site.nic.profile in VENDOR_SUPPORTED:
            report.ok("dmabuf-perftest", f"ib_write_bw from GPU memory in a pod through DMA-BUF: "
                      f"{rate_text(dmabuf)}", gate="T12")  # fmt: skip
        elif dmabuf is not None:
            report.warn("dmabuf-perftest", f"ib_write_bw from GPU memory in a pod through DMA-BUF: "
                        f"{rate_text(dmabuf)} over an Intel E810: technically working, "
                        "Experimental / vendor support risk (NVIDIA supports GPUDirect RDMA with "
                        "ConnectX/BlueField only)", EXPERIMENTAL_FIX, gate="T12")  # fmt: skip
        else:
            report.fail("dmabuf-perftest", f"GPU memory through DMA-BUF failed: {dmabuf_problem}",
                        DMABUF_FIX, gate="T12")  # fmt: skip
        best = dmabuf if dmabuf is not None else legacy
        if best is not None:
            path = "DMA-BUF" if dmabuf is not None else "the legacy nvidia-peermem path only"
            report.ok("gpu-memory-rdma", f"GPU memory reaches the E810 over RDMA ({path}): "
                      f"{rate_text(best)}", gate="T11")  # fmt: skip
        else:
            report.fail("gpu-memory-rdma", f"no GPU-memory RDMA at all: DMA-BUF: {dmabuf_problem}; "
                        f"legacy: {legacy_problem}", DMABUF_FIX, gate="T11")  # fmt: skip
        if legacy is not None:
            report.ok("peermem-perftest", f"legacy nvidia-peermem path: {rate_text(legacy)}",
                      gate="T11")  # fmt: skip
        else:
            # driver.rdma.enabled is false by design (DMA-BUF needs no nvidia-peermem).
            report.skip("peermem-perftest", f"legacy nvidia-peermem path not available, as "
                        f"configured (DMA-BUF needs no peermem): {legacy_problem}", gate="T11")  # fmt: skip
        return report.findings

    async def _measure_one(self, ctx: StepContext, check: str, run, server_host: str):
        """One GPU-memory run: (Gb/s, "") or (None, what went wrong)."""
        output, problem = await self._run_pod(ctx, check, run, server_host)
        if problem:
            return None, problem
        try:
            fact = parse(parse_perftest, output)
        except ParseError as exc:
            return (
                None,
                f"the pod printed nothing perftest-like ({exc.reason}): {output.strip()[:200]}",
            )
        if fact.error or fact.best_bw_gbps is None:
            hint = (" (set measurements.cuda_perftest_image to an image with perftest built with CUDA)"
                    if "without CUDA" in (fact.error or output) else "")  # fmt: skip
            return None, f"{fact.error or output.strip()[:200]}{hint}"
        broken = over_cap(
            output, fact.best_bw_gbps, rate_cap_gbps(ctx.site, ctx.target, "ib_write_bw")
        )
        if broken:
            return None, broken
        ctx.record(f"gpu.{check}", fact.best_bw_gbps, "Gb/s")
        return fact.best_bw_gbps, ""

    async def _run_pod(self, ctx: StepContext, check: str, run, server_host: str):
        """Server on the peer, client pod on the node; (log, problem)."""
        assert ctx.node is not None
        kube = ctx.services.kube
        name = _pod_name(check, ctx.node.name)
        pod = cuda_perftest_pod(ctx.site, ctx.node, name, run.client)
        pod["metadata"]["labels"]["gnw-run"] = name
        await kube.delete_pod(NAMESPACE, name)  # a leftover, before its server starts
        server_task = asyncio.ensure_future(
            ctx.run(run.server, on=server_host, timeout=run.seconds + 10, expected=SERVER_EXITS)
        )

        async def create() -> None:
            await asyncio.sleep(0.5)  # the server listens before the client pod starts
            await kube.create_pod(NAMESPACE, pod)

        try:
            log, ended, problem = await run_to_end(
                ctx, f"the perftest pod {name}", f"gnw-run={name}", POD_TIMEOUT_S, create,
                lambda: kube.delete_pod(NAMESPACE, name),
            )  # fmt: skip
        finally:
            await stop_server(ctx, server_task, server_host, run.stop)
        if log is None or ended is None:
            return "", problem
        if ended["status"]["phase"] == "Failed" and not log.strip():
            return "", f"the perftest pod {name} failed without output"
        return log, ""


def _without_device(client: list[str]) -> list[str]:
    """A perftest client command line without ``-d DEV -x GID`` (found in the pod)."""
    out, skip = [], False
    for word in client:
        if skip:
            skip = False
        elif word in ("-d", "-x"):
            skip = True
        else:
            out.append(word)
    return out


# Inside the exported pod, from nvidia-smi topo -m (the toolkit injects nvidia-smi into a pod
# given GPUs): the index of the GPU with the lowest-ranked link (PIX < PXB < PHB < NODE <
# SYS, the first among equals) to the RDMA device "$dev", as nearest_gpu picks it. The
# header (the first line naming GPU0 whose next word is not "X") names the columns; the "NIC
# Legend" maps NICn to the device. Nothing is printed when $dev is not in the legend.
NEAREST_GPU_AWK = (
    'BEGIN { r["PIX"] = 1; r["PXB"] = 2; r["PHB"] = 3; r["NODE"] = 4; r["SYS"] = 5 } '
    '!h { if ($1 ~ /^GPU[0-9]+$/ && $2 != "X") { h = 1; for (i = 1; i <= NF; i++) col[$i] = i + 1 } next } '
    "$1 ~ /^GPU[0-9]+$/ { n++; name[n] = $1; row[n] = $0 } "
    "$1 ~ /^NIC[0-9]+:$/ && $2 == dev { nic = substr($1, 1, length($1) - 1) } "
    'END { if (nic == "" || !(nic in col)) exit; best = 0; '
    "for (i = 1; i <= n; i++) { split(row[i], f); d = f[col[nic]]; "
    "if ((d in r) && (best == 0 || r[d] < best)) { best = r[d]; link = d; pick = name[i] } } "
    'if (best) { sub(/^GPU/, "", pick); print pick, link } }'
)
FIND_NEAREST_GPU = (
    'nearest="$(nvidia-smi topo -m | awk -v dev="$dev" \'' + NEAREST_GPU_AWK + "')\"; "
    'gpu="${nearest%% *}"; '
    '[ -n "$gpu" ] || { echo "$dev is not in nvidia-smi topo -m (or no GPU has a link to it)" >&2; exit 1; }; '
    'echo "GPU $gpu is the nearest to $dev (${nearest#* })"; '
    'case "${nearest#* }" in PIX|PXB) ;; *) echo "WARNING: ${nearest#* } from $dev: GPUDirect '
    "RDMA works there, NCCL's default NCCL_NET_GDR_LEVEL (PXB) will not use it\" >&2;; esac; "
)

# Inside the exported pod: the first RDMA device and its RoCEv2 IPv4 GID index, from sysfs
# (ib_core's gid_attrs/types: "RoCE v2"; an IPv4-mapped GID starts 0000:...:ffff).
FIND_DEVICE_AND_GID = (
    'tool="$1"; shift; dev=""; for d in /sys/class/infiniband/*; do dev="${d##*/}"; break; done; '
    'gid=""; '
    'for t in /sys/class/infiniband/"$dev"/ports/1/gid_attrs/types/*; do '
    'i="${t##*/}"; [ "$(cat "$t" 2>/dev/null)" = "RoCE v2" ] || continue; '
    'case "$(cat /sys/class/infiniband/"$dev"/ports/1/gids/"$i")" in '
    '0000:0000:0000:0000:0000:ffff:*) gid="$i"; break;; esac; done; '
    '[ -n "$gid" ] || { echo "no RoCEv2 IPv4 GID on $dev" >&2; exit 1; }; '
    + FIND_NEAREST_GPU
    + 'exec "$tool" -d "$dev" -x "$gid" --use_cuda="$gpu" "$@"'
)


async def _run_job(ctx: StepContext, job: dict[str, Any]) -> tuple[str | None, str]:
    """Create a Job, wait for its pod, return (log, problem); the Job is removed after."""
    kube = ctx.services.kube
    name = job["metadata"]["name"]

    async def remove() -> None:  # the Job and its pods (a Job's pods outlive it)
        await kube.delete_job(NAMESPACE, name)
        for pod in await kube.pods(NAMESPACE, label_selector=f"job-name={name}"):
            await kube.delete_pod(NAMESPACE, pod["metadata"]["name"])

    log, _, problem = await run_to_end(
        ctx, f"the Job {name}", f"job-name={name}", JOB_TIMEOUT_S,
        lambda: kube.create_job(NAMESPACE, job), remove,
    )  # fmt: skip
    return log, problem


def launcher_problem(log_text: str) -> tuple[str, str] | None:
    """(message, remediation) when mpirun itself refused to start, in Open MPI's words
    (orterun's root check; help-orterun.txt's executable-not-found), else None."""
    if "mpirun has detected an attempt to run as root" in log_text:
        return (
            "mpirun refused to run as root in the launcher (no --allow-run-as-root, no "
            "OMPI_ALLOW_RUN_AS_ROOT=1 + OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)",
            "add --allow-run-as-root to the launcher's mpirun, or run it as a non-root user",
        )
    if "unable to find the specified executable file" in log_text:
        program = next(
            (ln.split(":", 1)[1].strip() for ln in log_text.splitlines()
             if ln.startswith("Executable:")), "?"
        )  # fmt: skip
        return (
            f"mpirun found no program {program} in the nccl-tests image",
            "set measurements.nccl_tests_dir to where the image keeps all_reduce_perf",
        )
    return None


def _busbw(log_text: str) -> float | None:
    try:
        return parse(parse_nccl_tests, log_text).avg_busbw
    except ParseError:
        return None


def busbw_by_size(log_text: str) -> list[tuple[int, float]]:
    """(message size in bytes, out-of-place bus bandwidth in GB/s) for every row of the
    nccl-tests table (in-place where a row has no out-of-place column): the curve that
    shows where the bandwidth comes from, which the one average hides."""
    try:
        rows = parse(parse_nccl_tests, log_text).rows
    except ParseError:
        return []
    sizes = []
    for row in rows:
        bus = row["oop_busbw"] if row.get("oop_busbw") is not None else row.get("ip_busbw")
        if row.get("size") is not None and bus is not None:
            sizes.append((row["size"], bus))
    return sizes


def record_busbw_by_size(ctx: StepContext, prefix: str, log_text: str) -> None:
    """One measurement per message size, ``PREFIX.busbw.BYTES`` (GB/s, labelled with the
    size), as the QP sweep records one per QP count."""
    for size, bus in busbw_by_size(log_text):
        ctx.record(f"{prefix}.busbw.{size}", bus, "GB/s", bytes=str(size))


# The single-node NVLink all_reduce bus bandwidth (GB/s), shown beside the inter-node one.
NVLINK_BUSBW = ResultKey("nccl.nvlink-baseline", "nvlink_busbw", float, "GB/s on NVLink")


class NvlinkBaseline(Step):
    id = "nccl.nvlink-baseline"
    title = "NCCL over NVLink on one node (the baseline)"
    provides = (NVLINK_BUSBW,)
    kind = StepKind.MEASURE
    gates = ("T11",)
    reads = ("measurements", "registry", "taint")
    explain = (
        "all_reduce_perf over every GPU of the node with P2P allowed (seed 002 section 20): "
        "what the GPUs reach without the network, so that the inter-node number has "
        "something to be compared with. Not a network test."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        name = node.name if node else "<node>"
        return [
            shown(["kubectl", "apply", "-f", f"nodes/{name}/k8s/nccl-nvlink-job.yaml"]),
            *finished_then_logs(
                NAMESPACE, f"job/gnw-nccl-nvlink-{name}", JOB_TIMEOUT_S, condition="Complete"
            ),
        ]

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        if node is None:
            return []
        job = nvlink_job(site, node)
        diagnostic = diagnostic_job(site, node)
        return [
            k8s_object(f"nodes/{node.name}/k8s/nccl-nvlink-job.yaml", job,
                       f"Job {NAMESPACE}/{job['metadata']['name']}",
                       "all_reduce_perf over NVLink on one node (the baseline)"),
            k8s_object(f"nodes/{node.name}/k8s/nccl-diagnostic-job.yaml", diagnostic,
                       f"Job {NAMESPACE}/{diagnostic['metadata']['name']}",
                       "DIAGNOSTIC ONLY: one node with P2P/SHM off. NCCL does not use the NIC "
                       "between NVLink-joined GPUs (ncclTopoCheckNet), so expect 'No transport "
                       "found'; the proof is the inter-node MPIJob"),
        ]  # fmt: skip

    async def measure(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        report = Report("T11")
        logs, problem = await _run_job(ctx, nvlink_job(ctx.site, ctx.node))
        if logs is None:
            report.warn("nvlink-baseline", problem, "kubectl describe the Job")
            return report.findings
        try:
            log = parse(parse_nccl_log, logs)
        except ParseError as exc:
            first = next((ln for ln in logs.splitlines() if ln.strip()), "")[:200]
            report.warn("nvlink-baseline", f"no NCCL INFO lines ({exc.reason}): {first}",
                        "read the log; measurements.nccl_tests_dir names where the image "
                        "keeps all_reduce_perf")  # fmt: skip
            return report.findings
        scratch = Report("T11")
        if explain_warnings(log, scratch):
            report.warn("nvlink-baseline", scratch.findings[0].message, "read the Job's log")
            return report.findings
        transports = sorted({c.transport for c in log.channels if not c.is_net})
        busbw = _busbw(logs)
        if busbw is None:
            report.warn("nvlink-baseline", "no nccl-tests result table", "read the Job's log")
            return report.findings
        ctx.record("nccl.nvlink.avg_busbw", busbw, "GB/s")
        record_busbw_by_size(ctx, "nccl.nvlink", logs)
        ctx.provide(NVLINK_BUSBW, busbw)
        report.ok(
            "nvlink-baseline",
            f"all_reduce over {ctx.node.gpu_count} GPUs on one node: average bus bandwidth "
            f"{busbw} GB/s ({', '.join(transports) or 'no channel lines'})",
        )
        return report.findings


def nccl_partners(site: Site, node: str) -> list[str]:
    """The nodes an inter-node run of ``node`` uses: the next new GPU node (a ring, so every
    node is measured with a neighbour), else the first existing GPU node named in the site."""
    names = [n.name for n in site.nodes]
    if len(names) > 1:
        return [node, names[(names.index(node) + 1) % len(names)]]
    if site.measurements.nccl_peer_nodes:
        return [node, site.measurements.nccl_peer_nodes[0]]
    return [node]


class InterNodeNccl(Step):
    id = "nccl.all-reduce"
    title = "nccl-tests all_reduce_perf across nodes (MPIJob) with NCCL_DEBUG=INFO"
    kind = StepKind.MEASURE
    one_node_at_a_time = True  # a node's GPUs are in its own run and its neighbour's
    gates = ("T11", "T12")
    reads = ("qos", "device_plugin", "measurements", "registry", "taint")
    needs = (RDMA_DEVICE,)
    # The explanation of a host-memory path (GPUs beyond PXB) and the NVLink comparison:
    # said without them when their steps recorded none.
    uses = (DISTANCES, NVLINK_BUSBW, QOS_VERIFIED)
    explain = (
        "One rank per GPU on this node and a second GPU node, through a Kubeflow MPIJob "
        "(v2beta1): between nodes NCCL must use the network, so the log decides. Every net "
        "channel 'via NET/IB/N/GDRDMA' = GPU memory direct; 'via NET/IB/N' = through host "
        "memory; 'NET/Socket' = no RDMA at all; any NCCL WARN is read into the verdict. On an "
        "E810, a T12 pass is 'Experimental / vendor support risk', never 'Production "
        "candidate'. Needs two GPU nodes (new ones, or measurements.nccl_peer_nodes) and the "
        "MPI Operator."
    )

    def measured_with(self, site: Site, target: str) -> frozenset[str]:
        """A run holds the GPUs of both its nodes (not the AIStor peer): runs of disjoint
        pairs go at once, so a fleet takes two waves, not a turn per node."""
        return frozenset(f"node:{n}" for n in nccl_partners(site, target))

    def commands(self, site: Site, node: Node | None) -> list[str]:
        name = node.name if node else "<node>"
        nodes = nccl_partners(site, name)
        if node is not None and len(nodes) < 2:
            # One GPU node: no MPIJob is exported (artifacts), so no line may name one.
            return ["# one GPU node: no partner for an all-reduce across nodes; nothing to run"]
        job = mpijob_name(nodes)
        return [
            shown(["kubectl", "get", "crd", MPIJOB_CRD], "the MPI Operator is installed"),
            shown(["kubectl", "apply", "-f", f"nodes/{name}/k8s/nccl-mpijob.yaml"]),
            shown(
                [
                    "kubectl",
                    "-n",
                    NAMESPACE,
                    "wait",
                    "--for=condition=Succeeded",
                    f"mpijob/{job}",
                    f"--timeout={JOB_TIMEOUT_S}s",
                ],
                f"on a timeout: kubectl -n {NAMESPACE} describe mpijob/{job}",
            ),
            f"kubectl logs -n {NAMESPACE} -l {JOB_NAME_LABEL}={q(job)},{JOB_ROLE_LABEL}=launcher",
        ]

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        if node is None:
            return []
        nodes = nccl_partners(site, node.name)
        if len(nodes) < 2:
            return []
        job = mpijob(site, nodes, node.gpu_count, None, qos_on=True)
        diagnostic = mpijob(site, nodes, node.gpu_count, None, qos_on=True, gdr_level="SYS")
        return [
            k8s_object(f"nodes/{node.name}/k8s/nccl-mpijob.yaml", job,
                       f"MPIJob {NAMESPACE}/{job['metadata']['name']}",
                       f"all_reduce_perf across {', '.join(nodes)} (one rank per GPU)"),
            k8s_object(f"nodes/{node.name}/k8s/nccl-mpijob-gdr-sys.yaml", diagnostic,
                       f"MPIJob {NAMESPACE}/{diagnostic['metadata']['name']}",
                       "DIAGNOSTIC ONLY: the same run with NCCL_NET_GDR_LEVEL=SYS, GPUDirect "
                       "allowed for GPUs beyond PXB: compare it with the default to see what the "
                       "distance limit costs (the physical path does not change)"),
        ]  # fmt: skip

    async def measure(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        report = Report("T11")
        nodes = nccl_partners(ctx.site, ctx.target)
        if len(nodes) < 2:
            why = (
                "one GPU node cannot prove the network path (NCCL keeps traffic between "
                "NVLink-joined GPUs off the NIC); name an existing GPU node in "
                "measurements.nccl_peer_nodes, or add two nodes, then re-run this step"
            )
            report.skip("nccl-path", f"not run: {why}", gate="T11")
            report.skip(
                "gdr", "not run: no second GPU node for the inter-node NCCL run", gate="T12"
            )
            return report.findings
        if MPIJOB_CRD not in await ctx.services.kube.crd_names():
            why = (
                f"the Kubeflow MPI Operator is not installed (no {MPIJOB_CRD} CRD): install it "
                "(kubeflow/mpi-operator, MPIJob v2beta1), then re-run this step; the export "
                f"has the job as nodes/{ctx.target}/k8s/nccl-mpijob.yaml"
            )
            report.skip("nccl-path", f"not run: {why}", gate="T11")
            report.skip("gdr", "not run: no MPI Operator for the inter-node NCCL run", gate="T12")
            return report.findings
        hca = ctx.need(RDMA_DEVICE)
        qos_on = ctx.result_if_any(QOS_VERIFIED) is not None  # recorded once qos.apply is done
        job = mpijob(ctx.site, nodes, ctx.node.gpu_count, hca, qos_on)
        logs, problem = await self._run(ctx, job)
        if logs is None:
            report.fail("nccl-path", problem, f"kubectl describe mpijob {job['metadata']['name']}")
            return report.findings
        launch = launcher_problem(logs)
        if launch is not None:
            report.fail("nccl-path", launch[0], launch[1])
            report.fail(
                "gdr", "not run: the MPIJob's launcher did not start", launch[1], gate="T12"
            )
            return report.findings
        try:
            log = parse(parse_nccl_log, logs)
        except ParseError as exc:
            report.fail("nccl-path", f"no NCCL INFO lines in the launcher's log ({exc.reason})",
                        "check NCCL_DEBUG=INFO")  # fmt: skip
            return report.findings
        ctx.data["nccl_verdict"] = log.verdict
        explain_verdict(log, ctx.result_if_any(DISTANCES), ctx.site.nic.profile, report)
        busbw = _busbw(logs)
        if busbw is not None:
            ctx.record("nccl.all_reduce.avg_busbw", busbw, "GB/s")
            record_busbw_by_size(ctx, "nccl.all_reduce", logs)
            baseline = ctx.result_if_any(NVLINK_BUSBW)
            versus = f" (NVLink on one node: {baseline} GB/s)" if baseline else ""
            report.ok("nccl-busbw",
                      f"all_reduce across {', '.join(nodes)}: average bus bandwidth {busbw} GB/s{versus}")  # fmt: skip
        elif log.verdict not in ("no-transport",):
            report.warn("nccl-busbw", "no nccl-tests result table in the log", "read the log")
        return report.findings

    async def _run(self, ctx: StepContext, job: dict[str, Any]) -> tuple[str | None, str]:
        kube = ctx.services.kube
        name = job["metadata"]["name"]
        log, _, problem = await run_to_end(
            ctx, f"the MPIJob {name}'s launcher",
            f"{JOB_NAME_LABEL}={name},{JOB_ROLE_LABEL}=launcher", JOB_TIMEOUT_S,
            lambda: kube.create_object(MPIJOBS, job), lambda: kube.delete_object(MPIJOBS, name),
        )  # fmt: skip
        return log, problem


PHASE = Phase(
    id="nccl",
    number=14,
    title="NCCL / GPUDirect proof",
    summary="Prove GPU memory goes straight to the NIC, with numbers and NCCL's own words.",
    steps=(CudaPerftest(), NvlinkBaseline(), InterNodeNccl()),
)
