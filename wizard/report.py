"""The T00-T17 report from a checkpoint: Markdown, XLSX and JSON, optionally side by side
with another site's report (e.g. an E810 node against a ConnectX node)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

from wizard.checkpoint import RunState, StepRecord, foreign_site_file, load_run, site_state_dir
from wizard.errors import CheckpointError, UsageError
from wizard.fleet import group_targets, targets_text
from wizard.model import (
    GATES,
    SKIPPED_CHECK,
    Finding,
    Severity,
    StepState,
    is_skipped_step,
    verdict,
)
from wizard.plan import Plan
from wizard.private import PrivatePathError, private_dir, write_private
from wizard.redact import Redactor
from wizard.report_outside import outside_sections
from wizard.report_xlsx import xlsx
from wizard.runview import RunView, fold
from wizard.site import Site
from wizard.support import release_notes

STATUS_ORDER = {"fail": 0, "warn": 1, "pass": 2, "skip": 3, "partial": 4, "not run": 5}
# Which measurements are the key numbers of a gate (by name).
KEY_NUMBERS = {
    "T05": re.compile(r"^tcp\."),
    "T06": re.compile(r"\.(ib_\w+_bw\.q4|ib_send_lat\.typical|line_rate_port)$"),
    "T07": re.compile(r"\.qp_sweep\."),
    "T08": re.compile(r"^qos\.(ib_write_bw|pause)"),
    "T09": re.compile(r"^coexistence\."),
    # The averages only: the per-size rows (nccl.*.busbw.BYTES) are the curve, not a key number.
    "T11": re.compile(r"^(gpu\.cuda|nccl\.\w+\.avg_busbw$)"),
    "T12": re.compile(r"^(gpu\.dmabuf|nccl\.all_reduce\.avg)"),
    "T13": re.compile(r"^aistor-tcp"),
    "T14": re.compile(r"^aistor-direct"),
    "T15": re.compile(r"^vllm"),
    "T16": re.compile(r"^soak\."),
}


def checkpoint_report(state_dir: Path, site: Site, plan: Plan) -> dict[str, Any] | None:
    """The report of the site's checkpoint in ``state_dir``; None when it has none yet."""
    directory = site_state_dir(state_dir, site)
    run = load_run(directory)
    foreign = foreign_site_file(run, site)
    if foreign is not None:
        raise CheckpointError(f"{directory}: {foreign}")
    return None if run is None else build_report(run, site, plan)


def build_report(run: RunState | None, site: Site, plan: Plan) -> dict[str, Any]:
    """The report of a checkpoint's state (``report_of`` its fold)."""
    return report_of(fold(run, plan, site))


def report_of(view: RunView) -> dict[str, Any]:
    """One entry per gate (status, key numbers, evidence, time) and every measurement."""
    plan, site = view.plan, view.site
    steps: dict[str, dict[str, StepRecord]] = {}
    for (step_id, target), record in view.records.items():
        steps.setdefault(step_id, {})[target] = record
    verdicts = view.gates()
    gates = []
    measurements = []
    for step in plan.steps():
        for target, record in steps.get(step.id, {}).items():
            for name, entry in record.measurements.items():
                measurements.append(
                    {
                        "series": name.split(".", 1)[0],
                        "name": name,
                        "step": step.id,
                        "target": target,
                        "value": entry["value"],
                        "unit": entry["unit"],
                        "labels": entry.get("labels", {}),
                        "time": record.finished,
                    }
                )
    for gate, what in GATES.items():
        findings: list[tuple[str, str, Finding]] = []
        times = []
        numbers = []
        for step in plan.steps():
            for target, record in steps.get(step.id, {}).items():
                mine = [f for f in record.findings if f.gate == gate]
                findings += [(step.id, target, f) for f in mine]
                if mine and record.finished:
                    times.append(record.finished)
                pattern = KEY_NUMBERS.get(gate)
                if gate in step.gates and pattern is not None:
                    numbers += [
                        f"{m['name']} = {m['value']:.4g} {m['unit']}"
                        for m in measurements
                        if m["step"] == step.id
                        and m["target"] == target
                        and pattern.search(m["name"])
                    ]
        by_target: dict[str, list[Finding]] = {}
        for _, target, finding in findings:
            by_target.setdefault(target, []).append(finding)
        status = verdicts[gate].value
        evidence = ""
        if findings:
            headline = sorted(findings, key=lambda x: _headline_rank(x[2]))[0]
            evidence = f"{headline[1]}: {headline[2].check}: {headline[2].message}"
        if status == "partial":
            missing = _not_run_provers(plan, site, steps, gate)
            evidence = f"not run yet: {missing}" + (f"; so far {evidence}" if evidence else "")
        gates.append(
            {
                "gate": gate,
                "what": what,
                "status": status,
                "key_numbers": numbers[:8],
                "evidence": evidence,
                "findings": len(findings),
                "time": max(times) if times else None,
                "targets": _targets_by_verdict(by_target),
                "fail_targets": sorted(
                    {t for _, t, f in findings if f.severity is Severity.FAIL and not f.waived}
                ),
                "skipped": [
                    {"step": s, "target": t, "check": f.check, "why": f.message}
                    for s, t, f in findings
                    if f.severity is Severity.SKIP
                ],
                "waived": [
                    {"check": f.check, "target": t, "reason": f.waived, "message": f.message}
                    for _, t, f in findings
                    if f.waived
                ],
            }
        )
    return {
        "site": site.name,
        "nic_profile": site.nic.profile,
        "nodes": [n.name for n in site.nodes],
        "gpu_operator": site.versions.gpu_operator,
        "updated": view.updated,
        "gates": gates,
        "skipped_steps": _skipped_steps(steps, plan),
        "cordoned": [
            {"node": c.node, "step": c.step, "why": c.why, "since": c.since, "uncordon": c.remedy}
            for c in view.cordoned()
        ],
        "waivers": [w.to_json() for w in view.waivers],
        # Every change outside the new nodes: what, who approved it and when, the pods on
        # existing nodes it was said to restart and those that did (wizard/approvals.py).
        "cluster_changes": [a.as_json() for a in view.approvals],
        # The new objects made for the new nodes only, by name (no approval needed).
        "added_for_new_nodes": [a.as_json() for a in view.additions],
        "measurements": measurements,
        "notes": [
            {"topic": n.topic, "text": n.text, "source": n.source}
            for n in release_notes(site.versions.gpu_operator)
        ],
    }


