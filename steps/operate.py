"""Phase 16, real workload, soak, and reboot survival (T15, T16, T17)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from steps.common import bonding_command, read_lines, shown, stats_command
from steps.kernel_modules import kernel_findings, kernel_reads, module_reads
from wizard.artifacts import Artifact, Target
from wizard.drain import back_in_service, out_of_service
from wizard.facts.nic import parse_bonding, parse_ethtool_s
from wizard.model import Finding, StepKind
from wizard.plan import Change, Phase, Step, StepContext, capped_load_seconds
from wizard.probe import Report
from wizard.site import Node, Site
from wizard.transports.base import TransportError, read_file_command

BOOT_ID = "/proc/sys/kernel/random/boot_id"
REBOOT = ["systemctl", "reboot"]
REBOOT_TIMEOUT_S = 900.0
REBOOT_POLL_S = 2.0


class Vllm(Step):
    id = "operate.vllm"
    title = "vLLM serving benchmark"
    kind = StepKind.MEASURE
    gates = ("T15",)
    reads = ("measurements",)
    explain = "An operator-configured vLLM serving benchmark on the node; its headline number is recorded."

    def commands(self, site: Site, node: Node | None) -> list[str]:
        from steps.bench import benchmark_lines

        return benchmark_lines(site.measurements.vllm, "vllm")

    async def measure(self, ctx: StepContext) -> list[Finding]:
        from steps.bench import run_benchmark

        report = Report("T15")
        await run_benchmark(ctx, report, "vllm", ctx.site.measurements.vllm, "vLLM serving")
        return report.findings


class Soak(Step):
    id = "operate.soak"
    loads_far_end = True  # an AIStor peer: gated when it is production
    title = "Soak: repeated RDMA load"
    kind = StepKind.MEASURE
    gates = ("T16",)
    reads = ("measurements", "aistor")
    explain = (
        "Repeated RDMA load (ib_write_bw, 4 QPs) for measurements.soak_seconds (against a "
        "production AIStor peer at most aistor.load_max_seconds) while error, "
        "link-flap and pause counters are sampled; a pass needs stable bandwidth (spread under "
        "10%) and no new errors or link failures."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        from steps.perf import BW_QPS, endpoint_lines, perftest_lines

        if node is None:
            return []
        counters = [
            *(shown(stats_command(port), "errors") for port in node.bond.ports),
            shown(bonding_command(node), "link failures"),
        ]
        return [
            *endpoint_lines(site, node),
            *counters,
            f"# repeated for measurements.soak_seconds ({site.measurements.soak_seconds} s):",
            *perftest_lines(site, node, "ib_write_bw", qps=BW_QPS),
            *counters,
        ]

    async def measure(self, ctx: StepContext) -> list[Finding]:
        from steps.perf import BW_QPS, endpoints, perftest_pair
        from wizard.probe import probe

        assert ctx.node is not None
        report = Report("T16")
        client, server, _ = await endpoints(ctx)
        if client is None or server is None:
            report.fail("soak", "no RDMA endpoint pair", "run the RDMA phases first")
            return report.findings

        async def counters() -> dict[str, int]:
            totals: dict[str, int] = {}
            for port in ctx.node.bond.ports:
                stats = await probe(ctx, stats_command(port), parse_ethtool_s)
                if stats.ok:
                    for name, value in stats.fact.counters.items():
                        if any(word in name for word in ("error", "crc", "discard", "drop")):
                            totals[f"{port}:{name}"] = value
            bond = await probe(ctx, bonding_command(ctx.node), parse_bonding)
            if bond.ok:
                for slave in bond.fact.slaves:
                    totals[f"{slave.name}:link_failures"] = slave.link_failure_count or 0
            return totals

        before = await counters()
        samples: list[float] = []
        failures = 0
        # Against a production AIStor peer, never longer than aistor.load_max_seconds.
        seconds = capped_load_seconds(ctx.site, ctx.target, ctx.site.measurements.soak_seconds)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline or not samples:
            fact, problem = await perftest_pair(ctx, "ib_write_bw", client, server, qps=BW_QPS)
            if fact is None or problem or fact.best_bw_gbps is None:
                failures += 1
            else:
                samples.append(fact.best_bw_gbps)
            if failures > 2:
                break
        after = await counters()
        grown = {k: after[k] - before.get(k, 0) for k in after if after[k] > before.get(k, 0)}
        ctx.data["soak_samples"] = samples
        if samples:
            mean = sum(samples) / len(samples)
            spread = (max(samples) - min(samples)) / mean if mean else 1.0
            ctx.record("soak.mean", mean, "Gb/s", runs=str(len(samples)))
            ctx.record("soak.spread", spread * 100, "%")
        else:
            mean, spread = 0.0, 1.0
        text = f"{len(samples)} runs, mean {mean:.1f} Gb/s, spread {spread:.1%}, {failures} failed runs"
        if failures or spread > 0.10 or grown:
            detail = f"; counters grew: {grown}" if grown else ""
            report.fail(
                "soak",
                text + detail,
                "look at the grown counters (errors, link flaps) and the switch logs",
            )
        else:
            report.ok("soak", text + "; no new errors or link failures")
        return report.findings


class Reboot(Step):
    id = "operate.reboot"
    title = "Reboot and re-verify everything"
    kind = StepKind.MAINTENANCE
    gates = ("T17",)
    reads = ("qos", "node.bond", "node.gpu_count")
    explain = (
        "First the kernel the reboot starts must have Intel's ice and irdma (a kernel update "
        "since phase 3 is caught here and refuses the reboot). The node is drained and "
        "rebooted; the wizard records 'waiting for reboot' (it may be "
        "closed and resumed, even from another process), waits for SSH with a new boot id, then "
        "re-verifies irdma and RoCEv2, the bond, QoS on both ports (restored by the boot unit), "
        "the node Ready with its GPUs allocatable, and uncordons."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        from steps.bond import lacp_reads
        from steps.gpu_operator.runtime import read_lines as runtime_read_lines
        from steps.irdma import irdma_enable_verify_lines, rdma_reads
        from steps.qos import verify_lines

        if node is None:
            return []
        return [
            *read_lines(kernel_reads(node), "first: the kernel the reboot starts has Intel's ice"),
            *read_lines(module_reads(["<kernel>"]), "for each <kernel> ls lists"),
            shown(read_file_command(BOOT_ID)),
            *(f"{line}  # from the jump host" for line in out_of_service(node.name)),
            shown(REBOOT),
            shown(read_file_command(BOOT_ID), "until it differs"),
            "# then what was done before the reboot must hold after it (irdma.enable, "
            "irdma.verify, bond.lacp, qos.apply; gpu-operator.verify reads the cluster and "
            "containerd's nvidia runtime):",
            *irdma_enable_verify_lines(node),
            *read_lines(rdma_reads(node)),
            *read_lines(lacp_reads(node)),
            *verify_lines(node),
            *runtime_read_lines(site),
            f"{back_in_service(node.name)}  # from the jump host",
        ]

    def rollback(self, site: Site, node: Node | None) -> str | None:
        return (
            "# A reboot cannot be undone: nothing to run. If the node does not come back, use\n"
            "# its BMC console; it stays cordoned until it verifies again."
        )

    async def preconditions(self, ctx: StepContext) -> list[Finding]:
        """The kernel the reboot starts has Intel's ice/irdma: a kernel update since phase 3
        (``dnf update``: a newer default kernel with only the in-tree ice) refuses the reboot
        before the node boots a kernel that drops RDMA from the bond."""
        return await kernel_findings(ctx, before_reboot=True)

    reversible = False  # nothing to roll back to: the engine offers no rollback
    # After an outside reboot its result is verified on the new boot, never run again: a
    # rerun must not reboot the node once more (engine: Step.rerun_when_lost).
    rerun_when_lost = False

    def actions(self, site: Site, node: Node | None) -> list[str]:
        return [
            f"cat {BOOT_ID}   (the boot id before)",
            "systemctl reboot",
            f"wait up to {REBOOT_TIMEOUT_S:g}s for SSH with a new boot id",
            "re-verify irdma/RoCEv2, bond1, QoS on both ports, the GPU Operator",
        ]

    async def capture(self, ctx: StepContext) -> dict[str, Any]:
        """The boot id before the reboot: the proof that the node really rebooted."""
        return {"boot_id": (await ctx.read_file(BOOT_ID) or "").strip()}

    async def changes(self, ctx: StepContext) -> list[Change]:
        assert ctx.node is not None
        boot_id = ctx.data["capture"]["boot_id"]
        artifact = Artifact(
            f"nodes/{ctx.node.name}/boot",
            "boot: a new boot (after systemctl reboot)\n",
            Target.SCRIPT,
            f"the running system of {ctx.node.name}",
            "reboot",
        )
        return [Change(artifact, f"boot: {boot_id}\n")]

    async def apply(self, ctx: StepContext, changes: list[Change]) -> None:
        """Reboot, unless the node already booted anew since the capture (a resume after
        the wizard was killed while the node went down must not reboot it twice)."""
        assert ctx.node is not None
        before = ctx.data["capture"]["boot_id"]
        try:
            current = (await ctx.read_file(BOOT_ID) or "").strip()
        except TransportError:
            current = ""  # down or coming up: the reboot is under way
        if current != before:
            return
        ctx.waiting(f"waiting for {ctx.node.name} to reboot (boot id {before})")
        with contextlib.suppress(TransportError):  # the connection may drop as the host goes down
            await ctx.run(["systemctl", "reboot"], timeout=30)
        await ctx.host.close()

    async def _wait_for_new_boot(self, ctx: StepContext) -> str | None:
        before = ctx.data["capture"]["boot_id"]
        ctx.wait_begins(
            f"waiting for {ctx.target} to come back with a new boot id", REBOOT_TIMEOUT_S
        )
        deadline = time.monotonic() + REBOOT_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                now = (await ctx.read_file(BOOT_ID) or "").strip()
            except TransportError:
                await asyncio.sleep(REBOOT_POLL_S)
                continue
            if now and now != before:
                return now
            await asyncio.sleep(REBOOT_POLL_S)
        return None

    async def verify(self, ctx: StepContext) -> list[Finding]:
        assert ctx.node is not None
        report = Report("T17")
        if "capture" in ctx.data:
            boot_id = await self._wait_for_new_boot(ctx)
            if boot_id is None:
                report.fail(
                    "rebooted",
                    f"{ctx.node.name} did not come back with a new boot id within {REBOOT_TIMEOUT_S:g}s",
                    "check the node's console (BMC); resume the wizard when it is up",
                )
                return report.findings
            report.ok("rebooted", f"{ctx.node.name} is back with boot id {boot_id}")
        else:
            # A re-verification (the node rebooted since this step's result was recorded,
            # e.g. by hand): no reboot of ours to wait for; what held before must hold on
            # the boot the node is on now.
            boot_id = (await ctx.read_file(BOOT_ID) or "").strip()
            if not boot_id:
                report.fail(
                    "rebooted",
                    f"the boot id of {ctx.node.name} could not be read ({BOOT_ID} is empty)",
                    "check the node; the step is verified again on the next run",
                )
                return report.findings
            report.ok(
                "rebooted", f"{ctx.node.name} booted anew since the reboot step (boot id {boot_id})"
            )
        ctx.data["boot_id_after"] = boot_id
        ctx.note_boot(boot_id)  # the checkpoint's identity: this boot
        scratch: dict[str, Any] = {}
        for step_id in (
            "irdma.enable",
            "irdma.verify",
            "bond.lacp",
            "qos.apply",
            "gpu-operator.verify",
        ):
            if ctx.state_of(step_id).value != "done":
                continue  # only what was done before the reboot must hold after it
            # Each step's own verification, as that step (its declared results), sharing
            # one scratch record (what irdma.verify finds again, qos.apply reads): what
            # they record again is not the reboot's record.
            again = ctx.plan_step(step_id)
            findings = await again.verify(ctx.as_step(again, scratch))
            for finding in findings:
                report.findings.append(
                    Finding(
                        f"T17.{finding.check}",
                        "T17",
                        finding.severity,
                        f"after reboot: {finding.message}",
                        finding.remediation,
                        finding.evidence,
                    )
                )
        return report.findings


PHASE = Phase(
    id="operate",
    number=16,
    title="Workload, soak and reboot",
    summary="A real workload, a soak under load, and proof that everything survives a reboot.",
    steps=(Vllm(), Soak(), Reboot()),
)
