"""The one small protocol between the engine and its front ends (TUI, headless, tests).

The engine *emits* events (fire and forget) and *asks* for decisions (awaited). A front
end implements ``FrontEnd``; the engine never imports anything from a front end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from wizard.model import Finding, StepState


@dataclass(frozen=True)
class Event:
    """Base of everything the engine reports."""


@dataclass(frozen=True)
class PhaseStarted(Event):
    phase: str
    title: str


@dataclass(frozen=True)
class StepStarted(Event):
    step: str
    target: str
    title: str


@dataclass(frozen=True)
class StepFinished(Event):
    step: str
    target: str
    state: StepState
    message: str = ""
    findings: tuple[Finding, ...] = ()


@dataclass(frozen=True)
class StepCompleted(Event):
    """Every target of a step has its result (after the step's last batch)."""

    step: str
    results: tuple[tuple[str, StepState], ...]  # (target, state) in target order


@dataclass(frozen=True)
class CommandStarted(Event):
    target: str
    command: str


@dataclass(frozen=True)
class OutputLine(Event):
    target: str
    line: str
    stream: str = "stdout"


@dataclass(frozen=True)
class CommandFinished(Event):
    target: str
    command: str
    exit_status: int | None
    duration_s: float
    # What a non-zero exit status means when the command's definition expects it (pkill:
    # no process was left; a read of a file that is not there yet): no error to show.
    expected: str = ""


@dataclass(frozen=True)
class Waiting(Event):
    """A step waits for something outside the wizard (a node coming back from a reboot),
    for at most ``timeout_s`` from now: a front end shows a countdown. It ends with the
    step's StepFinished."""

    step: str
    target: str
    message: str
    timeout_s: float


@dataclass(frozen=True)
class WaitEnded(Event):
    """The wait a ``Waiting`` announced is over (what it waited for came, or its time ran
    out) while the step goes on: the countdown stops."""

    step: str
    target: str


@dataclass(frozen=True)
class Notice(Event):
    """Something the operator should read that is not a finding (resume, waiver...)."""

    message: str
    target: str = ""


class DecisionKind(StrEnum):
    CONFIRM_APPLY = "confirm-apply"
    MAINTENANCE_WINDOW = "maintenance-window"
    MANUAL_DONE = "manual-done"
    RETRY_FAILED = "retry-failed"
    ROLLBACK = "rollback"
    # Load on a production AIStor peer: a typed confirmation naming the peer.
    STORAGE_LOAD = "storage-load"
    # A change outside the new nodes (wizard/approvals.py): a typed confirmation naming it.
    CLUSTER_CHANGE = "cluster-change"
    # A pod with no controller that a drain would delete for good: a typed confirmation
    # naming it (namespace/name); refused, the step stops before the drain.
    DELETE_BARE_POD = "delete-bare-pod"


class Answer(StrEnum):
    PROCEED = "proceed"
    # Apply, and apply without asking again on the other nodes of this step whose change is
    # the same (the same diffs once the node's name is set aside). Never for maintenance.
    PROCEED_SAME = "proceed-same"
    SKIP = "skip"
    ABORT = "abort"
    # A failed check: record the reply's reason as a waiver of its failing checks (as the
    # CLI's --waive does), then run it again so that its verdict is judged with it.
    WAIVE = "waive"


@dataclass(frozen=True)
class ArtifactDiff:
    """One artifact as it would change: unified diff of live vs desired."""

    path: str
    destination: str
    diff: str
    changed: bool


@dataclass(frozen=True)
class ShownFile:
    """A file a manual step hands the operator (a switch config, an inventory fragment),
    shown whole in its dialog so it can be read and copied there, not only named."""

    path: str  # where `export` writes it
    destination: str
    description: str
    content: str


@dataclass(frozen=True)
class Decision:
    kind: DecisionKind
    step: str
    title: str
    target: str
    summary: str
    diffs: tuple[ArtifactDiff, ...] = ()
    rollback: str | None = None
    # For a maintenance window: the text the operator must type (the node name).
    confirm_text: str | None = None
    # Other nodes of this step, not done yet, that an approval of "the same change" could cover.
    other_nodes: int = 0
    # The ordered actions: a maintenance window's (cordon, drain, each command, uncordon);
    # a review's, the commands the step runs (a Helm release: chart, version, values file).
    actions: tuple[str, ...] = ()
    # A rollback offer: the failing checks it is offered for, with their evidence.
    findings: tuple[Finding, ...] = ()
    # A maintenance window: False when the change cannot be undone (a reboot), so the
    # window gate shows no rollback plan.
    reversible: bool = True
    # A failed step: whether its failing checks may be waived (read-only checks whose
    # failure is the site's, never a change, an unreachable host or the wizard's own bug).
    waivable: bool = False
    # Why not, when a failing check is a hard requirement (``Step.hard_requirements``).
    not_waivable: str = ""
    # A manual step: the files it hands the operator, each shown whole.
    files: tuple[ShownFile, ...] = ()


@dataclass(frozen=True)
class Reply:
    answer: Answer
    typed: str = ""
    reason: str = field(default="", compare=False)


class FrontEnd(Protocol):
    # Whether OutputLine events are wanted. Without a reader, command output is read in
    # chunks rather than line by line: a fleet's check reads tens of thousands of lines.
    wants_output_lines: bool
    # Optional (read with getattr, False when absent): whether a failed step is put to the
    # operator (retry / waive / leave) before the run goes on. A headless run has nobody
    # to ask: its failure stands and the run stops after the phase.

    def emit(self, event: Event) -> None:
        """Show or record an event. Must not block."""

    async def decide(self, decision: Decision) -> Reply:
        """Ask the operator (or a policy) and return the answer."""