def _not_run_provers(
    plan: Plan, site: Site, steps: dict[str, dict[str, StepRecord]], gate: str
) -> str:
    """The steps that prove ``gate`` and have not run everywhere yet (a partial gate)."""
    missing = []
    for step in plan.steps():
        if gate not in step.gates:
            continue
        targets = [
            t
            for t in plan.targets(step, site)
            if t not in steps.get(step.id, {})
            or steps[step.id][t].state.value not in ("done", "failed", "skipped")
        ]
        if targets:
            missing.append(f"{step.id} on {targets_text(targets)}")
    return ", ".join(missing)


def _skipped_steps(steps: dict[str, dict[str, StepRecord]], plan: Plan) -> list[dict[str, Any]]:
    """Every step recorded as skipped, with who skipped it and why (the engine keeps who
    in ``extra.skipped_by``; a checkpoint from before that is read from the message)."""
    skipped = []
    for step in plan.steps():
        for target, record in steps.get(step.id, {}).items():
            if record.state is not StepState.SKIPPED:
                continue
            why = record.message
            by = record.skipped_by or ("the operator" if "by the operator" in why else "the wizard")
            skipped.append(
                {
                    "step": step.id,
                    "title": step.title,
                    "target": target,
                    "gates": list(step.gates),
                    "by": by,
                    "why": why,
                    "time": record.finished,
                    # A failed change (and its rollback) this skip took the place of.
                    "earlier": [
                        f"{e.state}: {e.message} ({e.finished or '?'})" for e in record.earlier
                    ],
                }
            )
    return skipped


def verdict_line(report: dict[str, Any]) -> str:
    """One line that says whether the node is ready, judged from the gates alone.

    A failure anywhere is "not ready"; a gate skipped or not run is "not ready
    (incomplete)" (nothing proved it, whatever passed around it); a waived failure is
    counted as waived, never as a pass, and makes at best "ready with warnings"."""
    gates = report["gates"]

    def named(status: str) -> list[str]:
        return [g["gate"] for g in gates if g["status"] == status]

    failed, skipped, not_run = named("fail"), named("skip"), named("not run")
    partial = named("partial")
    cordoned = [c["node"] for c in report.get("cordoned", [])]
    waived = [g["gate"] for g in gates if g.get("waived") and g["status"] != "fail"]
    warned = [g for g in named("warn") if g not in waived]
    passed = named("pass")
    parts = []
    if cordoned:
        parts.append(f"{targets_text(cordoned)} left cordoned (see Cordoned nodes)")
    if failed:
        on = sorted({t for g in gates if g["status"] == "fail" for t in g.get("fail_targets", [])})
        where = f" on {targets_text(on)}" if on else ""
        fail = "fails" if len(failed) == 1 else "fail"
        parts.append(f"{_count(failed, 'gate')} {fail} ({', '.join(failed)}){where}")
    if skipped:
        parts.append(f"{len(skipped)} skipped ({', '.join(skipped)})")
    if partial:
        parts.append(f"{len(partial)} partial ({', '.join(partial)})")
    if not_run:
        parts.append(f"{len(not_run)} not run ({', '.join(not_run)})")
    if waived:
        parts.append(f"{len(waived)} waived ({', '.join(waived)})")
    if warned:
        parts.append(f"{len(warned)} warn ({', '.join(warned)})")
    if failed or cordoned:
        word = "not ready"
    elif skipped or not_run or partial:
        word = "not ready (incomplete)"
    elif waived or warned:
        word = "ready with warnings"
    else:
        word = "ready"
    if word == "ready":
        parts = [f"all {len(gates)} gates pass"]
    elif passed:
        parts.append(f"{len(passed)} pass")
    checks = sum(
        1
        for g in gates
        for s in g.get("skipped", [])
        if g["status"] != "skip" and not s["check"].endswith(SKIPPED_CHECK)
    )
    if checks:
        parts.append(f"{_count(checks, 'check')} skipped (see Skipped and waived)")
    return f"**Verdict: {word}** — " + "; ".join(parts)


