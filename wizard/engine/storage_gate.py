"""The gate before load on a production AIStor peer.

Line-rate perftest, ``iperf3 -P`` and the soak run against the site's AIStor peers, which on
a brownfield site serve production storage: a step that loads its far end runs against a
production peer only after the operator typed that peer's name (headless: the named flag
``--allow-storage-load PEER``, never implied by ``--yes``). One approval per peer and run,
journaled with the time; the peer's load is capped at ``aistor.load_max_seconds``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wizard.events import Answer, Decision, DecisionKind
from wizard.plan import measurement_far_end, measurement_peer

if TYPE_CHECKING:
    from wizard.engine.core import Engine
    from wizard.plan import Step, StepContext


def production_peer(step: Step, ctx: StepContext) -> str | None:
    """The production AIStor peer this run of ``step`` loads, or None."""
    if not step.loads_far_end:
        return None
    far = measurement_far_end(ctx.site, ctx.target)
    if far is None or far.is_node:
        return None
    peer = measurement_peer(ctx.site, ctx.target)
    return peer.name if peer is not None and peer.production else None


async def confirm_peer_load(engine: Engine, step: Step, ctx: StepContext) -> bool:
    """True when the step may load its far end (not a production peer, or approved)."""
    peer = production_peer(step, ctx)
    approved: set[str] = engine.__dict__.setdefault("_storage_load_approved", set())
    if peer is None or peer in approved:
        return True
    cap = ctx.site.aistor.load_max_seconds
    decision = Decision(
        DecisionKind.STORAGE_LOAD,
        step.id,
        f"Load on production storage {peer}",
        ctx.target,
        f"{step.title} loads the AIStor peer {peer}, which serves production storage: "
        f"RDMA/TCP traffic from {ctx.target} up to the line rate, each run at most {cap} s "
        f"(aistor.load_max_seconds). Clients of {peer} may see less bandwidth meanwhile. "
        f"Type the peer's name ({peer}) to allow load on it for this run.",
        rollback="nothing to roll back: the load ends with the measurement",
        confirm_text=peer,
        actions=tuple(step.actions(ctx.site, ctx.node)),
    )
    if await engine.decisions.ask(decision) is Answer.SKIP:
        return False
    approved.add(peer)
    engine.journal({"event": "storage-load-approved", "peer": peer, "step": step.id,
                    "target": ctx.target})  # fmt: skip
    return True
