"""PodDisruptionBudgets on the embedded API server, computed as the real control plane does.

Two parts of Kubernetes v1.33 decide an eviction, and both are modelled here from their
source:

- kube-controller-manager's disruption controller (pkg/controller/disruption/
  disruption.go, ``trySync``) writes each budget's status: the pods its selector picks,
  the expected count (``getExpectedPodCount``: an integer minAvailable counts the picked
  pods; maxUnavailable and a percentage minAvailable sum the scale of the pods'
  controllers, ``getExpectedScale``, so pods without a controller are not expected at
  all), a percentage rounded up (``intstr.GetScaledValueFromIntOrPercent(..., true)``),
  healthy = Ready and not terminating nor recently evicted (``countHealthyPods``), and
  ``disruptionsAllowed = currentHealthy - desiredHealthy``, 0 when negative or when no pod
  is expected (``updatePdbStatus``). A sync that fails (a controller without a scale) sets
  only disruptionsAllowed to 0 and a SyncFailed condition (``failSafe``).
- the API server's eviction subresource (pkg/registry/core/pod/storage/eviction.go,
  ``EvictionREST.Create``): a Pending or finished pod is deleted without a budget; more
  than one budget selecting the pod is a 500; an unready pod is deleted when the budget's
  unhealthyPodEvictionPolicy is AlwaysAllow or the budget is whole (``currentHealthy >=
  desiredHealthy > 0``); otherwise ``checkAndDecrement`` refuses with 429 at 0 allowed or
  takes one, noting the pod in status.disruptedPods.

The embedded server runs the controller's sync whenever a budget is read or an eviction
asked, so its budgets are never stale: the real controller lags by a moment (an eviction
then is refused with 429, "still being processed"), which a client retries anyway.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulator.kubeapi import ClusterState

PDBS = ("policy/v1", "poddisruptionbudgets")
# disruption.go DeletionTimeout: an evicted pod not deleted by then counts again.
DELETION_TIMEOUT = timedelta(minutes=2)
# eviction.go MaxDisruptedPodSize.
MAX_DISRUPTED_PODS = 2000
MORE_THAN_ONE = "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
VIOLATES = "Cannot evict pod as it would violate the pod's disruption budget."
# The built-in resources with a scale subresource, by (group, kind): their plural (the
# finders of disruption.go, then getScaleController for any other scalable kind).
_SCALABLE = {
    ("apps", "Deployment"): "deployments",
    ("apps", "ReplicaSet"): "replicasets",
    ("apps", "StatefulSet"): "statefulsets",
    ("", "ReplicationController"): "replicationcontrollers",
}


class SyncFailed(Exception):
    """What makes the controller's sync fail (and its failSafe answer)."""


def _time(stamp: str) -> datetime | None:
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except (TypeError, ValueError):
        return None


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


# -- label selectors (apimachinery pkg/apis/meta/v1 helpers.go LabelSelectorAsSelector) ---------


def selects(selector: Any, labels: dict[str, str] | None) -> bool:
    """Whether a metav1.LabelSelector picks these labels: a missing selector picks nothing,
    an empty one everything (policy/v1); matchLabels and matchExpressions all hold. An
    invalid selector raises ValueError (the eviction then skips that budget)."""
    if selector is None:
        return False
    if not isinstance(selector, dict):
        raise ValueError(f"selector {selector!r} is not an object")
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        if operator in ("In", "NotIn") and not values:
            raise ValueError(f"{operator} needs values")
        if operator in ("Exists", "DoesNotExist") and values:
            raise ValueError(f"{operator} takes no values")
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            raise ValueError(f"{operator!r} is not a valid label selector operator")
    return True


def _budget_selects(pdb: dict[str, Any], pod: dict[str, Any]) -> bool:
    try:
        return selects((pdb.get("spec") or {}).get("selector"), pod["metadata"].get("labels"))
    except ValueError:
        return False


# -- pods -------------------------------------------------------------------------------------------


def ready(pod: dict[str, Any]) -> bool:
    """podutil.IsPodReady: the Ready condition is True. A pod the lab seeded with container
    statuses but no conditions gets the condition its kubelet would write
    (pkg/kubelet/status/generate.go GeneratePodReadyCondition: Running, every container
    ready)."""
    status = pod.get("status") or {}
    conditions = status.get("conditions")
    if conditions:
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    statuses = status.get("containerStatuses") or []
    return (
        status.get("phase") == "Running"
        and bool(statuses)
        and all(s.get("ready") for s in statuses)
    )


def _controller_of(pod: dict[str, Any]) -> dict[str, Any] | None:
    """metav1.GetControllerOf: the ownerReference with controller: true."""
    refs = pod["metadata"].get("ownerReferences") or []
    return next((r for r in refs if r.get("controller") is True), None)


def _group(api_version: str) -> str:
    return api_version.split("/", 1)[0] if "/" in api_version else ""


