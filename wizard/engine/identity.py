"""Which machines the checkpoint's results belong to: the site file's sections, each
node's identity (machine-id, host key, boot id) and the cluster's, compared at the start
of a run; a different machine resets its steps, a reboot re-verifies its results.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from wizard import identity
from wizard.checkpoint import Checkpoint, finish_command, in_flight_elsewhere, now
from wizard.errors import WizardError
from wizard.events import Event, Notice
from wizard.plan import CLUSTER, Plan, Services
from wizard.site import Site
from wizard.transports.base import HostKeyError, TransportError


class MachineIdentity:
    """Which machines the checkpoint's results describe: ``reconcile_site`` and
    ``reconcile_identity`` at the start of a run reset what belongs to another site file,
    machine or cluster; what they read (each node's boot, the unreachable nodes, a host
    key that does not match) is what the engine asks afterwards (``current_boot``,
    ``needs_reverify``, ``host_key_errors``)."""

    def __init__(
        self,
        site: Site,
        plan: Plan,
        checkpoint: Checkpoint,
        services: Services,
        emit: Callable[[Event], None],
    ) -> None:
        self.site = site
        self.plan = plan
        self.checkpoint = checkpoint
        self.services = services
        self.emit = emit
        self._rebooted: set[str] = set()  # nodes rebooted since their results were recorded
        self._boots: dict[str, str] = {}  # node -> its boot id as read at the start of the run
        self.unreachable: set[str] = set()  # nodes whose identity could not be read
        # Nodes whose SSH host key does not match known_hosts (possible man-in-the-middle).
        self.host_key_errors: dict[str, TransportError] = {}

    def journal(self, entry: dict[str, Any]) -> None:
        self.checkpoint.journal(entry)

    def current_boot(self, target: str) -> str | None:
        """The node's boot id as read at the start of the run (or noted since)."""
        return self._boots.get(target)

    def needs_reverify(self, target: str, verified_on: str | None) -> bool:
        """A settled result verified on boot ``verified_on`` is verified again when the
        node booted since (see Engine._reverify_needed)."""
        current = self._boots.get(target)
        if verified_on and current:
            return verified_on != current
        return target in self._rebooted

    def reconcile_site(self) -> list[tuple[str, str]]:
        """Reset the steps that a changed site file invalidates; return them.

        A change in flight is never reset: its capture is the only record of the node
        before the change (a second capture would be of the half-changed node), so it
        resumes from it under the edited site. A node removed from the site, or a site
        renamed, while a change is in flight on it is refused until it is finished."""
        self._refuse_orphaned_changes()
        changed = self.checkpoint.changed_sections(self.site)
        if not changed:
            return []
        in_flight = {(s, t) for s, t, _ in self.checkpoint.in_flight()}
        reset = [
            (step, target)
            for step, target in self.plan.invalidated(changed, self.site)
            if self.checkpoint.record(step, target).recorded and (step, target) not in in_flight
        ]
        for step, target in sorted(in_flight):
            self.emit(
                Notice(
                    f"site file changed ({', '.join(changed)}): {step} on {target} is in "
                    "flight and keeps its capture; it resumes from it",
                    target,
                )
            )
        for step, target in reset:
            self.checkpoint.reset(step, target)
        self.checkpoint.adopt_site(self.site)
        if reset:
            listing = ", ".join(f"{s} on {t}" for s, t in reset)
            self.emit(Notice(f"site file changed ({', '.join(changed)}); reset: {listing}"))
        return reset

    def _refuse_orphaned_changes(self) -> None:
        """A change in flight on a node the site no longer lists, or held by the checkpoint
        of the site under its old name, would be left cordoned and half changed: refused,
        with what finishes it."""
        names = {n.name for n in self.site.nodes}
        command = finish_command(self.site, self.checkpoint.directory.parent)
        for step, target, change in self.checkpoint.in_flight():
            if target not in names and target != CLUSTER:
                raise WizardError(
                    f"{target} has a change in flight ({step}, stage "
                    f"{change.stage:.40}) but is no longer in the site "
                    f"file's nodes: put it back into nodes: and run {command} to finish it "
                    "(or roll it back) first, then remove it"
                )
        for old_name, step, target in in_flight_elsewhere(self.checkpoint.directory, self.site):
            raise WizardError(
                f"the checkpoint of site {old_name!r} holds {step} on {target} in flight (begun, "
                f"neither finished nor rolled back): give the site its old name {old_name!r} "
                f"again and run {command} to finish it first, then rename it"
            )

    def report_journal(self) -> None:
        """What the journal says about the end of the last run (a torn line, effects that
        may have happened without their outcome being recorded)."""
        cp = self.checkpoint
        if getattr(cp, "torn_journal_bytes", 0):
            self.emit(
                Notice(
                    f"the journal's last line ({cp.torn_journal_bytes} bytes) was cut off by a "
                    "crash; it is kept but not read as an entry"
                )
            )
        unfinished = list(getattr(cp, "unfinished", []))
        if unfinished:
            # Reported once: later runs do not repeat them.
            self.journal({"event": "intents-reported", "ids": [e["intent"] for e in unfinished]})
        for entry in unfinished:
            what = entry.get("command") or entry.get("api") or entry.get("commands")
            self.emit(
                Notice(
                    f"the last run was stopped during {entry.get('step')} on "
                    f"{entry.get('target') or entry.get('for')}: `{what}` may or may not have "
                    "taken effect; the step re-verifies before it acts",
                    str(entry.get("for") or ""),
                )
            )

    async def reconcile_identity(self) -> list[tuple[str, str]]:
        """Compare the machines and the cluster with what the results were recorded on.

        A different machine (or cluster) under the same name resets what was recorded for
        it; a reboot marks the node's settled results for re-verification. The live
        identities are stored for the next run. A node that cannot be reached now is left
        as it is: its steps will say so.
        """
        cp = self.checkpoint
        reset: list[tuple[str, str]] = []
        has_results = cp.has_results

        async def read_node(name: str) -> dict[str, str] | None:
            # None: no transport to ask; {}: a transport that could not reach the node.
            host = self.services.hosts.get(name) if self.services.hosts else None
            if host is None:
                return None
            try:
                results = await host.run_many(
                    [["cat", identity.MACHINE_ID], ["cat", identity.BOOT_ID]], sudo=False
                )
            except HostKeyError as exc:
                # Not "unreachable": someone else may answer at its address. The run stops
                # before it trusts any result of this node (Engine.run).
                self.host_key_errors[name] = exc
                return {}
            except (TransportError, OSError):
                return {}  # reachable never: an empty identity
            live = {
                "machine_id": results[0].stdout.strip() if results[0].ok else "",
                "boot_id": results[1].stdout.strip() if results[1].ok else "",
            }
            fingerprint = getattr(host, "host_key_fingerprint", None)
            if fingerprint is not None:
                live["host_key"] = fingerprint() or ""
            return live

        names = [n.name for n in self.site.nodes]
        lives = await asyncio.gather(*(read_node(n) for n in names))
        joins = self.plan.join_phase()  # results from it on belong to the Node object
        join_phase = joins.number if joins is not None else None
        for name, live in zip(names, lives, strict=True):
            if live is None:
                continue  # no transport for it (nothing to compare)
            if not live:
                self.unreachable.add(name)
                if has_results(name) and name not in self.host_key_errors:
                    self.emit(
                        Notice(
                            f"{name} could not be reached to check which machine it is; its "
                            "recorded results stand until a step reaches it",
                            name,
                        )
                    )
                continue
            live = {
                key: value for key, value in live.items() if value
            }  # a failed read keeps the old
            if live.get("boot_id"):
                self._boots[name] = live["boot_id"]
            before = cp.node_identity(name)
            if has_results(name) and before:
                mismatch = identity.compare(before, live, identity.MACHINE_FIELDS)
                if mismatch is not None:
                    reset += self._reset_target(
                        name, f"{name} is not the machine its results were recorded on ({mismatch})"
                    )
                elif identity.compare(before, live, identity.BOOT_FIELDS) is not None:
                    self._rebooted.add(name)
                    self.emit(
                        Notice(
                            f"{name} rebooted since its results were recorded: settled steps "
                            "are re-verified before they are trusted",
                            name,
                        )
                    )
            cp.set_node_identity(name, {**(before or {}), **live, "seen": now()})
        cluster = await self._cluster_identity()
        if cluster is not None:
            before = cp.cluster_identity()
            mismatch = identity.compare(before, cluster, identity.CLUSTER_FIELDS)
            if mismatch is not None:
                reason = f"the cluster is not the one the results were recorded on ({mismatch})"
                reset += self._reset_target(CLUSTER, reason)
                for name in names:
                    reset += self._reset_target(name, reason, from_phase=join_phase, quiet=True)
            else:
                for name, uid in cluster.get("node_uids", {}).items():
                    old = ((before or {}).get("node_uids") or {}).get(name)
                    if old and uid and old != uid:
                        reset += self._reset_target(
                            name,
                            f"the Kubernetes node {name} is a new object (uid {identity.short(old)}"
                            f" -> {identity.short(uid)}): it was deleted and joined again",
                            from_phase=join_phase,
                        )
            cp.set_cluster_identity(cluster)
        cp.save()
        return reset

    async def _cluster_identity(self) -> dict[str, Any] | None:
        try:
            kube = self.services.kube if self.services else None
            if kube is None or not hasattr(kube, "request"):
                return None
            namespace = await kube.request("GET", "/api/v1/namespaces/kube-system")
            node_uids = {}
            for name in (n.name for n in self.site.nodes):
                obj = await kube.node(name)
                if obj:
                    node_uids[name] = obj["metadata"].get("uid", "")
        except (TransportError, OSError, KeyError, TypeError):
            return None
        return {
            "server": getattr(kube, "server", ""),
            "kube_system_uid": (namespace or {}).get("metadata", {}).get("uid", ""),
            "node_uids": node_uids,
        }

    def _reset_target(
        self, target: str, reason: str, *, from_phase: int | None = None, quiet: bool = False
    ) -> list[tuple[str, str]]:
        """Forget what was recorded for ``target`` (from phase ``from_phase`` on)."""
        reset = []
        for phase in self.plan.phases:
            if from_phase is not None and phase.number < from_phase:
                continue
            for step in phase.steps:
                if self.checkpoint.forget(step.id, target):
                    reset.append((step.id, target))
        if reset and not quiet:
            self.emit(Notice(f"{reason}: {len(reset)} recorded step result(s) reset", target))
        if reset:
            self.journal({"event": "reset", "target": target, "why": reason, "steps": len(reset)})
        return reset

    def note_boot(self, target: str, boot_id: str) -> None:
        """A step saw the node boot anew (the reboot step): that boot is the known one."""
        self.checkpoint.note_boot(target, boot_id)
        self._boots[target] = boot_id
        self._rebooted.discard(target)
