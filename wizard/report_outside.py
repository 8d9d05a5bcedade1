"""The report's account of the cluster beyond the new nodes, as one model for every view.

Two sections: "Changes outside the new nodes" (each change approved by name: who, when, the
pods on existing nodes it was said to restart and those that did, wizard/approvals.py
Approval) and "Added for the new nodes" (new objects that serve only the new nodes, listed by
name: Addition). report.md, report.xlsx and the TUI's report screen all render these
:class:`Section` values (title, header, rows, the text when empty), so the words are written
once, here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CHANGES_TITLE = "Changes outside the new nodes"
ADDED_TITLE = "Added for the new nodes"


@dataclass(frozen=True)
class Section:
    """One section of the report as text cells: rendered as a Markdown table, a sheet or
    the TUI's lines."""

    title: str
    intro: str  # said above the rows (or alone, when there are none)
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def lines(self) -> list[str]:
        """Plain lines (the TUI): the title, the intro, then a row per line, header-named."""
        out = [self.title, self.intro]
        out += ["- " + "; ".join(f"{h}: {v}" for h, v in zip(self.header, row, strict=True))
                for row in self.rows]  # fmt: skip
        return out


def changes_section(report: dict[str, Any]) -> Section:
    """Every change made outside the new nodes, who approved it by name and when, and which
    pods on existing nodes restarted (measured) against what the review predicted."""
    changes = report.get("cluster_changes") or []
    header = ("change", "step", "approved by", "at", "applied",
              "pods on existing nodes restarted (measured)", "predicted")  # fmt: skip
    if not changes:
        intro = ("None: nothing outside the new nodes was changed (no cluster-wide change was "
                 "approved).")  # fmt: skip
        return Section(CHANGES_TITLE, intro, header, ())
    rows = []
    for c in changes:
        restarted = c.get("restarted")
        measured = (
            "not measured (the step did not finish)"
            if restarted is None
            else ", ".join(restarted) or "none"
        )
        if restarted is not None and not c.get("settled", True):
            measured += " (measured at the wizard's bound: the change was still rolling out)"
        rows.append((
            c["change"], c["step"], c.get("by", ""), c.get("at", ""),
            "yes" if c.get("applied") else "not yet", measured,
            ", ".join(c.get("predicted") or []) or "none",
        ))  # fmt: skip
    intro = "Each approved by name (a typed confirmation, or --allow-cluster-change NAME)."
    return Section(CHANGES_TITLE, intro, header, tuple(rows))


def added_section(report: dict[str, Any]) -> Section:
    """The new objects made for the new nodes only: nothing that existed changed, so no
    approval was asked, but the operator sees each by name (and removes it with them)."""
    added = report.get("added_for_new_nodes") or []
    header = ("object", "step", "for", "at")
    if not added:
        return Section(ADDED_TITLE, "None: no new cluster object was made.", header, ())
    intro = ("New objects that serve only the new nodes (no object that existed before was "
             "changed by them):")  # fmt: skip
    rows = tuple((a["object"], a["step"], a.get("why", ""), a.get("at", "")) for a in added)
    return Section(ADDED_TITLE, intro, header, rows)


def outside_sections(report: dict[str, Any]) -> list[Section]:
    return [changes_section(report), added_section(report)]