def _count(items: list[str] | int, noun: str) -> str:
    number = items if isinstance(items, int) else len(items)
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _cell(text: str) -> str:
    """Text for one Markdown table cell: no column breaks, no line breaks."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def skipped_and_waived(report: dict[str, Any]) -> list[str]:
    """The Markdown section that names every skip (who, why) and every waiver (reason):
    what the verdict rests on besides passes, where an auditor looks first."""
    lines = ["## Skipped and waived", ""]
    steps = report.get("skipped_steps", [])
    checks = [
        (g["gate"], s)
        for g in report["gates"]
        for s in g.get("skipped", [])
        if not s["check"].endswith(SKIPPED_CHECK)
    ]
    waivers = report.get("waivers", [])
    if not (steps or checks or waivers):
        return [*lines, "Nothing was skipped or waived.", ""]
    if steps:
        lines += [
            "Skipped steps: no gate they belong to can pass without them.",
            "",
            "| step | node | gates | skipped by | why | time |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {s['step']} | {s['target']} | {', '.join(s['gates'])} | {_cell(s['by'])} | "
            f"{_cell(s['why'] + ''.join(f'; before that {e}' for e in s.get('earlier', [])))} "
            f"| {s['time'] or ''} |"
            for s in steps
        ]
        lines.append("")
    if checks:
        lines += [
            "Checks skipped in steps that ran (not run, or not applicable as configured):",
            "",
            "| check | gate | node | why |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {s['check']} | {gate} | {s['target']} | {_cell(s['why'])} |" for gate, s in checks
        ]
        lines.append("")
    if waivers:
        used = {w["check"]: g["gate"] for g in report["gates"] for w in g.get("waived", [])}
        lines += [
            "Waivers: a waived failure counts as waived, never as a pass.",
            "",
            "| check | gate | reason | waived by | at | applied to |",
            "|---|---|---|---|---|---|",
        ]
        for w in waivers:
            nodes = sorted(
                {x["target"] for g in report["gates"] for x in g.get("waived", [])
                 if x["check"] == w["check"]}
            )  # fmt: skip
            applied = targets_text(nodes) if nodes else "no failure of this check was recorded"
            lines.append(
                f"| {w['check']} | {used.get(w['check'], '')} | {_cell(w['reason'])} | "
                f"{_cell(w.get('by', ''))} | {w.get('at', '')} | {applied} |"
            )
        lines.append("")
    return lines


def cluster_changes(report: dict[str, Any]) -> list[str]:
    """The Markdown sections on the cluster beyond the new nodes (wizard/report_outside.py):
    every change made outside them (who approved it by name and when, which pods on
    existing nodes restarted), and what was added for them."""
    lines: list[str] = []
    for section in outside_sections(report):
        lines += [f"## {section.title}", "", section.intro, ""]
        if section.rows:
            lines += ["| " + " | ".join(section.header) + " |",
                      "|" + "---|" * len(section.header)]  # fmt: skip
            lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in section.rows]
            lines.append("")
    return lines


def _headline_rank(finding: Finding) -> int:
    """Which finding speaks for a gate: a failure, a warning, then a skipped step (who
    skipped it and why: the reason the gate is skip), then a pass."""
    if is_skipped_step(finding):
        return 2
    order = {Severity.FAIL: 0, Severity.WARN: 1, Severity.PASS: 3, Severity.SKIP: 4}
    return order[Severity.WARN if finding.waived else finding.severity]


def _targets_by_verdict(by_target: dict[str, list[Finding]]) -> str:
    """Which nodes got which verdict, worst first: 'fail on gpu-03; pass on 63 nodes (...)'.
    On a fleet the gate's status alone does not say which node to look at."""
    order = {"fail": 0, "warn": 1, "pass": 2, "skip": 3}
    verdicts = sorted(
        ((verdict(fs).value, target) for target, fs in by_target.items()),
        key=lambda item: order[item[0]],
    )
    return "; ".join(f"{v} on {targets_text(ts)}" for v, ts in group_targets(verdicts))


