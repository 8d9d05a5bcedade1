"""What the main screen's findings table lists, in which order, and what a finding's detail
says: pure functions over (step, target, finding), so that the rules are tested without a
screen and the screen only draws."""

from __future__ import annotations

from wizard.model import Finding, Severity, is_skipped_step

Row = tuple[str, str, Finding]  # step, target, finding

# The orders `o` cycles through: as the run found them, then by what needs attention.
SORTS = ("found", "severity", "gate", "node")
SORT_TITLES = {
    "found": "in the order found",
    "severity": "failures first",
    "gate": "by gate (T00-T17)",
    "node": "by node",
}
_RANK = {Severity.FAIL: 0, Severity.WARN: 1, Severity.SKIP: 2, Severity.PASS: 3}


def shown_severity(finding: Finding) -> Severity:
    """A waived failure is shown as a warning: it is neither a pass nor a blocker."""
    return Severity.WARN if finding.waived else finding.severity


def shows(finding: Finding, *, fleet: bool, problems_only: bool) -> bool:
    """Whether the table lists ``finding``. On a fleet, or with problems only (F), it lists
    what needs attention: thousands of passes would bury it; the fleet view, the report and
    the checkpoint keep every finding."""
    if finding.waived or finding.severity in (Severity.WARN, Severity.FAIL):
        return True
    if is_skipped_step(finding):
        return True  # a change or proof that is missing needs attention too
    if problems_only:
        return False
    return not (fleet and finding.severity in (Severity.PASS, Severity.SKIP))


def matches(row: Row, text: str) -> bool:
    """Whether a finding matches the filter the operator typed (`/`): every word in its
    node, gate, check, step or severity, case-insensitive ("T08", "gpu-b300-03 fail")."""
    step, target, finding = row
    where = " ".join(
        (target, finding.gate, finding.check, step, shown_severity(finding).value,
         "waived" if finding.waived else "")
    ).lower()  # fmt: skip
    return all(word in where for word in text.lower().split())


def ordered(rows: list[Row], shown: list[int], sort: str, problems_only: bool) -> list[int]:
    """The indices of ``shown`` in the table's order. Problems only keeps failures first
    whatever the order (within a sort key, the run's order breaks ties)."""

    def key(index: int) -> tuple:
        _step, target, finding = rows[index]
        rank = _RANK[shown_severity(finding)]
        if sort == "gate":
            return (finding.gate or "~", rank, index)
        if sort == "node":
            return (target, rank, index)
        if sort == "severity" or problems_only:
            return (rank, index)
        return (index,)

    return sorted(shown, key=key)


def next_sort(sort: str) -> str:
    return SORTS[(SORTS.index(sort) + 1) % len(SORTS)]


def detail_text(row: Row) -> str:
    """The finding in full: its check, where, message, waiver, fix and evidence (also what
    `c` copies)."""
    step, target, finding = row
    parts = [f"{finding.check} ({step} on {target}): {finding.message}"]
    if finding.waived:
        parts.append(f"waived: {finding.waived}")
    if finding.remediation:
        parts.append(f"fix: {finding.remediation}")
    for evidence in finding.evidence:
        parts.append(f"$ {evidence.command}")
        if evidence.excerpt:
            parts.append(evidence.excerpt)
    return "\n".join(parts)
