"""The engine: walks the plan's phases in order, across the site's nodes, checkpointing.

Rules it keeps (DESIGN.md, "State survives anything"):

- every transition is written to the checkpoint *before* the next action starts;
- a step recorded as done or skipped is not run again (checks run again only when the
  operator asks for that step or phase explicitly);
- a step found ``running`` or ``waiting`` (the process died in it) first re-verifies: if
  the change is already in place it is done, otherwise it is offered again;
- a failed step is offered again;
- a step whose prerequisites are not done is blocked, with the reason;
- a phase with a failure stops the flow on that target: later steps on it are blocked;
- nothing is applied before the front end answered ``proceed`` to a decision showing the
  diffs; maintenance steps need the window confirmed with the node name typed.

Maintenance is one engine sequence (``MaintenanceSequence.run``), whatever the step: window gate ->
capture the live state and persist it with the intent (before the first effect) ->
cordon/drain -> apply -> verify -> on failure roll back from the persisted capture ->
uncordon only when verified. Each stage is written to the checkpoint before it starts, so
a kill anywhere resumes into "finish or roll back" from the persisted capture, never a
second capture. Every effect is journaled ahead (wizard/journal.py).

A checkpoint knows its machines: at the start of a run each node's identity (machine-id,
SSH host key, boot id) and the cluster's (API server, kube-system UID, node UIDs) are
compared with what the results were recorded on; a different machine resets the node's
steps, a reboot re-verifies its settled results before they are trusted.
"""

from __future__ import annotations

from wizard.engine.core import Engine
from wizard.engine.results import Aborted, DecisionRequired, RunSummary

__all__ = ["Aborted", "DecisionRequired", "Engine", "RunSummary"]
