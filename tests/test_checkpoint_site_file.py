"""A checkpoint belongs to one site file (issue #28, point 8): `check` on a copy of a site
file (another host, the same `name:`) overwrote the real site's checkpoint, and `status` of
the real site then listed 8 failed steps and "site file changed since the checkpoint"."""

from __future__ import annotations

import json

import pytest

from frontend.cli import main
from steps import build_plan
from tests.conftest import MINIMAL_SITE
from wizard.checkpoint import Checkpoint
from wizard.errors import CheckpointError
from wizard.model import Finding, Severity, StepState
from wizard.report import checkpoint_report
from wizard.site import load_site
from wizard.status import format_status, load_status


@pytest.fixture
def real_and_copy(tmp_path):
    real = tmp_path / "real" / "site.yaml"
    copy = tmp_path / "copy" / "site.yaml"
    for path, host in ((real, "10.0.0.1"), (copy, "127.0.0.1")):
        path.parent.mkdir()
        path.write_text(MINIMAL_SITE.replace("10.0.0.1", host))
    state = tmp_path / "state"
    with Checkpoint.open(state, load_site(real)) as checkpoint:
        ok = Finding("T00.os", "T00", Severity.PASS, "RHEL 10.2")
        checkpoint.set_step("preflight.host", "gpu-1", StepState.DONE, findings=[ok])
    return real, copy, state


def test_check_of_a_copy_with_the_same_name_is_refused_and_changes_nothing(real_and_copy, capsys):
    real, copy, state = real_and_copy
    before = (state / "lab" / "state.json").read_bytes()
    code = main(["check", str(copy), "--state-dir", str(state)])
    err = capsys.readouterr().err
    assert code != 0
    assert f"belongs to the site file {real}" in err and str(copy) in err
    assert "name: lab" in err and "--state-dir" in err
    assert (state / "lab" / "state.json").read_bytes() == before  # the real site's, untouched

    plan = build_plan()
    status = load_status(state, load_site(real), plan)
    assert status.exists and not status.changed_sections
    assert [s.state for s in status.steps if s.step == "preflight.host"] == [StepState.DONE]
    told = format_status(load_status(state, load_site(copy), plan))
    assert f"belongs to the site file {real}" in told  # never the real site's steps
    assert "preflight" not in told
    with pytest.raises(CheckpointError, match="belongs to the site file"):
        checkpoint_report(state, load_site(copy), plan)
    assert main(["status", str(copy), "--state-dir", str(state), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["belongs_to_another_site_file"] and shown["steps"] == []


def test_a_site_file_that_moved_keeps_its_checkpoint(real_and_copy):
    real, _copy, state = real_and_copy
    moved = real.with_name("renamed.yaml")
    real.rename(moved)
    with Checkpoint.open(state, load_site(moved)) as checkpoint:
        assert checkpoint.step_state("preflight.host", "gpu-1") is StepState.DONE
        checkpoint.adopt_site(load_site(moved))
    data = json.loads((state / "lab" / "state.json").read_text())
    assert data["site"]["path"] == str(moved.resolve())