def _status_of(report: dict[str, Any] | None, gate: str) -> str:
    if report is None:
        return ""
    return next((g["status"] for g in report["gates"] if g["gate"] == gate), "")


def markdown(report: dict[str, Any], other: dict[str, Any] | None = None) -> str:
    title = f"# T00-T17 report: {report['site']}"
    lines = [
        title,
        "",
        verdict_line(report),
        "",
        f"NIC profile {report['nic_profile']}, GPU Operator {report['gpu_operator']}, nodes: "
        f"{', '.join(report['nodes'])}; checkpoint updated {report['updated']}.",
        "",
    ]
    if report.get("cordoned"):
        lines += ["## Cordoned nodes", ""]
        lines += [
            f"- **{c['node']} is cordoned** (by {c['step']}, since {c['since']}): "
            f"{_cell(c['why'])}. To uncordon: {c['uncordon']}."
            for c in report["cordoned"]
        ]
        lines.append("")
    if other:
        lines += [f"Compared with {other['site']} (NIC profile {other['nic_profile']}).", ""]
        lines += [
            f"| gate | what | {report['site']} | {other['site']} | key numbers | evidence |",
            "|---|---|---|---|---|---|",
        ]
    else:
        lines += [
            "| gate | what | status | key numbers | evidence | time | nodes |",
            "|---|---|---|---|---|---|---|",
        ]
    for gate in report["gates"]:
        numbers = "<br>".join(gate["key_numbers"]) or ""
        evidence = _cell(gate["evidence"])
        status = gate["status"]
        if gate.get("waived"):
            status += f" ({len(gate['waived'])} waived)"
        if other:
            lines.append(
                f"| {gate['gate']} | {gate['what']} | {status} | "
                f"{_status_of(other, gate['gate'])} | {numbers} | {evidence} |"
            )
        else:
            lines.append(
                f"| {gate['gate']} | {gate['what']} | {status} | {numbers} | {evidence} | "
                f"{gate['time'] or ''} | {gate.get('targets', '')} |"
            )
    lines += ["", *skipped_and_waived(report), *cluster_changes(report)]
    series = sorted({m["series"] for m in report["measurements"]})
    for name in series:
        lines += [
            "",
            f"## Measurements: {name}",
            "",
            "| measurement | target | value | unit |",
            "|---|---|---|---|",
        ]
        for m in report["measurements"]:
            if m["series"] == name:
                lines.append(f"| {m['name']} | {m['target']} | {m['value']:.4g} | {m['unit']} |")
    if report.get("notes"):
        lines += ["", "## Notes", ""]
        lines += [f"- **{n['topic']}**: {n['text']} ({n['source']})" for n in report["notes"]]
    return "\n".join(lines) + "\n"


def prepare_out(out: Path, what: str = "report --out") -> None:
    """Make the report folder (a new one 0700; the operator's own stays as it is), or a
    UsageError saying why it cannot be one."""
    try:
        private_dir(out, tighten=False)
    except NotADirectoryError:
        raise UsageError(f"{what} {out}: a file is in the way; give a folder") from None
    except PrivatePathError:
        raise UsageError(f"{what} {out} is a file, not a folder") from None
    except OSError as exc:
        raise UsageError(f"{what} {out}: cannot create it: {exc.strerror or exc}") from None


def write_report(
    report: dict[str, Any],
    out: Path,
    *,
    compare: Path | None = None,
    redactor: Redactor | None = None,
) -> list[Path]:
    """Write report.md, report.xlsx and report.json into ``out``; return the paths."""
    other = None
    if compare is not None:
        try:
            other = json.loads(compare.read_text())
            other["gates"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"cannot read the report to compare with ({compare}): {exc}") from None
    redactor = redactor or Redactor()
    prepare_out(out)
    data = dict(report)
    if other:
        data["compared_with"] = {
            "site": other["site"],
            "gates": {g["gate"]: g["status"] for g in other["gates"]},
        }
    paths = [out / "report.json", out / "report.md", out / "report.xlsx"]
    try:
        write_private(
            paths[0], (redactor.text(json.dumps(data, indent=2, sort_keys=True)) + "\n").encode()
        )
        write_private(paths[1], redactor.text(markdown(report, other)).encode())
        book = io.BytesIO()
        xlsx(redactor.data(report), book, other)
        write_private(paths[2], book.getvalue())
    except OSError as exc:
        raise UsageError(
            f"report --out {out}: cannot write {exc.filename or out}: {exc.strerror or exc}"
        ) from None
    return paths
