"""Phase 12, ECN (DCQCN) after PFC works alone (T08).

ECN is turned on only once PFC works on its own, so a problem can be pinned to the NIC,
the switch, PFC or ECN. With Intel's irdma, DCQCN is per RDMA device in its configfs
(off by default) and applies to queue pairs created afterwards.
"""

from __future__ import annotations

from steps.common import RDMA_LINKS, shown
from steps.irdma import RDMA_DEVICE
from steps.qos import dcqcn_commands, dcqcn_path, rdma_device
from steps.qos.steps import QOS_VERIFIED
from wizard.artifacts import Artifact, Target, render
from wizard.model import Finding, StepKind
from wizard.plan import Change, Phase, Scope, Step, StepContext
from wizard.probe import Report
from wizard.site import Node, Site
from wizard.transports.base import read_file_command

# PFC alone verified (seed 000 section 29): the QoS change and its measurement, whose T08
# includes the default-ToS proof, are done before ECN is changed anywhere.
PFC_VERIFIED = ("qos.apply", "qos.measure")


class EcnSwitch(Step):
    """The switch's ECN marking: its own change, after PFC alone is verified."""

    id = "ecn.switch"
    title = "Switch: ECN marking on the RoCE class (a change of its own)"
    kind = StepKind.MANUAL
    gates = ("T08",)
    scope = Scope.CLUSTER
    requires = ("qos.switch",)
    reads = ("qos",)
    explain = (
        "With qos.ecn, ECN marking on the RoCE traffic class is a second switch change, made "
        "only after phase 11 verified PFC alone (so a fault can be pinned to NIC, switch, PFC "
        "or ECN): the operator applies cluster/switch/ecn.md on every RoCE port and ISL and "
        "confirms. Without qos.ecn there is nothing to do."
    )

    def runs_itself(self, site: Site) -> bool:
        return not site.qos.ecn  # nothing for the operator to do: recorded as off

    def artifacts(self, site: Site, node: Node | None) -> list[Artifact]:
        if not site.qos.ecn:
            return []
        return [
            Artifact(
                "cluster/switch/ecn.md",
                render("switch/ecn.md.j2", site=site, qos=site.qos),
                Target.SWITCH,
                "the RoCE switch ports and ISLs",
                "ECN marking, the second switch change",
            )
        ]

    def instructions(self, site: Site, node: Node | None) -> str:
        return (
            f"PFC alone is verified. Now, as a change of its own, turn on ECN marking for TC"
            f"{site.qos.traffic_class} on every switch port and ISL that carries RoCE (see "
            "cluster/switch/ecn.md). Confirm when done; the wizard then enables DCQCN on the nodes."
        )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        if not site.qos.ecn:
            return ["# qos.ecn is false in the site file: nothing to run"]
        return ["# the operator changes the switch (cluster/switch/ecn.md) and confirms"]

    async def changes(self, ctx: StepContext) -> list[Change]:
        return []

    async def apply(self, ctx: StepContext, changes: list[Change]) -> None:
        return None

    async def verify(self, ctx: StepContext) -> list[Finding]:
        report = Report("T08")
        if ctx.site.qos.ecn:  # off: ecn.enable's skip says so once
            report.ok("ecn-switch", "the operator confirmed ECN marking on the switch, after "
                      "PFC alone was verified")  # fmt: skip
        return report.findings


class EnableEcn(Step):
    id = "ecn.enable"
    title = "ECN / DCQCN on the RDMA device"
    kind = StepKind.APPLY
    gates = ("T08",)
    # Named, not only implied by the phase order: a --step ecn.enable run is refused too.
    requires = (*PFC_VERIFIED, "ecn.switch")
    # ECN on top of PFC only where qos.apply's PFC was verified (skipped with it otherwise).
    needs = (QOS_VERIFIED,)
    uses = (RDMA_DEVICE,)  # rdma_device(): read live with `rdma link` when not recorded
    reads = ("qos",)
    explain = (
        "Only after PFC alone works (qos.apply and qos.measure done, to isolate NIC / switch / "
        "PFC / ECN faults), after the switch's ECN change, and only when the site sets "
        "qos.ecn: irdma's DCQCN is enabled through "
        "/sys/kernel/config/irdma/<dev>/roce_dcqcn_enable (new queue pairs use it); the switch "
        "must mark ECN on TC3. The boot unit reapplies it. The per-priority pause counters "
        "(ethtool -S) are watched before and after load in the measurement phases."
    )

    def commands(self, site: Site, node: Node | None) -> list[str]:
        if not site.qos.ecn:
            return ["# qos.ecn is false in the site file: nothing to run"]
        device = "<rdma-dev>"
        return [
            shown(RDMA_LINKS, "only when irdma.verify recorded no device"),
            shown(read_file_command(dcqcn_path(device))),
            *(shown(c, "when it is not 1") for c in dcqcn_commands(device)),
            "# the pause counters (ethtool -S, rx/tx_priority_N_xoff.nic) are read under load later",
        ]

    def _artifact(self, node: Node, device: str) -> Artifact:
        return Artifact(
            f"nodes/{node.name}/qos/dcqcn",
            "roce_dcqcn_enable: 1\n",
            Target.HOST_FILE,
            f"{dcqcn_path(device)} on {node.name}",
            "DCQCN (ECN) on the RDMA device",
        )

    async def changes(self, ctx: StepContext) -> list[Change]:
        assert ctx.node is not None
        if not ctx.site.qos.ecn:
            return []  # nothing to do: verify reports ECN as deliberately off
        device = await rdma_device(ctx) or "<rdma-dev>"
        ctx.data["rdma_device"] = device
        live = await ctx.read_file(dcqcn_path(device))
        current = None if live is None else f"roce_dcqcn_enable: {live.strip()}\n"
        return [Change(self._artifact(ctx.node, device), current)]

    async def apply(self, ctx: StepContext, changes: list[Change]) -> None:
        for command in dcqcn_commands(ctx.data["rdma_device"]):
            await ctx.run(command, check=True)

    async def verify(self, ctx: StepContext) -> list[Finding]:
        report = Report("T08")
        if not ctx.site.qos.ecn:
            report.skip("ecn", "ECN is off in the site file (qos.ecn: false): PFC alone for now")
            return report.findings
        device = await rdma_device(ctx)
        value = await ctx.read_file(dcqcn_path(device)) if device else None
        if value is not None and value.strip() == "1":
            report.ok("ecn", f"DCQCN is enabled on {device}")
        else:
            report.fail(
                "ecn",
                f"DCQCN is not enabled on {device} ({value.strip() if value else 'no configfs entry'})",
                "check that Intel's irdma provides /sys/kernel/config/irdma (out-of-tree driver)",
            )
        return report.findings


PHASE = Phase(
    id="ecn",
    number=12,
    title="ECN",
    summary="Turn on ECN / DCQCN only once PFC works on its own.",
    steps=(EcnSwitch(), EnableEcn()),
)
