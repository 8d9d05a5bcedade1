"""The disruption controller's status for a budget whose pods were recently evicted
(pkg/controller/disruption/disruption.go buildDisruptedPodMap and countHealthyPods, v1.33).

The embedded eviction deletes a pod at once, so status.disruptedPods of a pod still alive
is out of reach through the API: this seeds it, with a pinned clock, and checks that such
a pod counts as unhealthy until DeletionTimeout (2 min) has passed, then healthy again
(the controller assumes the eviction was lost), and that a terminating pod's entry goes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from simulator.disruption import DELETION_TIMEOUT, budget_status
from simulator.kubeapi import ClusterState

NOW = datetime(2026, 12, 2, 1, 0, 0, tzinfo=UTC)
NS = "gnw"


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _state(evicted_at: datetime, *, terminating: bool = False) -> tuple[ClusterState, dict]:
    state = ClusterState()
    for i in range(3):
        meta = {"name": f"p{i}", "namespace": NS, "labels": {"app": "a"}}
        if terminating and i == 0:
            meta["deletionTimestamp"] = _stamp(NOW)
        state.put("v1", "pods", {"metadata": meta, "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}]}})  # fmt: skip
    pdb = state.put("policy/v1", "poddisruptionbudgets", {
        "metadata": {"name": "pdb", "namespace": NS, "generation": 1},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "a"}}},
        "status": {"observedGeneration": 1, "disruptedPods": {"p0": _stamp(evicted_at)}},
    })  # fmt: skip
    return state, pdb


def _counts(status: dict) -> tuple:
    return (status["currentHealthy"], status["desiredHealthy"], status["expectedPods"],
            status["disruptionsAllowed"], status.get("disruptedPods"))  # fmt: skip


def test_a_pod_evicted_moments_ago_is_not_healthy():
    state, pdb = _state(NOW - timedelta(seconds=30))
    status = budget_status(state, pdb, now=NOW)
    assert _counts(status) == (2, 2, 3, 0, {"p0": _stamp(NOW - timedelta(seconds=30))})


def test_the_entry_holds_until_the_deletion_timeout_itself():
    """Go keeps it while !expectedDeletion.Before(now): at exactly 2 minutes, still held."""
    state, pdb = _state(NOW - DELETION_TIMEOUT)
    assert _counts(budget_status(state, pdb, now=NOW))[:4] == (2, 2, 3, 0)


def test_an_eviction_past_the_timeout_is_taken_as_lost():
    state, pdb = _state(NOW - DELETION_TIMEOUT - timedelta(seconds=1))
    assert _counts(budget_status(state, pdb, now=NOW)) == (3, 2, 3, 1, None)


def test_a_terminating_pods_entry_is_dropped_and_it_is_not_healthy():
    state, pdb = _state(NOW - timedelta(seconds=30), terminating=True)
    assert _counts(budget_status(state, pdb, now=NOW)) == (2, 2, 3, 0, None)


def test_a_negative_budget_is_forbidden_as_errors_new_forbidden_says_it():
    """eviction.go checkAndDecrement: errors.NewForbidden(policy.Resource(
    "poddisruptionbudget"), ...): the singular resource, and its details (unreachable
    through the embedded API, whose controller never writes a negative count)."""
    from simulator.disruption import _check_and_decrement

    state, pdb = _state(NOW)
    pdb["status"]["disruptionsAllowed"] = -1
    code, body = _check_and_decrement(state, pdb, "p1")
    assert code == 403
    assert body["message"] == (
        'poddisruptionbudget.policy "pdb" is forbidden: pdb disruptions allowed is negative'
    )
    assert body["details"] == {"name": "pdb", "group": "policy", "kind": "poddisruptionbudget"}
