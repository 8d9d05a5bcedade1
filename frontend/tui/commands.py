"""The command palette (ctrl+p): every action of the TUI by name, where it applies.

The views and the main screen's actions from anywhere; the dialog's own actions (retry,
waive, copy) while a dialog is open; and the two file actions an operator otherwise needs
a second terminal for: the dry-run export of every artifact and the report files. Both
write to a new folder in the current directory (never over an earlier one) and say where.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from textual.app import SystemCommand
from textual.screen import Screen

from frontend.tui.failed import FailedStepScreen
from frontend.tui.modals import Dialog
from wizard.errors import WizardError

if TYPE_CHECKING:
    from frontend.tui.app import WizardApp


def palette_commands(app: WizardApp, screen: Screen) -> Iterator[SystemCommand]:
    main = app.main_screen
    if isinstance(screen, FailedStepScreen):
        yield SystemCommand("Retry the failed step", "Run it again once the cause is fixed",
                            lambda: screen.action_answer("proceed"))  # fmt: skip
        if screen.decision.waivable:
            yield SystemCommand("Waive the failed checks", "With the reason typed in the dialog",
                                screen.action_waive)  # fmt: skip
        yield SystemCommand("Leave the step failed", "The run stops after this phase",
                            lambda: screen.action_answer("skip"))  # fmt: skip
    if isinstance(screen, Dialog):
        yield SystemCommand("Copy", "This dialog's commands, diffs or failing checks",
                            screen.action_copy)  # fmt: skip
    left = app.frontend.left_failed if app.frontend is not None and app.finished else {}
    for (step, target), decision in left.items():  # the run ended: retry or waive them
        yield SystemCommand(f"Retry {step} on {target}", "Left failed: run again from the "
                            "checkpoint, once the cause is fixed", app.rerun)  # fmt: skip
        if decision.waivable:
            yield SystemCommand(f"Waive the failed checks of {step} on {target}",
                                "Left failed: type the reason, then it runs again",
                                partial(app.ask_left_failed, decision))  # fmt: skip
    waiting = app._bridge.waiting if app._bridge is not None else None
    if waiting is not None:  # set aside with Esc: it still waits for an answer
        yield SystemCommand("Answer the waiting question", waiting[0], app.action_decide)
    yield SystemCommand("Report", "report.md's report of the checkpoint", app.action_report)
    yield SystemCommand("Measurements", "Charts and every number", app.action_measurements)
    if main is not None:
        yield SystemCommand("Log", "Every command and its output, full screen, with a search",
                            main.action_show_log)  # fmt: skip
        yield SystemCommand("Nodes", "Every GPU node's state per phase", main.action_nodes)
        yield SystemCommand("Findings: problems only / all", "Failures first",
                            main.action_problems_only)  # fmt: skip
        yield SystemCommand("Findings: next sort order", "As found, failures first, gate, node",
                            main.action_sort_findings)  # fmt: skip
        yield SystemCommand("Findings: filter", "By node, gate, check or severity",
                            main.action_filter_findings)  # fmt: skip
        yield SystemCommand("Copy the highlighted finding", "Check, message, fix and evidence",
                            main.action_copy_finding)  # fmt: skip
        yield SystemCommand("Phases sidebar: show / hide", "Hidden below 100 columns",
                            main.action_toggle_phases)  # fmt: skip
    if app.session is not None:
        yield SystemCommand("Export every artifact (dry run)",
                            "The scripts, manifests, values and runbook, into a new folder here",
                            lambda: app.run_worker(export_artifacts(app)))  # fmt: skip
        yield SystemCommand("Write the report files", "report.md, .xlsx and .json into a new folder",
                            lambda: app.run_worker(write_report_files(app)))  # fmt: skip
    yield SystemCommand("Help", "Key bindings", app.action_help)


def new_folder(kind: str, site_name: str, here: Path | None = None) -> Path:
    """``./<site>-<kind>-<UTC time>``, a name no earlier export or report has."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = (here or Path.cwd()) / f"{site_name}-{kind}-{stamp}"
    folder, n = base, 1
    while folder.exists():
        n += 1
        folder = base.with_name(f"{base.name}-{n}")
    return folder


async def export_artifacts(app: WizardApp, here: Path | None = None) -> Path | None:
    """What `gpu-node-wizard export SITE --out DIR` writes, from the site alone (it connects
    to nothing), off the UI loop."""
    from wizard.export import export

    session = app.session
    if session is None:
        return None
    out = new_folder("export", session.site.name, here)
    try:
        files = await asyncio.to_thread(export, session.site, app.plan, out)
    except (WizardError, OSError) as exc:
        app.notify(f"export failed: {exc}", severity="error", timeout=10)
        return None
    app.notify(f"exported {len(files)} files to {out}", timeout=10)
    return out


async def write_report_files(app: WizardApp, here: Path | None = None) -> Path | None:
    """What `gpu-node-wizard report SITE --out DIR` writes, from the checkpoint."""
    from wizard.redact import Redactor
    from wizard.report import checkpoint_report, write_report

    session = app.session
    if session is None:
        return None
    site = session.site

    def write() -> Path | None:
        report = checkpoint_report(session.state_dir, site, app.plan)
        if report is None:
            return None
        out = new_folder("report", site.name, here)
        write_report(report, out, redactor=Redactor(site.secret_values()))
        return out

    try:
        out = await asyncio.to_thread(write)
    except (WizardError, OSError) as exc:
        app.notify(f"the report was not written: {exc}", severity="error", timeout=10)
        return None
    if out is None:
        app.notify("no checkpoint to report from yet (or the demo's temporary state is gone: "
                   "`demo --state-dir DIR` keeps it)", severity="warning", timeout=10)  # fmt: skip
        return None
    app.notify(f"wrote report.md, report.xlsx and report.json to {out}", timeout=10)
    return out
