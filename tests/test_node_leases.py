"""A per-node lock in the cluster (issue #27, point 9): two wizards from two state folders
(or jump hosts) never change one node at once. Before, both drained, changed and rejoined
the same node, one uncordoning it while the other was mid-change.

The lease is a coordination.k8s.io/v1 Lease served by the lab's API server; the wizards
are real processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import yaml

from tests.conftest import REPO, served_lab
from wizard.engine.leases import COLLECTION, PREFIX, LeaseHeldError, NodeLeases
from wizard.services import SiteServices, build_services
from wizard.site import load_site
from wizard.transports.base import TransportError

NODE = "gpu-b300-01"
T = TypeVar("T")


def _command(site: Path, state: Path) -> list[str]:
    return [sys.executable, "-m", "frontend.cli", "run", str(site), "--headless", "--yes",
            "--maintenance-window-open", "--step", "operate.reboot", "--state-dir", str(state)]  # fmt: skip


def _api(site: Path) -> str:
    return yaml.safe_load((site.parent / "kubeconfig").read_text())["clusters"][0]["cluster"][
        "server"
    ]


def _lease(site: Path) -> dict | None:
    try:
        with urllib.request.urlopen(f"{_api(site)}{COLLECTION}/{PREFIX}{NODE}", timeout=10) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as exc:
        assert exc.code == 404
        return None


def test_a_second_wizard_from_another_state_folder_does_not_touch_a_node_mid_change(tmp_path):
    site = tmp_path / "lab" / "site.yaml"
    with served_lab(site, "greenfield"):  # the node already in the cluster
        first_state, second_state = tmp_path / "state-a", tmp_path / "state-b"
        first = subprocess.Popen(_command(site, first_state), cwd=REPO, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                steps = json.loads((first_state / "lab" / "state.json").read_text())["steps"]
                if steps.get("operate.reboot", {}).get(NODE, {}).get("state") == "waiting":
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        else:
            first.kill()
            raise AssertionError("the first wizard never began the reboot")
        # The first wizard is held right there, mid-change (its lease stays valid for its
        # duration), so that the second one certainly meets it.
        first.send_signal(signal.SIGSTOP)
        lease = _lease(site)
        assert lease is not None, "the first wizard holds no lease of the node"
        holder = lease["spec"]["holderIdentity"]
        assert f"pid {first.pid} site lab" in holder, holder
        notes = lease["metadata"]["annotations"]
        assert (
            notes["gpu-node-wizard.io/pid"] == str(first.pid)
            and notes["gpu-node-wizard.io/site"] == "lab"
        )

        # The first is stopped, so its lease is not renewed: watched for its whole 90s the
        # second would rightly take it over; it watches 3s here and refuses.
        second = subprocess.run(_command(site, second_state), cwd=REPO, capture_output=True,
                                text=True, timeout=120,
                                env={**os.environ, "GNW_LEASE_WAIT_S": "3"})  # fmt: skip
        assert second.returncode == 1, second.stdout + second.stderr
        assert f"{NODE} is being changed by another wizard" in second.stdout, second.stdout
        reboots = [
            e for e in _journal(second_state)
            if "intent" in e and str(e.get("command", "")).endswith("systemctl reboot")
        ]  # fmt: skip
        assert not reboots, "the second wizard rebooted the node under the first"

        first.send_signal(signal.SIGCONT)
        out, err = first.communicate(timeout=180)
        assert first.returncode == 0, out + err
        assert _lease(site) is None, "the lease was released when the run ended"


@pytest.fixture(scope="module")
def lease_lab(tmp_path_factory) -> Iterator[Path]:
    """One served greenfield lab (the node already in the cluster) for the lease tests:
    each begins with no lease of the node, as on a fresh lab (``on_lab``), and changes
    nothing else in it; a lab process per test was most of their time."""
    site_path = tmp_path_factory.mktemp("lease-lab") / "lab" / "site.yaml"
    with served_lab(site_path, "greenfield"):
        yield site_path


def on_lab(site_path: Path, scenario: Callable[[SiteServices], Awaitable[T]]) -> T:
    """``scenario`` with the wizard's services for the served lab, the node's lease gone
    first (whatever an earlier test left), the services closed after it."""
    site = load_site(site_path)

    async def run() -> T:
        services = build_services(site)
        try:
            with contextlib.suppress(TransportError):  # 404: no lease left
                await services.kube.request(
                    "DELETE", f"{COLLECTION}/{PREFIX}{NODE}", what="clear the lease"
                )
            return await scenario(services)
        finally:
            await services.close()

    return asyncio.run(run())


def _journal(state: Path) -> list[dict]:
    path = state / "lab" / "journal.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("why", ["expired", "dead pid on this host"])
def test_a_stale_lease_is_taken_over_and_a_live_one_is_not(lease_lab, why):
    async def scenario(services: SiteServices) -> str | None:
        other = NodeLeases(services, "lab", duration_s=1 if why == "expired" else 60)
        other.host = "jump-2" if why == "expired" else other.host
        other.pid = 2**22 + 7 if why != "expired" else other.pid  # no such process
        await other.acquire(NODE)
        other._renewer.cancel()  # it dies: no more renewals
        mine = NodeLeases(services, "lab")
        if why == "expired":
            mine.patience_s = 0.3  # watched for less than its duration: refused
            with pytest.raises(LeaseHeldError, match="being changed by another wizard"):
                await mine.acquire(NODE)
            mine.patience_s = 30.0
        note = await mine.acquire(NODE)  # watched unchanged for its 1s: taken over
        assert mine.held() == [NODE]
        await mine.release_all()
        return note

    note = on_lab(lease_lab, scenario)
    assert note and note.startswith(f"took over the lease of {NODE}"), note
    assert ("unchanged for" in note) if why == "expired" else ("no longer runs" in note), note


def test_a_lease_lost_during_a_stall_is_noticed_and_refuses_further_effects(lease_lab):
    """A stalls (its renewals fail) longer than the lease; B takes over; A's network comes
    back: A's renewal meets 409, A knows it lost the node (naming B) and makes no effect."""
    from wizard import journal
    from wizard.engine.leases import LeaseLostError

    async def scenario(services: SiteServices) -> None:
        a = NodeLeases(services, "lab", duration_s=2)
        a.host = "jump-1"
        b = NodeLeases(services, "lab", duration_s=2)
        b.host, b.identity = "jump-2", "gpu-node-wizard bob@jump-2 pid 4242 site lab"
        await a.acquire(NODE)
        real = a._renew

        async def partitioned(node: str) -> None:
            raise TransportError("cluster", "API unreachable (partition)")

        a._renew = partitioned
        await asyncio.sleep(2.6)
        # A's own clock says its lease lapsed: it refuses before B even comes.
        with pytest.raises(LeaseLostError, match="not renewed within"):
            a.check(NODE)
        assert any("could not renew" in f for f in a.failures())
        assert (await b.acquire(NODE) or "").startswith("took over")
        a._renew = real
        await asyncio.sleep(1.0)
        assert NODE not in a.held()
        with pytest.raises(LeaseLostError):
            await a.acquire(NODE)
        intents: list[dict] = []

        class Recorder:
            def intent(self, entry: dict) -> str:
                intents.append(entry)
                return "1"

        guard = lambda: a.check(NODE)  # noqa: E731
        with (
            journal.scope(Recorder(), "operate.reboot", NODE, guard),
            pytest.raises(LeaseLostError),
        ):
            journal.begin({"target": NODE, "command": "systemctl reboot"})
        assert not intents, "an effect was journaled (and made) without the lease"
        await b.release_all()
        await a.release_all()

    on_lab(lease_lab, scenario)


