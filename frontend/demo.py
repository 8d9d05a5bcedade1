"""The demo: the whole wizard against the embedded lab, with no setup."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from frontend.headless import HeadlessFrontEnd
from frontend.lab_session import kept_lab_dir
from frontend.runner import Outcome, run_engine
from simulator.lab import Lab
from simulator.scratch import scratch_dir
from steps import build_plan
from wizard.fleet import is_fleet
from wizard.model import GATES
from wizard.site import load_site

# What the lab's cluster is, told before the run (simulator/existing.py).
CLUSTER_KINDS = {
    "brownfield": "an existing production cluster (another GPU node with its own RDMA plugin, "
    "a GPU Operator release, workloads behind PDBs) that the new node(s) join with Kubespray; "
    "nothing outside them changes without --allow-cluster-change",
    "greenfield": "a cluster built for the wizard (fault greenfield): the GPU node(s) already "
    "joined, nothing else in it",
}


def gate_table(outcome: Outcome) -> str:
    lines = ["gate  verdict  what"]
    for gate, verdict in outcome.gate_verdicts().items():
        lines.append(f"{gate:<5} {verdict.value:<8} {GATES[gate]}")
    return "\n".join(lines)


async def run_demo_headless(
    faults: tuple[str, ...],
    nodes: int,
    state_dir: Path | None,
    report_dir: Path | None = None,
    control_plane: str = "embedded",
    *,
    allow_cluster_change: frozenset[str] = frozenset(),
) -> int:
    """Run the whole plan in the lab, auto-approved; print the gates; 0 if every gate passes."""
    directory = scratch_dir("gnw-demo-")  # a killed demo's is swept (simulator/scratch.py)
    try:
        # With a state directory the lab is kept there too, so a second run resumes it.
        where = kept_lab_dir(state_dir) if state_dir is not None else directory / "lab"
        lab = Lab(where, nodes=nodes, faults=faults, persist=state_dir is not None,
                  control_plane=control_plane)  # fmt: skip
        async with lab:
            site = load_site(lab.site_path)
            print(f"demo: lab with {nodes} GPU node(s), faults: {', '.join(faults) or 'none'}, "
                  f"control plane: {control_plane}")  # fmt: skip
            print(
                "demo: " + CLUSTER_KINDS["greenfield" if "greenfield" in faults else "brownfield"]
            )
            frontend = HeadlessFrontEnd(
                yes=True, window_open=True, out=sys.stdout, compact=is_fleet(nodes),
                allow_cluster_change=allow_cluster_change,
            )  # fmt: skip
            state = state_dir or directory / "state"
            outcome = await run_engine(site, build_plan(), state, frontend)
            if report_dir is not None:
                from wizard.redact import Redactor
                from wizard.report import build_report, checkpoint_report, write_report

                plan = build_plan()
                data = checkpoint_report(state, site, plan) or build_report(None, site, plan)
                redactor = Redactor(site.secret_values())
                for path in write_report(data, report_dir, redactor=redactor):
                    print(f"wrote {path}")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print()
    print(gate_table(outcome))
    if outcome.summary.stopped:
        print(f"stopped: {outcome.summary.stopped}")
    verdicts = outcome.gate_verdicts()
    waiting = [g for g, v in verdicts.items() if not v.complete or v.value == "skip"]
    if outcome.exit_code == 0:
        print("demo passed: no gate failed")
        if waiting:
            print(f"no full verdict (skipped, partial or not run): {', '.join(waiting)}")
    else:
        print("demo found failures (see above)")
    return outcome.exit_code


def run_demo_tui(
    faults: tuple[str, ...], nodes: int, state_dir: Path | None, control_plane: str = "embedded"
) -> int:
    """The TUI over a freshly started lab (imports Textual only here)."""
    from frontend.lab_session import open_lab
    from frontend.tui.app import run_tui

    # With --state-dir the lab is kept there: killed and started again, the demo resumes.
    # Without, the state lives in a temporary folder as long as the TUI (its report and
    # measurements read it after the run) and goes when the TUI exits.
    opened: list = []

    async def opener():
        opened.append(
            await open_lab(
                faults, nodes, state_dir, keep=state_dir is not None, control_plane=control_plane
            )
        )
        return opened[-1]

    try:
        return run_tui(opener)
    finally:
        for session in opened:
            kept = session.discard()
            if kept is not None:
                print(f"demo: the state stays in {kept} (the journal names the error)")
            elif state_dir is None:
                print("demo: its temporary state went with the TUI "
                      "(`demo --state-dir DIR` keeps it, and resumes there)")  # fmt: skip
