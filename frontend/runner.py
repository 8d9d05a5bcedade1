"""Runs the engine for the command line: read-only checks, the headless demo, summaries.

The TUI uses the same engine through its own front end; nothing here is Textual.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from wizard.checkpoint import Checkpoint
from wizard.engine import Engine, RunSummary
from wizard.errors import EXIT_CHECK_FAILED, EXIT_INTERNAL, EXIT_OK, EXIT_USAGE
from wizard.events import FrontEnd
from wizard.fleet import is_fleet, targets_text
from wizard.model import Finding, Severity
from wizard.plan import CLUSTER, Plan
from wizard.runview import RunView, fold, of_results
from wizard.services import build_services
from wizard.site import Site
from wizard.verdict import GateVerdict, RunVerdict, is_internal_error, is_unreachable

# The exit code of each verdict of a run (wizard/verdict.py judge_run, which `status` says).
EXIT_CODES = {
    RunVerdict.OK: EXIT_OK,
    RunVerdict.FAILED: EXIT_CHECK_FAILED,
    RunVerdict.UNREACHABLE: EXIT_USAGE,
    RunVerdict.INTERNAL_ERROR: EXIT_INTERNAL,
}
_CONNECTION_CHECKS = (".reachable",)


def read_only_steps(plan: Plan) -> list[str]:
    """Every check step of the read-only phases (``Phase.read_only``)."""
    return plan.read_only_steps()


@dataclass
class Outcome:
    site: Site
    summary: RunSummary
    # The plan and the fold of what the checkpoint held at the end: a gate's verdict needs
    # to know which of the steps that prove it ran (``judge_gates``). Without it (an engine
    # world's test), the gates are judged from the run's findings alone.
    plan: Plan | None = None
    view: RunView | None = field(default=None, repr=False)

    @property
    def run_view(self) -> RunView:
        """The fold of this run's results (what it ran, not what earlier runs settled):
        what ``format``, ``to_json`` and the exit code say."""
        found = [
            (step, target, finding)
            for (step, target), findings in self.summary.findings.items()
            for finding in findings
        ]
        view = of_results(self.plan or Plan(()), self.site, self.summary.results, found)
        if self.view is not None:
            # What only the checkpoint knows: the failures a skip of this run took the
            # place of, and the nodes the wizard holds cordoned at the run's end.
            for key, record in list(view.records.items()):
                if earlier := self.view.record(*key).earlier:
                    view.put(*key, replace(record, earlier=earlier))
            view.cordons = self.view.cordons
        return view

    @property
    def findings(self) -> list[tuple[str, str, Finding]]:
        return self.run_view.findings

    @property
    def unreachable(self) -> list[Finding]:
        return [f for _, _, f in self.findings if is_unreachable(f)]

    @property
    def internal_errors(self) -> list[Finding]:
        """Failures that are bugs of the wizard, not conditions of the site."""
        return [f for _, _, f in self.findings if is_internal_error(f)]

    @property
    def verdict(self) -> RunVerdict:
        """The one verdict (``judge_run``) over this run's results, its stop and the
        changes it left in flight."""
        return self.run_view.verdict(
            stopped=bool(self.summary.stopped), in_flight=bool(self.summary.in_flight)
        )

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def gate_verdicts(self) -> dict[str, GateVerdict]:
        return (self.view or self.run_view).gates()

    def to_json(self) -> dict[str, Any]:
        return {
            "site": self.site.name,
            "exit_code": self.exit_code,
            "ok": self.exit_code == EXIT_OK,
            "stopped": self.summary.stopped,
            "in_flight": self.summary.in_flight,
            "gates": {g: v.value for g, v in self.gate_verdicts().items()},
            "results": [
                {
                    "step": step,
                    "target": target,
                    "state": record.state.value,
                    "findings": [f.to_json() for f in record.findings],
                }
                for (step, target), record in self.run_view.records.items()
            ],
        }

    def format(self) -> str:
        lines = [f"site {self.site.name}:"]
        found = self.findings
        by_target: dict[str, list[tuple[str, Finding]]] = {}
        for step, target, finding in found:
            by_target.setdefault(target, []).append((step, finding))
        # On a fleet a target whose every finding passed is not listed finding by finding:
        # those targets share one line, and the nodes with a problem stand out.
        fleet = is_fleet(len(self.site.nodes))
        all_passed = []
        for target in sorted(by_target):
            findings = [f for _, f in by_target[target]]
            shown = [f for f in findings if f.severity is not Severity.PASS or f.waived]
            if fleet and not shown:
                all_passed.append(target)
                continue
            lines.append(f"  {target}")
            for finding in shown if fleet else findings:
                tag = "WAIVED" if finding.waived else finding.severity.value.upper()
                lines.append(f"    [{tag:<4}] {finding.check}: {finding.message}")
                if finding.remediation and finding.severity in (Severity.FAIL, Severity.WARN):
                    lines.append(f"           fix: {finding.remediation}")
            if fleet and len(shown) < len(findings):
                lines.append(f"    ({len(findings) - len(shown)} more passed)")
        nodes = [t for t in all_passed if t != CLUSTER]
        where = [targets_text(nodes)] if nodes else []
        where += ["the cluster"] if CLUSTER in all_passed else []
        if where:
            lines.append(f"  every check passed on {' and '.join(where)}")
        counts = {s: sum(1 for _, _, f in found if f.severity is s) for s in Severity}
        lines.append(
            f"{counts[Severity.PASS]} passed, {counts[Severity.FAIL]} failed, "
            f"{counts[Severity.WARN]} warnings, {counts[Severity.SKIP]} skipped"
        )
        # A node mid-change is the first thing to know: its checks describe a half change.
        lines[1:1] = [f"  IN FLIGHT: {line}" for line in self.summary.in_flight]
        return "\n".join(lines)


async def run_engine(
    site: Site,
    plan: Plan,
    state_dir: Path,
    frontend: FrontEnd,
    *,
    only: list[str] | None = None,
    ignore_requires: bool = False,
    phase: str | None = None,
    step: str | None = None,
    waivers: dict[str, str] | None = None,
    start_over: bool = False,
) -> Outcome:
    """Open the checkpoint and the transports, run the engine, close everything."""
    services = build_services(site)
    try:
        with Checkpoint.open(state_dir, site, start_over=start_over) as checkpoint:
            engine = Engine(site, plan, checkpoint, frontend, services, waivers=waivers)
            summary = await engine.run(
                only=only, ignore_requires=ignore_requires, phase=phase, step=step
            )
            view = fold(checkpoint.run(), plan, site)
    finally:
        await services.close()
    return Outcome(site, summary, plan, view)


async def run_checks(site: Site, plan: Plan, state_dir: Path, frontend: FrontEnd) -> Outcome:
    return await run_engine(
        site, plan, state_dir, frontend, only=read_only_steps(plan), ignore_requires=True
    )


def dump_json(outcome: Outcome) -> str:
    return json.dumps(outcome.to_json(), indent=2)
