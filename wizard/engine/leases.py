"""A per-node lock in the cluster: a coordination.k8s.io/v1 Lease per node, taken before
the wizard's first change to the node and released when the run ends.

The checkpoint's flock guards one state folder on one machine. Two wizards working on one
site from two state folders, or from two jump hosts, both drained, changed and rejoined the
same node, one uncordoning it while the other was mid-change. The cluster is what both
see, so the lock lives there:

- ``kube-node-lease/gpu-node-wizard.<node>``, its ``holderIdentity`` naming the wizard,
  the user@host, the pid and the site (also as annotations, one field each);
- created with POST (a second creator gets 409 AlreadyExists), renewed every third of
  ``leaseDurationSeconds`` while held, replaced only with the resourceVersion read (a
  concurrent taker gets 409 Conflict: optimistic concurrency, Kubernetes API conventions);
- a lease of another holder is refused, naming it, unless it is stale: watched unchanged
  for its duration on this side's monotonic clock (its holder died or lost the cluster;
  client-go's leaderelection judges so, tolerant of skewed clocks), or held by a wizard on
  this host whose pid no longer runs; then it is taken over with its resourceVersion
  (leaseTransitions + 1);
- a held lease is trusted for its duration (less a margin) after its last renewal on this
  side's clock; a renewal that meets 409 or comes too late loses it, and every further
  effect on the node is refused (``check``, run by the engine before each intent);
- released (deleted, if still ours) when the run ends, however it ends but a kill: a
  killed wizard's lease is stale after its duration.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from wizard import journal
from wizard.checkpoint import who_am_i
from wizard.errors import WizardError
from wizard.transports import children
from wizard.transports.base import TransportError

NAMESPACE = "kube-node-lease"
PREFIX = "gpu-node-wizard."
DURATION_S = 90  # a holder that has not renewed for this long is gone
COLLECTION = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
ANNOTATION = "gpu-node-wizard.io/"


class LeaseHeldError(WizardError):
    """Another wizard holds the node's lease: it is changing that node now."""

    exit_code = 1


class LeaseLostError(TransportError):
    """This run held the node's lease and lost it (another wizard took it over, or it could
    not be renewed within its duration): no further change to the node may be made.

    A TransportError, so that an effect refused by it fails its step's target like a
    host that cannot be used, wherever in a step it is met."""


# A lease is trusted locally until its last successful renewal + duration - this margin
# (a fraction of the duration): the other side judges staleness on its own clock, so this
# side stops a little before the lease can be judged expired there.
MARGIN_FRACTION = 0.2


def _micro(when: datetime) -> str:
    """metav1.MicroTime, as the API server writes it."""
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _observed(lease: dict[str, Any]) -> tuple[Any, ...]:
    """What changes whenever a lease is written: its resourceVersion (and, for a server
    that does not keep one, its holder and renewTime)."""
    spec = lease.get("spec") or {}
    return (
        (lease.get("metadata") or {}).get("resourceVersion"),
        spec.get("holderIdentity"),
        spec.get("renewTime"),
    )


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


def this_machine() -> dict[str, str]:
    """What says a pid means the same process here: the machine (machine-id, not the
    hostname, which two jump hosts or containers may share), its boot (boot_id: a pid of
    an earlier boot is another process) and the pid namespace (a container's pid 40 is
    not the host's)."""
    return {
        "machine-id": _read("/etc/machine-id"),
        "boot-id": _read("/proc/sys/kernel/random/boot_id"),
        "pid-ns": _pid_namespace(),
    }


