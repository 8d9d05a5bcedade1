"""The pending release's rollback names the newest deployed revision: ``helm rollback``
without one rolls back to current-1 (helm pkg/action/rollback.go prepareRollback:
``previousVersion = currentRelease.Version - 1``), which after a failed upgrade is the
failed manifest. The history is helm's own ``history -o json`` shape
(pkg/cmd/history.go releaseInfo: revision, updated, status, chart, app_version,
description)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from steps.gpu_operator import install
from steps.gpu_operator.release import ReleaseState
from wizard.transports.base import CommandResult
from wizard.transports.helm import HelmError


def entry(revision, status, description=""):
    return {
        "revision": revision, "updated": "2026-12-01T22:00:00.1+00:00", "status": status,
        "chart": "gpu-operator-v26.7.0", "app_version": "v26.7.0", "description": description,
    }  # fmt: skip


FAILED_THEN_PENDING = [
    entry(1, "superseded", "Install complete"),
    entry(2, "superseded", "Upgrade complete"),
    entry(3, "failed", 'Upgrade "gpu-operator" failed: context deadline exceeded'),
    entry(4, "pending-upgrade", "Preparing upgrade"),
]


class RecordingHelm:
    """helm as the step sees it: the commands it was given, helm's answers to them."""

    def __init__(self, history):
        self.history = history
        self.commands: list[tuple[str, ...]] = []

    async def run(self, *args, on_line=None, timeout=1800):
        self.commands.append(args)
        out = json.dumps(self.history) if args[0] == "history" else ""
        return CommandResult("helm", " ".join(args), 0, out, "")


def context(helm):
    unfinished = [{"target": "helm", "command": "helm upgrade --install gpu-operator x "
                   "--namespace gpu-operator --wait"}]  # fmt: skip
    # the two calls of the StepContext protocol the rollback makes besides the helm runs
    return SimpleNamespace(
        services=SimpleNamespace(helm=helm),
        emit=lambda event: None,
        unfinished=lambda: unfinished,
        target="cluster",
    )


def test_the_newest_deployed_or_superseded_revision_is_chosen():
    assert install.last_deployed_revision(json.dumps(FAILED_THEN_PENDING)) == 2
    deployed = [entry(5, "superseded"), entry(6, "deployed"), entry(7, "pending-rollback")]
    assert install.last_deployed_revision(json.dumps(deployed)) == 6
    assert install.last_deployed_revision(json.dumps([entry(1, "failed")])) is None
    assert install.last_deployed_revision("not json") is None


async def test_a_pending_upgrade_is_rolled_back_to_that_revision_by_name():
    helm = RecordingHelm(FAILED_THEN_PENDING)
    state = ReleaseState("gpu-operator", "gpu-operator", installed=True, status="pending-upgrade")
    await install.InstallGpuOperator()._resolve_pending(context(helm), state)
    assert helm.commands[0][:2] == ("history", "gpu-operator")
    assert helm.commands[1] == (
        "rollback", "gpu-operator", "2", "--namespace", "gpu-operator", "--wait"
    )  # fmt: skip


async def test_no_revision_to_roll_back_to_is_a_clear_error_and_nothing_runs():
    helm = RecordingHelm([entry(1, "failed"), entry(2, "pending-upgrade")])
    state = ReleaseState("gpu-operator", "gpu-operator", installed=True, status="pending-upgrade")
    with pytest.raises(HelmError, match="no deployed or superseded revision"):
        await install.InstallGpuOperator()._resolve_pending(context(helm), state)
    assert [c[0] for c in helm.commands] == ["history"]


async def test_a_pending_install_is_still_uninstalled():
    helm = RecordingHelm([entry(1, "pending-install")])
    state = ReleaseState("gpu-operator", "gpu-operator", installed=True, status="pending-install")
    await install.InstallGpuOperator()._resolve_pending(context(helm), state)
    assert helm.commands == [("uninstall", "gpu-operator", "--namespace", "gpu-operator", "--wait")]
