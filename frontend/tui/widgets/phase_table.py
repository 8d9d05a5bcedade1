"""The phases table: a glyph per phase and target (the cluster, each node, or a count over a
fleet's nodes), from the fold's step states."""

from __future__ import annotations

from textual.widgets import DataTable

from wizard.model import StepState
from wizard.plan import Plan
from wizard.runview import RunView
from wizard.site import Site

GLYPHS = {
    StepState.PENDING: "·",
    StepState.RUNNING: "…",
    StepState.WAITING: "⧗",
    StepState.DONE: "✔",
    StepState.FAILED: "✖",
    StepState.SKIPPED: "↷",
    StepState.BLOCKED: "⊘",
}
# A phase done with a waived failure: never the pass mark (README: "shown as waived, never
# as pass"); the findings show a waiver as a warning, so its mark is the warning's.
WAIVED_GLYPH = "≈"


class PhaseTable(DataTable):
    """One row per phase: state columns first (narrow), so a long phase title never hides
    them. A fleet gets one count column instead of a column per node, so that the phase
    titles stay in view; the fleet view (n) has a row per node."""

    # As tall as the phases, never taller than the sidebar that holds it.
    DEFAULT_CSS = """
    PhaseTable {
        height: auto;
        max-height: 100%;
    }
    """

    def __init__(self, plan: Plan, site: Site, *, fleet: bool, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self.plan = plan
        self.site = site
        self.fleet = fleet
        self.node_names = [n.name for n in site.nodes]
        self.node_columns = [] if fleet else self.node_names

    def on_mount(self) -> None:
        self.add_column("cl", key="cluster", width=2)
        for name in self.node_columns:
            self.add_column(_short(name), key=name, width=max(2, len(_short(name))))
        if self.fleet:  # more nodes than columns: a per-phase count over all of them
            self.add_column(f"all {len(self.node_names)}", key="fleet", width=12)
        self.add_column("phase", key="phase")
        for phase in self.plan.phases:
            has_cluster = any(s.scope.value == "cluster" for s in phase.steps)
            cells = [GLYPHS[StepState.PENDING] if has_cluster else ""]
            has_node = any(s.scope.value == "node" for s in phase.steps)
            cells += [GLYPHS[StepState.PENDING] if has_node else ""] * len(self.node_columns)
            if self.fleet:
                cells.append(GLYPHS[StepState.PENDING] if has_node else "")
            cells.append(f"{phase.number:>2} {phase.title}")
            self.add_row(*cells, key=phase.id)

    def show_step(self, view: RunView, step_id: str) -> None:
        """The row of ``step_id``'s phase again, from the fold's states."""
        phase = self.plan.phase_of(step_id)
        for target in ["cluster", *self.node_columns]:
            steps = [s.id for s in phase.steps if target in self.plan.targets(s, self.site)]
            if steps:
                states = [view.state(step, target) for step in steps]
                glyph = phase_glyph(states, waived=waived_on(view, steps, target))
                self.update_cell(phase.id, target, glyph)
        if self.fleet and any(s.scope.value == "node" for s in phase.steps):
            node_steps = [s.id for s in phase.steps if s.scope.value == "node"]
            glyphs = [
                phase_glyph(
                    [view.state(step, n) for step in node_steps],
                    waived=waived_on(view, node_steps, n),
                )
                for n in self.node_names
            ]
            counts = " ".join(
                f"{g}{glyphs.count(g)}"
                for g in ("✔", WAIVED_GLYPH, "↷", "✖", "…", "⊘")
                if glyphs.count(g)
            )
            self.update_cell(phase.id, "fleet", counts or GLYPHS[StepState.PENDING])


def _short(name: str) -> str:
    """A node's column label: the last part of its name (``gpu-b300-01`` -> ``01``)."""
    return name.rsplit("-", 1)[-1][:4]


def waived_on(view: RunView, steps: list[str], target: str) -> bool:
    """Whether a record of these steps on the target holds a waived finding."""
    return any(f.waived for step in steps for f in view.record(step, target).findings)


def phase_glyph(states: list[StepState | None], *, waived: bool = False) -> str:
    """The phase's mark from its steps' states; ``waived``: one of them passed by a waiver."""
    known = [s for s in states if s is not None]
    if not known:
        return GLYPHS[StepState.PENDING]
    for state in (StepState.FAILED, StepState.BLOCKED, StepState.RUNNING, StepState.WAITING):
        if state in known:
            return GLYPHS[state]
    if len(known) < len(states):
        return GLYPHS[StepState.RUNNING]
    if StepState.SKIPPED in known:
        # A phase with a skipped step is not done: its change (or its proof) is missing.
        return GLYPHS[StepState.SKIPPED]
    return WAIVED_GLYPH if waived else GLYPHS[StepState.DONE]