class NodeLeases:
    """The leases one engine run holds, one per node it changes."""

    def __init__(self, services: Any, site_name: str, *, duration_s: int = DURATION_S) -> None:
        # The services, not their client: a site's cluster client is made when first used
        # (a missing kubeconfig is that step's error, not the engine's).
        self._services = services
        self.site = site_name
        self.duration_s = duration_s
        self.host = socket.gethostname()
        self.pid = os.getpid()
        # A random id per run: two runs never share an identity, even with one pid.
        self.run_id = secrets.token_hex(8)
        self.machine = this_machine()
        self.identity = (
            f"gpu-node-wizard {who_am_i()} pid {self.pid} site {site_name} run {self.run_id}"
        )
        # How long a lease of another holder is watched before the refusal: by default
        # long enough to see a dead holder's lease expire (client-go waits as long).
        self.patience_s = float(os.environ.get("GNW_LEASE_WAIT_S") or duration_s + 5)
        self.progress: Callable[[str], None] | None = None  # the engine's notices
        self._held: dict[str, dict[str, Any]] = {}
        # Local monotonic time until which each held lease is certainly still ours: its
        # last successful write + duration - margin (never the other host's clock).
        self._valid_until: dict[str, float] = {}
        # Nodes whose lease this run lost, and why (naming the new holder when known).
        self._lost: dict[str, str] = {}
        # Renewal failures not yet shown to the operator (the engine drains them).
        self._failures: list[str] = []
        self._lock = asyncio.Lock()
        self._renewer: asyncio.Task[None] | None = None

    @property
    def kube(self) -> Any:
        return self._services.kube

    @property
    def enabled(self) -> bool:
        kube = self.kube
        return kube is not None and hasattr(kube, "request")

    def held(self) -> list[str]:
        return sorted(self._held)

    def lost(self) -> dict[str, str]:
        return dict(self._lost)

    def failures(self) -> list[str]:
        """Renewal failures since the last call (to be shown and journaled, never silent)."""
        out, self._failures = self._failures, []
        return out

    def _margin(self) -> float:
        return self.duration_s * MARGIN_FRACTION

    def _wrote(self, node: str, lease: dict[str, Any], at: float) -> None:
        """A write of ours succeeded at monotonic ``at`` (taken before it was sent)."""
        self._held[node] = lease
        self._valid_until[node] = at + self.duration_s - self._margin()
        self._lost.pop(node, None)

    def _lose(self, node: str, why: str) -> None:
        self._held.pop(node, None)
        self._valid_until.pop(node, None)
        self._lost[node] = why

    def check(self, node: str) -> None:
        """Before an effect on ``node``: LeaseLostError when this run held its lease and
        lost it (taken over, or not renewed in time on this side's own clock). A node
        whose lease this run never took is not judged here (``acquire`` takes it)."""
        if node in self._lost:
            raise LeaseLostError(node, self._lost[node])
        until = self._valid_until.get(node)
        if until is not None and time.monotonic() >= until:
            self._lose(
                node,
                f"the lease {NAMESPACE}/{PREFIX}{node} was not renewed within its "
                f"{self.duration_s}s (less a {self._margin():.0f}s margin): another wizard may "
                "hold it now, so no further change is made to the node by this run",
            )
            raise LeaseLostError(node, self._lost[node])

    async def acquire(self, node: str) -> str | None:
        """Hold ``node``'s lease (a no-op when held and still valid); a notice when a stale
        one was taken over. LeaseHeldError when another live wizard holds it;
        LeaseLostError when this run held it and lost it."""
        if not self.enabled:
            return None
        if node in self._held and self._fresh(node):
            return None
        async with self._lock:
            if node in self._held:
                if not self._fresh(node):
                    # Expired on this side: renewed with the resourceVersion last written,
                    # it is still ours only if nobody wrote it since (optimistic concurrency).
                    await self._renew_or_lose(node)
                self.check(node)
                return None
            if node in self._lost:
                raise LeaseLostError(node, self._lost[node])
            note = await self._take(node)
            if self._renewer is None:
                self._renewer = asyncio.ensure_future(self._renew_forever())
            return note

    async def _take(self, node: str) -> str | None:
        path = f"{COLLECTION}/{PREFIX}{node}"
        for _ in range(3):  # a race lost to a concurrent creator: read it and judge again
            current = await self._get(path)
            if current is None:
                try:
                    at = time.monotonic()
                    with journal.unguarded():
                        lease = await self.kube.request(
                            "POST", COLLECTION, self._body(node), what=f"take the lease of {node}"
                        )
                    self._wrote(node, lease, at)
                    return None
                except TransportError as exc:
                    if getattr(exc, "status", None) != 409:
                        raise
                    continue
            stale = self._stale(current)
            if stale is None:
                current, stale = await self._watch(node, path, current)
                if current is None:
                    continue  # deleted while watched: create it
                if stale is None:
                    raise LeaseHeldError(self._refusal(node, current))
            body = self._body(node)
            body["metadata"]["resourceVersion"] = current["metadata"].get("resourceVersion")
            transitions = (current.get("spec") or {}).get("leaseTransitions")
            body["spec"]["leaseTransitions"] = (
                transitions + 1 if isinstance(transitions, int) and transitions >= 0 else 1
            )
            try:
                at = time.monotonic()
                with journal.unguarded():
                    lease = await self.kube.request(
                        "PUT", path, body, what=f"take over the stale lease of {node}"
                    )
                self._wrote(node, lease, at)
            except TransportError as exc:
                if getattr(exc, "status", None) != 409:
                    raise
                continue
            holder = current.get("spec", {}).get("holderIdentity", "?")
            return f"took over the lease of {node} from {holder} ({stale})"
        raise LeaseHeldError(f"the lease of {node} changes hands as it is read; try again")

    async def _watch(
        self, node: str, path: str, first: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, str | None]:
        """Judge another holder's lease as client-go's leaderelection does, on this side's
        own monotonic clock (never the other host's renewTime: the clocks may be skewed):
        live as soon as it changes (its holder renewed it); stale once it stayed unchanged
        for its leaseDurationSeconds of this side's observation. Waits at most
        ``patience_s``, telling the operator, then calls it live (refused)."""
        spec = first.get("spec") or {}
        duration = spec.get("leaseDurationSeconds")
        if not isinstance(duration, int) or duration <= 0:
            return first, "it has no valid leaseDurationSeconds"
        seen = _observed(first)
        since = time.monotonic()
        tick = min(max(duration / 10, 0.05), 2.0)
        told = since
        while True:
            waited = time.monotonic() - since
            if waited >= duration:
                return first, (
                    f"unchanged for {waited:.0f}s of this wizard's observation, longer than "
                    f"its {duration}s duration: its holder stopped renewing it"
                )
            if waited >= self.patience_s:
                return first, None
            if self.progress is not None and time.monotonic() - told >= 10:
                told = time.monotonic()
                self.progress(
                    f"the lease of {node} is held by {spec.get('holderIdentity', '?')}: "
                    f"watching it ({waited:.0f}s of {duration}s without a renewal; it is "
                    "taken over if it stays unrenewed)"
                )
            await asyncio.sleep(tick)
            current = await self._get(path)
            if current is None:
                return None, None
            if _observed(current) != seen:
                return current, None  # renewed (or taken by a third): its holder is live

    async def _get(self, path: str) -> dict[str, Any] | None:
        try:
            return await self.kube.request("GET", path, what="read a node lease")
        except TransportError as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise

    def _body(self, node: str) -> dict[str, Any]:
        stamp = _micro(datetime.now(UTC))
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": f"{PREFIX}{node}",
                "namespace": NAMESPACE,
                "annotations": {
                    f"{ANNOTATION}host": self.host,
                    f"{ANNOTATION}pid": str(self.pid),
                    f"{ANNOTATION}pid-started": str(children.start_time(self.pid) or ""),
                    f"{ANNOTATION}site": self.site,
                    f"{ANNOTATION}run": self.run_id,
                    **{f"{ANNOTATION}{k}": v for k, v in self.machine.items()},
                    f"{ANNOTATION}user": who_am_i(),
                },
            },
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.duration_s,
                "acquireTime": stamp,
                "renewTime": stamp,
            },
        }

    def _stale(self, lease: dict[str, Any]) -> str | None:
        """Why another holder's lease may be taken over, or None (it is live)."""
        notes = (lease.get("metadata") or {}).get("annotations") or {}
        here = all(v and notes.get(f"{ANNOTATION}{k}") == v for k, v in self.machine.items())
        if here:
            try:
                pid = int(notes.get(f"{ANNOTATION}pid", ""))
                started = int(notes.get(f"{ANNOTATION}pid-started") or 0) or None
            except ValueError:
                pid, started = 0, None
            # Same machine, boot and pid namespace: the pid is this one's. Without its
            # start time only a pid that runs no process at all is proof it is gone.
            gone = (
                children.start_time(pid) is None
                if started is None
                else not children.alive(pid, started)
            )
            if pid and gone:
                return f"its holder, pid {pid} on this machine and boot, no longer runs"
        # Expiry is judged by watching it (``_watch``), never by this host's clock against
        # the renewTime another host's clock wrote.
        return None

    def _refusal(self, node: str, lease: dict[str, Any]) -> str:
        spec = lease.get("spec") or {}
        return (
            f"{node} is being changed by another wizard: {spec.get('holderIdentity', '?')} "
            f"holds its lease {NAMESPACE}/{PREFIX}{node} (renewed {spec.get('renewTime', '?')} "
            "by its host's clock). Wait for that run to end; if it is gone, the lease is free "
            f"once it stays unrenewed for its {spec.get('leaseDurationSeconds', '?')}s (a run "
            f"then takes it over), or `kubectl -n {NAMESPACE} delete lease {PREFIX}{node}` "
            "frees it"
        )

    def _fresh(self, node: str) -> bool:
        return time.monotonic() < self._valid_until.get(node, 0.0)

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(max(self.duration_s / 3, 0.05))
            for node in list(self._held):
                await self._renew_or_lose(node)

    async def _renew_or_lose(self, node: str) -> None:
        """Renew; a 409 (another holder wrote it) or a lapse of local validity loses it;
        any other failure is recorded for the operator and retried at the next tick."""
        try:
            await self._renew(node)
        except TransportError as exc:
            if getattr(exc, "status", None) == 409:
                self._lose(node, await self._taken_by(node))
                self._failures.append(f"lost the lease of {node}: {self._lost[node]}")
                return
            self._failures.append(f"could not renew the lease of {node}: {exc}")
            if not self._fresh(node):
                with contextlib.suppress(LeaseLostError):
                    self.check(node)
                self._failures.append(f"lost the lease of {node}: {self._lost[node]}")

    async def _taken_by(self, node: str) -> str:
        """Why a renewal met 409, naming the lease's holder now."""
        holder = "?"
        with contextlib.suppress(TransportError):
            current = await self._get(f"{COLLECTION}/{PREFIX}{node}")
            holder = ((current or {}).get("spec") or {}).get("holderIdentity") or "nobody"
        return (
            f"another wizard took over the lease {NAMESPACE}/{PREFIX}{node} (held now by "
            f"{holder}) while this run could not renew it: no further change is made to the "
            "node by this run"
        )

    async def _renew(self, node: str) -> None:
        lease = self._held[node]
        body = {**lease, "spec": {**lease.get("spec", {}), "renewTime": _micro(datetime.now(UTC))}}
        at = time.monotonic()
        with journal.unguarded():
            renewed = await self.kube.request(
                "PUT", f"{COLLECTION}/{PREFIX}{node}", body, what=f"renew the lease of {node}"
            )
        self._wrote(node, renewed, at)

    async def release_all(self) -> None:
        """Give back every lease still ours (not one another wizard took over)."""
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._renewer
            self._renewer = None
        for node in list(self._held):
            path = f"{COLLECTION}/{PREFIX}{node}"
            with contextlib.suppress(TransportError):
                current = await self._get(path)
                if current and current.get("spec", {}).get("holderIdentity") == self.identity:
                    # Only the version read: a takeover between the read and the delete
                    # makes it 409, never a deletion of the new holder's lease.
                    options = {
                        "kind": "DeleteOptions",
                        "apiVersion": "v1",
                        "preconditions": {
                            "resourceVersion": current["metadata"].get("resourceVersion")
                        },
                    }
                    with journal.unguarded():
                        await self.kube.request(
                            "DELETE", path, options, what=f"release the lease of {node}"
                        )
            self._held.pop(node, None)
            self._valid_until.pop(node, None)
