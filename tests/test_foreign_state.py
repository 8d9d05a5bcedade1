"""State that is not the operator's own is refused (issue #27, point 7): a state folder or
a file in it that belongs to another local user, or that others may write; the lab's kept
state is JSON data, and a planted pickle is never loaded.

The tests run as root and make "another user" the kernel's way: chown to nobody."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from simulator import persist
from tests.conftest import MINIMAL_SITE, REPO
from wizard.private import ForeignPathError

NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


@pytest.fixture
def site(tmp_path: Path) -> Path:
    path = tmp_path / "site.yaml"
    path.write_text(MINIMAL_SITE)
    return path


def _wizard(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "frontend.cli", *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def test_a_site_folder_of_another_user_is_refused(site, tmp_path):
    state = tmp_path / "shared"
    state.mkdir(mode=0o1777)
    os.chmod(state, 0o1777)  # a sticky shared folder, like /tmp
    (state / "lab").mkdir(mode=0o700)
    os.chown(state / "lab", NOBODY, NOBODY)  # planted before the operator's first run
    for argv in (["run", str(site), "--headless"], ["check", str(site)]):
        done = _wizard(*argv, "--state-dir", str(state))
        assert done.returncode == 2, done.stderr
        assert f"{state / 'lab'} belongs to nobody (uid {NOBODY})" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


@pytest.mark.parametrize("name", ["journal.jsonl", "lock", "state.json"])
def test_a_file_of_another_user_in_the_state_folder_is_refused(site, tmp_path, name):
    state = tmp_path / "state"
    (state / "lab").mkdir(parents=True, mode=0o700)
    planted = state / "lab" / name
    planted.write_text("")
    os.chown(planted, NOBODY, NOBODY)
    done = _wizard(
        "run", str(site), "--headless", "--phase", "preflight", "--state-dir", str(state)
    )
    assert done.returncode == 2, done.stderr
    assert f"{planted} belongs to nobody" in done.stderr, done.stderr
    assert planted.read_text() == "", "nothing was written into another user's file"


def test_the_lab_never_loads_a_pickle_and_refuses_state_of_another_user(tmp_path):
    marker = tmp_path / "executed"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    (tmp_path / "lab-state.pickle").write_bytes(pickle.dumps(Payload()))
    assert persist.load(tmp_path, 1, 1, ()) is None
    assert not marker.exists(), "a planted pickle was executed"

    (tmp_path / persist.SAVED).write_text("{}")
    os.chown(tmp_path / persist.SAVED, NOBODY, NOBODY)
    with pytest.raises(ForeignPathError, match="belongs to nobody"):
        persist.load(tmp_path, 1, 1, ())
    os.chown(tmp_path / persist.SAVED, 0, 0)
    os.chmod(tmp_path / persist.SAVED, 0o666)
    with pytest.raises(ForeignPathError, match="may be written by others"):
        persist.load(tmp_path, 1, 1, ())


def test_saved_lab_data_rebuilds_only_the_labs_own_classes():
    with pytest.raises(TypeError, match="not one of the lab's classes"):
        persist.from_data({"object": "subprocess:Popen", "attrs": {}})
    with pytest.raises(TypeError, match="not one of the lab's classes"):
        persist.from_data({"object": "simulator.persist:os", "attrs": {}})
    with pytest.raises(TypeError, match="cannot save"):
        persist.to_data(object())
    value = {("a", "b"): {1, 2}, "k": [b"\x00", (1, None)]}
    assert persist.from_data(persist.to_data(value)) == value