def test_a_renewal_that_meets_another_holder_loses_the_node_naming_it(lease_lab):
    async def scenario(services: SiteServices) -> None:
        a = NodeLeases(services, "lab", duration_s=60)
        await a.acquire(NODE)
        a._renewer.cancel()
        path = f"{COLLECTION}/{PREFIX}{NODE}"
        current = await services.kube.request("GET", path, what="read")
        current["spec"]["holderIdentity"] = "gpu-node-wizard bob@jump-2 pid 1 site lab"
        await services.kube.request("PUT", path, current, what="steal")
        await a._renew_or_lose(NODE)
        assert NODE not in a.held()
        assert "bob@jump-2" in a.lost()[NODE], a.lost()
        assert any("lost the lease" in f for f in a.failures())
        await a.release_all()
        lease = await services.kube.request("GET", path, what="read")
        assert "bob@jump-2" in lease["spec"]["holderIdentity"], "A deleted B's lease"

    on_lab(lease_lab, scenario)


@pytest.mark.parametrize("skew", [-3600, 3600], ids=["holder clock behind", "holder clock ahead"])
def test_staleness_is_judged_by_watching_the_lease_not_by_comparing_clocks(lease_lab, skew):
    """The holder's host clock is an hour off. Behind: its lease looks expired by this
    host's clock, yet it is renewed, so it is live (refused). Ahead: it looks valid for an
    hour, yet it is never renewed, so it is taken over after its duration, with
    leaseTransitions incremented and acquireTime set."""
    from datetime import UTC, datetime, timedelta

    async def scenario(services: SiteServices) -> None:
        path = f"{COLLECTION}/{PREFIX}{NODE}"
        other = NodeLeases(services, "lab", duration_s=1)
        other.host, other.identity = "jump-2", "gpu-node-wizard bob@jump-2 pid 9 site lab"
        skewed = datetime.now(UTC) + timedelta(seconds=skew)
        await other.acquire(NODE)
        other._renewer.cancel()

        async def renew_on_skewed_clock() -> None:
            while True:
                lease = await services.kube.request("GET", path, what="read")
                stamp = (skewed + timedelta(seconds=time.monotonic() % 1000)).strftime(
                    "%Y-%m-%dT%H:%M:%S.%fZ"
                )
                lease["spec"]["renewTime"] = stamp
                await services.kube.request("PUT", path, lease, what="renew")
                await asyncio.sleep(0.2)

        lease = await services.kube.request("GET", path, what="read")
        lease["spec"]["renewTime"] = skewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        await services.kube.request("PUT", path, lease, what="skew")
        mine = NodeLeases(services, "lab", duration_s=5)
        if skew < 0:
            renewer = asyncio.ensure_future(renew_on_skewed_clock())
            try:
                with pytest.raises(LeaseHeldError, match="bob@jump-2"):
                    await mine.acquire(NODE)
            finally:
                renewer.cancel()
            return
        note = await mine.acquire(NODE)
        assert note and "unchanged for" in note, note
        taken = await services.kube.request("GET", path, what="read")
        assert taken["spec"]["holderIdentity"] == mine.identity
        assert taken["spec"]["leaseTransitions"] == 1
        assert taken["spec"]["acquireTime"]
        await mine.release_all()

    on_lab(lease_lab, scenario)


