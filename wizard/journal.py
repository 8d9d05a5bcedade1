"""Write-ahead journaling of effects, wherever they are made.

An effect is anything that changes a host or the cluster: a command run while a step
applies or rolls back, a Kubernetes API write, a ``helm upgrade``. Its intent must be
durable in the journal before it starts, so that a resume after a kill sees every effect
that may have happened (DESIGN.md, "Intent before effect").

Transports do not know which step they serve; the engine names it for the task that runs
the step (a context variable, so that concurrent nodes each journal under their own
step and target), and the transports ask here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol


class Journal(Protocol):
    def intent(self, entry: dict[str, Any]) -> str: ...

    def outcome(self, ident: str, entry: dict[str, Any]) -> None: ...

    def child(self, ident: str, entry: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class Scope:
    journal: Journal
    step: str
    target: str
    # Called before each intent: raises to refuse the effect (the engine's check that the
    # node's lease is still this run's, wizard/engine/leases.py).
    guard: Callable[[], None] | None = None


_SCOPE: ContextVar[Scope | None] = ContextVar("gnw_journal_scope", default=None)


@contextlib.contextmanager
def scope(
    journal: Journal, step: str, target: str, guard: Callable[[], None] | None = None
) -> Iterator[None]:
    """Journal effects made by this task (and the tasks it starts) under ``step``/``target``;
    ``guard`` runs before each effect's intent and may refuse it by raising."""
    token = _SCOPE.set(Scope(journal, step, target, guard))
    try:
        yield
    finally:
        _SCOPE.reset(token)


@contextlib.contextmanager
def unguarded() -> Iterator[None]:
    """Effects journaled without the scope's guard: the lease writes themselves (a
    renewal must not be refused by the check of the lease it renews)."""
    current = _SCOPE.get()
    if current is None or current.guard is None:
        yield
        return
    token = _SCOPE.set(Scope(current.journal, current.step, current.target))
    try:
        yield
    finally:
        _SCOPE.reset(token)


def begin(entry: dict[str, Any]) -> str | None:
    """Record an effect's intent durably; None outside any step (nothing to journal to).

    ``entry`` names its own ``target`` (the cluster, helm); ``for`` is the step's target."""
    current = _SCOPE.get()
    if current is None:
        return None
    if current.guard is not None:
        current.guard()
    return current.journal.intent({"step": current.step, "for": current.target, **entry})


def end(ident: str | None, entry: dict[str, Any]) -> None:
    """Record what became of an intent from ``begin``."""
    current = _SCOPE.get()
    if ident is None or current is None:
        return
    current.journal.outcome(ident, entry)


def child(ident: str | None, entry: dict[str, Any]) -> None:
    """Record the process an intent's effect runs in (its pid and start time), so that a
    resume after a kill can tell whether it still runs (wizard/transports/children.py)."""
    current = _SCOPE.get()
    if ident is None or current is None:
        return
    current.journal.child(ident, entry)
