"""File 1 of 3 of a new preflight check (README, "Adding a check"): the step. In the
product this is a class in steps/preflight.py, listed in its PHASE."""

from __future__ import annotations

from tests.adding_a_check.timesync_parser import TIMESYNC
from wizard.model import Finding, StepKind
from wizard.plan import Step, StepContext
from wizard.probe import Report, probe
from wizard.site import Node, Site


class ClockSynced(Step):
    id = "preflight.clock"
    title = "The node's clock is NTP-synchronized"
    kind = StepKind.CHECK
    gates = ("T00",)
    explain = "Kubernetes certificates and leases need the node's clock in step with the cluster."

    def commands(self, site: Site, node: Node | None) -> list[str]:
        return [TIMESYNC.text]  # the runbook prints the Command the step runs

    async def verify(self, ctx: StepContext) -> list[Finding]:
        report = Report("T00")
        p = await probe(ctx, TIMESYNC)  # a Probe[TimeSync]: p.fact.synchronized is a bool
        if not p.ok:
            report.unreadable("clock", p, "the clock's NTP state")
        elif p.fact.synchronized:
            report.ok("clock", "the clock is NTP-synchronized", p.evidence())
        else:
            report.fail(
                "clock",
                "the clock is not NTP-synchronized",
                "enable chronyd (`systemctl enable --now chronyd`) and wait for a sync",
                p.evidence(),
            )
        return report.findings