def test_the_dead_pid_shortcut_needs_the_same_machine_boot_and_pid_namespace(lease_lab):
    """Same hostname is not the same machine: a holder whose pid does not run here, but
    whose machine-id (or boot, or pid namespace) differs, is another process elsewhere."""

    async def scenario(services: SiteServices) -> None:
        mine = NodeLeases(services, "lab", duration_s=60)
        assert all(mine.machine.values()), mine.machine
        for field in ("machine-id", "boot-id", "pid-ns"):
            other = NodeLeases(services, "lab", duration_s=60)
            other.pid = 2**22 + 7  # no such process here
            other.machine = {**other.machine, field: "another"}
            assert other.host == mine.host
            await other.acquire(NODE)
            other._renewer.cancel()
            mine.patience_s = 0.3
            with pytest.raises(LeaseHeldError, match="being changed by another wizard"):
                await mine.acquire(NODE)
            other._renewer = None
            await other.release_all()

    on_lab(lease_lab, scenario)


def test_release_deletes_only_the_version_read(lease_lab):
    """DeleteOptions.preconditions.resourceVersion: a lease written since it was read (a
    takeover) is not deleted."""

    async def scenario(services: SiteServices) -> None:
        path = f"{COLLECTION}/{PREFIX}{NODE}"
        mine = NodeLeases(services, "lab", duration_s=60)
        await mine.acquire(NODE)
        read = await services.kube.request("GET", path, what="read")
        taken = {**read, "spec": {**read["spec"], "holderIdentity": "someone else"}}
        await services.kube.request("PUT", path, taken, what="take")
        options = {"kind": "DeleteOptions", "apiVersion": "v1",
                   "preconditions": {"resourceVersion": read["metadata"]["resourceVersion"]}}  # fmt: skip
        with pytest.raises(TransportError) as refused:
            await services.kube.request("DELETE", path, options, what="release")
        assert getattr(refused.value, "status", None) == 409
        still = await services.kube.request("GET", path, what="read")
        assert still["spec"]["holderIdentity"] == "someone else"
        await mine.release_all()
        assert (await services.kube.request("GET", path, what="read"))["spec"][
            "holderIdentity"
        ] == "someone else"

    on_lab(lease_lab, scenario)