def _scale_of(state: ClusterState, namespace: str, ref: dict[str, Any]) -> tuple[str, int] | None:
    """(uid, replicas) of a pod's controller, as disruption.go's finders find it, or None
    when it is not found (then "found no controllers" fails the sync)."""
    group, kind = _group(ref.get("apiVersion", "")), ref.get("kind", "")
    if (group, kind) == ("apps", "ReplicaSet"):
        rs = state.get("apps/v1", "replicasets", namespace, ref.get("name", ""))
        if rs is None or rs["metadata"].get("uid") != ref.get("uid"):
            return None
        own = rs["metadata"]["uid"], int((rs.get("spec") or {}).get("replicas", 1))
        owner = _controller_of(rs)
        if owner is None or owner.get("kind") != "Deployment":  # getPodReplicaSet
            return own
        deployment = state.get("apps/v1", "deployments", namespace, owner.get("name", ""))
        if deployment is None or deployment["metadata"].get("uid") != owner.get("uid"):
            # getPodDeployment finds none and getPodReplicaSet skips an RS a Deployment
            # controls; getScaleController then reads the RS's own replicasets/scale
            # (its UID is the RS's): an orphaned or re-adopted RS counts its replicas.
            return own
        return deployment["metadata"]["uid"], int((deployment.get("spec") or {}).get("replicas", 1))
    plural = _SCALABLE.get((group, kind))
    if plural is None:  # getScaleController: the kind's resource has no scale subresource
        from simulator.kubeapi import KINDS

        resource = next((p for p, (k, _) in KINDS.items() if k == kind), None)
        if resource is None:
            raise SyncFailed(f'no matches for kind "{kind}" in version "{ref.get("apiVersion")}"')
        where = f"{resource}.{group}" if group else resource
        raise SyncFailed(f"{where} does not implement the scale subresource")
    found = state.get(ref.get("apiVersion", ""), plural, namespace, ref.get("name", ""))
    if found is None or found["metadata"].get("uid") != ref.get("uid"):
        return None
    return found["metadata"]["uid"], int((found.get("spec") or {}).get("replicas", 1))


def _expected_scale(state: ClusterState, namespace: str, pods: list[dict[str, Any]]) -> int:
    scales: dict[str, int] = {}
    for pod in pods:
        ref = _controller_of(pod)
        if ref is None or ref.get("uid") in scales:
            continue  # unmanaged pods are not expected (an event, not an error)
        found = _scale_of(state, namespace, ref)
        if found is None:
            raise SyncFailed(f'found no controllers for pod "{pod["metadata"]["name"]}"')
        scales[found[0]] = found[1]
    return sum(scales.values())


def _scaled(value: Any, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent(value, total, roundUp=true)."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise SyncFailed("invalid value for IntOrString: invalid type: neither int nor percentage")
    if isinstance(value, int):
        return value
    if not value.endswith("%"):
        raise SyncFailed("invalid value for IntOrString: invalid type: string is not a percentage")
    try:
        percent = int(value[:-1])
    except ValueError as exc:
        raise SyncFailed(f"invalid value for IntOrString: invalid value {value!r}") from exc
    return -(-percent * total // 100)


def _expected_and_desired(
    state: ClusterState, pdb: dict[str, Any], pods: list[dict[str, Any]]
) -> tuple[int, int]:
    """getExpectedPodCount."""
    spec = pdb.get("spec") or {}
    namespace = pdb["metadata"].get("namespace", "default")
    if spec.get("maxUnavailable") is not None:
        expected = _expected_scale(state, namespace, pods)
        return expected, max(0, expected - _scaled(spec["maxUnavailable"], expected))
    minimum = spec.get("minAvailable")
    if isinstance(minimum, int) and not isinstance(minimum, bool):
        return len(pods), minimum
    if isinstance(minimum, str):
        expected = _expected_scale(state, namespace, pods)
        return expected, _scaled(minimum, expected)
    return 0, 0  # neither: policy/v1 has no default (v1beta1 defaulted minAvailable 1)


def _condition(status: dict[str, Any], generation: int, reason: str, message: str = "") -> None:
    """apimeta.SetStatusCondition of DisruptionAllowed (component-helpers
    apps/poddisruptionbudget UpdateDisruptionAllowedCondition): the transition time moves
    only when the condition's status does."""
    wanted = {"type": "DisruptionAllowed", "status": "True" if reason == "SufficientPods" else "False",
              "reason": reason, "message": message, "observedGeneration": generation}  # fmt: skip
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "DisruptionAllowed"]
    old = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "DisruptionAllowed"), None
    )
    moved = old is None or old.get("status") != wanted["status"]
    wanted["lastTransitionTime"] = (
        _stamp(datetime.now(UTC)) if moved else old.get("lastTransitionTime")
    )
    status["conditions"] = [*conditions, wanted]


