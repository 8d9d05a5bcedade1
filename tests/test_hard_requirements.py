"""Issue #28 point 9: a hard requirement (containerd >= 2.0 for GPU Operator 26.7) is marked
where its check is declared, and no waiver passes it: the TUI's failed-step dialog offers
none and says why, ``--waive`` is refused with the reason, and a waiver already in a
checkpoint judges nothing (a waiver would only move the failure to the join in phase 7)."""

from __future__ import annotations

import pytest
from textual.widgets import Button, Input, Static

from frontend.cli import main
from frontend.lab_session import open_lab
from frontend.tui.app import WizardApp
from steps import build_plan
from steps.preflight import Containerd
from tests.test_tui import SIZE, screen_name, wait_for
from wizard.checkpoint import Checkpoint
from wizard.engine import Engine
from wizard.errors import WizardError

CHECK = "T00.containerd-version"


def test_the_containerd_check_declares_itself_a_hard_requirement():
    assert CHECK in Containerd.hard_requirements
    why = build_plan().hard_requirement(CHECK)
    assert why is not None and "containerd >= 2.0" in why and "phase 7" in why
    assert build_plan().hard_requirement("T11.acs") is None  # an ordinary check stays waivable


async def test_the_tui_offers_no_waiver_for_containerd_1_7_and_says_why(tmp_path):
    app = WizardApp(lambda: open_lab(("containerd-1.7",), 1, tmp_path / "state"),
                    auto_start=True)  # fmt: skip
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: screen_name(app) == "FailedStepScreen", 60)
        dialog = app.screen
        assert dialog.decision.step == "preflight.containerd"
        assert not dialog.decision.waivable
        assert not dialog.query(Input) and not dialog.query("#waive")
        assert [b.id for b in dialog.query(Button)] == ["proceed", "skip", "abort"]
        said = " ".join(str(s.content) for s in dialog.query(Static))
        assert f"No waiver: {CHECK} is a hard requirement" in said
        assert "phase 7" in said
        await pilot.press("w")  # the hidden waive key: refused, with the reason
        await pilot.pause(0.2)
        error = str(dialog.query_one("#waive-error", Static).content)
        assert error.startswith(f"not waived: {CHECK} is a hard requirement")
        assert screen_name(app) == "FailedStepScreen"


def test_waive_of_a_hard_requirement_is_refused_with_the_reason(tmp_path, capsys):
    site = tmp_path / "site.yaml"  # never read: the waiver is refused first
    code = main(["run", str(site), "--headless", "--waive", f"{CHECK}=lab machine"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"--waive {CHECK}: a hard requirement cannot be waived" in err
    assert "containerd >= 2.0" in err


async def test_a_recorded_waiver_of_a_hard_requirement_passes_nothing(tmp_path):
    from frontend.headless import HeadlessFrontEnd

    session = await open_lab(("containerd-1.7",), 1, tmp_path / "state")
    try:
        with Checkpoint.open(session.state_dir, session.site) as checkpoint:
            checkpoint.add_waiver(CHECK, "recorded before the check was declared hard")
            engine = Engine(session.site, build_plan(), checkpoint, HeadlessFrontEnd(),
                            session.services)  # fmt: skip
            summary = await engine.run(step="preflight.containerd")
    finally:
        await session.close()
        session.discard()
    failed = [f for fs in summary.findings.values() for f in fs if f.check == CHECK]
    assert failed and all(f.severity.value == "fail" and f.waived is None for f in failed)


async def test_the_engine_refuses_a_hard_waiver(tmp_path):
    session = await open_lab(("containerd-1.7",), 1, tmp_path / "state")
    try:
        with Checkpoint.open(session.state_dir, session.site) as checkpoint:
            with pytest.raises(WizardError, match="hard requirement"):
                Engine(session.site, build_plan(), checkpoint, None, session.services,
                       waivers={CHECK: "lab"})  # fmt: skip
            assert not checkpoint.waivers()
    finally:
        await session.close()
        session.discard()
