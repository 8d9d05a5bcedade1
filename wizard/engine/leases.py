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
- a lease of another holder is refused, naming it, unless it is stale: not renewed within
  its duration (its holder died or lost the cluster), or held by a wizard on this host
  whose pid no longer runs; then it is taken over with its resourceVersion;
- released (deleted, if still ours) when the run ends, however it ends but a kill: a
  killed wizard's lease is stale after its duration.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from datetime import UTC, datetime, timedelta
from typing import Any

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


def _micro(when: datetime) -> str:
    """metav1.MicroTime, as the API server writes it."""
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: Any) -> datetime | None:
    if not isinstance(text, str):
        return None
    for form in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
        with contextlib.suppress(ValueError):
            return datetime.strptime(text, form).replace(tzinfo=UTC)
    return None


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
        self.identity = f"gpu-node-wizard {who_am_i()} pid {self.pid} site {site_name}"
        self._held: dict[str, dict[str, Any]] = {}
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

    async def acquire(self, node: str) -> str | None:
        """Hold ``node``'s lease (a no-op when already held); a notice when a stale one was
        taken over. LeaseHeldError when another live wizard holds it."""
        if not self.enabled or node in self._held:
            return None
        async with self._lock:
            if node in self._held:
                return None
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
                    self._held[node] = await self.kube.request(
                        "POST", COLLECTION, self._body(node), what=f"take the lease of {node}"
                    )
                    return None
                except TransportError as exc:
                    if getattr(exc, "status", None) != 409:
                        raise
                    continue
            stale = self._stale(current)
            if stale is None:
                raise LeaseHeldError(self._refusal(node, current))
            body = self._body(node)
            body["metadata"]["resourceVersion"] = current["metadata"].get("resourceVersion")
            try:
                self._held[node] = await self.kube.request(
                    "PUT", path, body, what=f"take over the stale lease of {node}"
                )
            except TransportError as exc:
                if getattr(exc, "status", None) != 409:
                    raise
                continue
            holder = current.get("spec", {}).get("holderIdentity", "?")
            return f"took over the lease of {node} from {holder} ({stale})"
        raise LeaseHeldError(f"the lease of {node} changes hands as it is read; try again")

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
        spec = lease.get("spec") or {}
        notes = (lease.get("metadata") or {}).get("annotations") or {}
        if notes.get(f"{ANNOTATION}host") == self.host:
            try:
                pid = int(notes.get(f"{ANNOTATION}pid", ""))
                started = int(notes.get(f"{ANNOTATION}pid-started") or 0) or None
            except ValueError:
                pid, started = 0, None
            if pid and not children.alive(pid, started):
                return f"its holder, pid {pid} on this host, no longer runs"
        renewed = _parse(spec.get("renewTime")) or _parse(spec.get("acquireTime"))
        duration = spec.get("leaseDurationSeconds")
        if not isinstance(duration, int) or renewed is None:
            return "it has no renew time or duration"
        if datetime.now(UTC) > renewed + timedelta(seconds=duration):
            return f"not renewed since {spec.get('renewTime')}, {duration}s expired"
        return None

    def _refusal(self, node: str, lease: dict[str, Any]) -> str:
        spec = lease.get("spec") or {}
        renewed = _parse(spec.get("renewTime"))
        until = (
            _micro(renewed + timedelta(seconds=int(spec.get("leaseDurationSeconds") or 0)))
            if renewed
            else "?"
        )
        return (
            f"{node} is being changed by another wizard: {spec.get('holderIdentity', '?')} "
            f"holds its lease {NAMESPACE}/{PREFIX}{node} (renewed {spec.get('renewTime', '?')}). "
            "Wait for that run to end; if it is gone, the lease is free once it expires "
            f"({until}) or `kubectl -n {NAMESPACE} delete lease {PREFIX}{node}` frees it"
        )

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(max(self.duration_s / 3, 0.05))
            for node in list(self._held):
                with contextlib.suppress(TransportError):
                    await self._renew(node)

    async def _renew(self, node: str) -> None:
        lease = self._held[node]
        body = {**lease, "spec": {**lease.get("spec", {}), "renewTime": _micro(datetime.now(UTC))}}
        self._held[node] = await self.kube.request(
            "PUT", f"{COLLECTION}/{PREFIX}{node}", body, what=f"renew the lease of {node}"
        )

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
                    await self.kube.request("DELETE", path, what=f"release the lease of {node}")
            self._held.pop(node, None)