def budget_status(
    state: ClusterState, pdb: dict[str, Any], now: datetime | None = None
) -> dict[str, Any]:
    """The status the disruption controller's trySync (or its failSafe) writes."""
    now = now or datetime.now(UTC)
    namespace = pdb["metadata"].get("namespace", "default")
    generation = int(pdb["metadata"].get("generation") or 1)
    old = copy.deepcopy(pdb.get("status") or {})
    pods = [p for p in state.list("v1", "pods", namespace) if _budget_selects(pdb, p)]
    try:
        expected, desired = _expected_and_desired(state, pdb, pods)
    except SyncFailed as exc:
        old["disruptionsAllowed"] = 0
        _condition(old, int(old.get("observedGeneration") or 0), "SyncFailed", str(exc))
        return old
    # buildDisruptedPodMap: entries of live, not-terminating pods within the timeout.
    disrupted: dict[str, str] = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        when = _time((old.get("disruptedPods") or {}).get(name, ""))
        if not pod["metadata"].get("deletionTimestamp") and when and when + DELETION_TIMEOUT >= now:
            disrupted[name] = (old.get("disruptedPods") or {})[name]
    healthy = sum(
        1
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and p["metadata"]["name"] not in disrupted
        and ready(p)
    )
    allowed = healthy - desired
    if expected <= 0 or allowed <= 0:
        allowed = 0
    status = {"currentHealthy": healthy, "desiredHealthy": desired, "expectedPods": expected,
              "disruptionsAllowed": allowed, "observedGeneration": generation,
              "conditions": old.get("conditions") or []}  # fmt: skip
    if disrupted:
        status["disruptedPods"] = disrupted
    _condition(status, generation, "SufficientPods" if allowed > 0 else "InsufficientPods")
    return status


def sync_budgets(state: ClusterState, namespace: str | None = None) -> None:
    """The controller's pass over the budgets (of one namespace): a changed status is
    written (a new resourceVersion), an unchanged one left alone."""
    with state.lock:
        for pdb in state.list(*PDBS, namespace):
            status = budget_status(state, pdb)
            if status != pdb.get("status"):
                state.put(*PDBS, {**pdb, "status": status})


# -- the eviction subresource ------------------------------------------------------------------------


def _too_many(cause: str, retry_after: int) -> tuple[int, dict[str, Any]]:
    details: dict[str, Any] = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
    return 429, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                 "message": VIOLATES, "reason": "TooManyRequests", "details": details, "code": 429}  # fmt: skip


def _success() -> tuple[int, dict[str, Any]]:
    return 201, {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }


def evict(state: ClusterState, namespace: str, name: str) -> tuple[int, dict[str, Any]]:
    """EvictionREST.Create for the embedded server: (HTTP status, body); the pod is deleted
    when the eviction is granted."""
    with state.lock:
        pod = state.get("v1", "pods", namespace, name)
        if pod is None:
            return 404, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                         "message": f'pods "{name}" not found', "reason": "NotFound", "code": 404}  # fmt: skip
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if phase in ("Succeeded", "Failed", "Pending") or pod["metadata"].get("deletionTimestamp"):
            state.delete("v1", "pods", namespace, name)  # canIgnorePDB
            return _success()
        sync_budgets(state, namespace)
        budgets = [b for b in state.list(*PDBS, namespace) if _budget_selects(b, pod)]
        if len(budgets) > 1:
            return 500, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                         "message": MORE_THAN_ONE, "code": 500}  # fmt: skip
        if budgets:
            pdb = budgets[0]
            status = pdb.get("status") or {}
            spec = pdb.get("spec") or {}
            unready_allowed = not ready(pod) and (
                spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow"
                or status.get("currentHealthy", 0) >= status.get("desiredHealthy", 0) > 0
            )
            if not unready_allowed:
                refused = _check_and_decrement(state, pdb, name)
                if refused is not None:
                    return refused
        state.delete("v1", "pods", namespace, name)
        return _success()


def _check_and_decrement(
    state: ClusterState, pdb: dict[str, Any], pod_name: str
) -> tuple[int, dict[str, Any]] | None:
    """eviction.go checkAndDecrement: a refusal, or None with the disruption taken."""
    status = copy.deepcopy(pdb.get("status") or {})
    meta = pdb["metadata"]
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 1):
        return _too_many(
            f"The disruption budget {meta['name']} is still being processed by the server.", 10
        )
    allowed = int(status.get("disruptionsAllowed") or 0)
    if allowed < 0 or len(status.get("disruptedPods") or {}) > MAX_DISRUPTED_PODS:
        why = "pdb disruptions allowed is negative" if allowed < 0 else (
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller")  # fmt: skip
        # errors.NewForbidden(policy.Resource("poddisruptionbudget"), ...): singular.
        return 403, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                     "message": f'poddisruptionbudget.policy "{meta["name"]}" is forbidden: {why}',
                     "reason": "Forbidden", "code": 403,
                     "details": {"name": meta["name"], "group": "policy",
                                 "kind": "poddisruptionbudget"}}  # fmt: skip
    if allowed == 0:
        return _too_many(
            f"The disruption budget {meta['name']} needs {status.get('desiredHealthy', 0)} "
            f"healthy pods and has {status.get('currentHealthy', 0)} currently",
            0,
        )
    status["disruptionsAllowed"] = allowed - 1
    if allowed - 1 == 0:
        _condition(status, int(status.get("observedGeneration") or 0), "InsufficientPods")
    status.setdefault("disruptedPods", {})[pod_name] = _stamp(datetime.now(UTC))
    state.put(*PDBS, {**pdb, "status": status})
    return None
