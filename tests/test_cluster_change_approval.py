"""A change outside the new nodes is approved by its name only (#30 point 2): typed in the
TUI's confirmation screen, or the named headless flag; never by --yes. The approvals are
typed records in the checkpoint, and the report lists them."""

from __future__ import annotations

import io

import pytest
from textual.widgets import Button, Input, Label

from frontend.headless import HeadlessFrontEnd
from frontend.tui.modals import MaintenanceScreen
from tests.conftest import run_cli
from tests.test_tui import SIZE, ModalHost
from wizard.approvals import (
    Approval,
    ClusterChange,
    pods_on_existing_nodes,
    restarted_between,
)
from wizard.engine import DecisionRequired
from wizard.events import Answer, Decision, DecisionKind
from wizard.report import cluster_changes

NAME = ClusterChange.GPU_OPERATOR_UPGRADE.value


def decision() -> Decision:
    return Decision(
        DecisionKind.CLUSTER_CHANGE,
        "gpu-operator.install",
        f"Change outside the new nodes: {NAME}",
        "cluster",
        "GPU Operator release changes more than the new nodes: ... Pods on existing nodes it "
        "restarts: gpu-operator/nvidia-driver-daemonset-00001 on gpu-h100-01.",
        confirm_text=NAME,
    )


async def test_headless_needs_the_named_flag_not_yes():
    with pytest.raises(DecisionRequired) as refused:
        await HeadlessFrontEnd(yes=True, window_open=True, out=io.StringIO()).decide(decision())
    assert f"pass --allow-cluster-change {NAME}" in str(refused.value)
    assert "nvidia-driver-daemonset-00001 on gpu-h100-01" in str(refused.value)
    other = HeadlessFrontEnd(yes=True, allow_cluster_change={"something-else"}, out=io.StringIO())
    with pytest.raises(DecisionRequired):
        await other.decide(decision())
    allowed = HeadlessFrontEnd(allow_cluster_change={NAME}, out=io.StringIO())
    reply = await allowed.decide(decision())
    assert (reply.answer, reply.typed) == (Answer.PROCEED, NAME)
    assert reply.reason == f"--allow-cluster-change {NAME}"


def test_the_flag_takes_only_known_change_names():
    result = run_cli("run", "site.yaml", "--headless", "--allow-cluster-change", "everything")
    assert result.returncode == 2
    assert "gpu-operator-upgrade" in result.stderr and "everything" in result.stderr
    assert "--allow-cluster-change" in run_cli("run", "--help").stdout


async def test_tui_confirms_only_the_typed_change_name():
    app = ModalHost(MaintenanceScreen(decision()))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        modal = app.screen
        labels = " ".join(str(w.content) for w in modal.query(Label))
        assert "Maintenance window" not in labels and "node name" not in labels
        assert f"Type the change's name ({NAME})" in labels
        confirm = modal.query_one("#confirm", Button)
        assert str(confirm.label) == "Approve change" and confirm.disabled
        assert app.focused is modal.query_one("#node-name", Input)
        await pilot.press(*"yes")
        await pilot.press("enter")
        assert app.screen is modal  # --yes is not the name
        for _ in range(3):
            await pilot.press("backspace")
        await pilot.press(*NAME)
        assert not confirm.disabled
        await pilot.press("enter")
    assert app.return_value.answer is Answer.PROCEED
    assert app.return_value.typed == NAME


def test_restarts_are_measured_by_uid_and_restart_count():
    def pod(uid, name, node, restarts=0):
        return {"metadata": {"uid": uid, "namespace": "ns", "name": name},
                "spec": {"nodeName": node},
                "status": {"containerStatuses": [{"restartCount": restarts}]}}  # fmt: skip

    before = pods_on_existing_nodes(
        [pod("1", "a", "old"), pod("2", "b", "old"), pod("3", "c", "old"), pod("4", "d", "new")],
        {"new"},
    )
    assert "4" not in before  # the new node's pods are not measured
    after = pods_on_existing_nodes(
        [pod("1", "a", "old"), pod("5", "b", "old"), pod("3", "c", "old", restarts=1)], {"new"}
    )
    assert restarted_between(before, after) == ("ns/b on old", "ns/c on old")
    assert restarted_between(before, before) == ()


def test_an_approval_round_trips_and_the_report_names_it():
    approval = Approval(ClusterChange.GPU_OPERATOR_UPGRADE, "gpu-operator.install", "cluster",
                        "ops@jump (--allow-cluster-change gpu-operator-upgrade)",
                        "2026-12-02T01:00:00Z", "changes ...", ("ns/a on h100",), ("ns/a on h100",),
                        applied=True)  # fmt: skip
    assert Approval.from_json(approval.as_json()) == approval
    text = "\n".join(cluster_changes({"cluster_changes": [approval.as_json()]}))
    assert "| gpu-operator-upgrade | gpu-operator.install | ops@jump" in text
    assert "2026-12-02T01:00:00Z | yes | ns/a on h100 |" in text
    assert "None: nothing outside" in "\n".join(cluster_changes({"cluster_changes": []}))


def test_a_damaged_approvals_slot_is_named_not_a_traceback(tmp_path):
    import json

    from wizard.checkpoint import read_state
    from wizard.errors import CheckpointError

    folder = tmp_path / "state"
    folder.mkdir(mode=0o700)
    base = {"format": 1, "site": {"name": "s", "path": None, "fingerprint": "x", "sections": {}},
            "created": "t", "updated": "t", "steps": {}, "artifacts": {}, "waivers": [],
            "identity": {"nodes": {}, "cluster": None}}  # fmt: skip
    for bad in ({"change": "everything", "step": "s", "target": "t"}, "not an object"):
        (folder / "state.json").write_text(json.dumps({**base, "approvals": [bad]}))
        with pytest.raises(CheckpointError) as damaged:
            read_state(folder)
        assert "'approvals'" in str(damaged.value)
