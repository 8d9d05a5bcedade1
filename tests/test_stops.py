"""Any stop says what it left (issue #27, point 10): a signal (SIGTERM, SIGHUP, SIGINT), a
full disk or a read-only state folder in the middle of a maintenance change prints which
nodes are out of service and the command that resumes; a refused write is a clear error
(exit 2), not "this is a bug" (exit 70). Each stop is then resumed to the end.

The wizard is a real process (`gpu-node-wizard run`), the lab serves in another, and the
change is the reboot step (it waits for the node, so the stop lands mid-change)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO, served_lab

NODE = "gpu-b300-01"


def _command(site: Path, state: Path) -> list[str]:
    return [sys.executable, "-m", "frontend.cli", "run", str(site), "--headless", "--yes",
            "--maintenance-window-open", "--step", "operate.reboot", "--state-dir", str(state)]  # fmt: skip


def _start_mid_change(site: Path, state: Path) -> subprocess.Popen:
    wizard = subprocess.Popen(
        _command(site, state), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            record = json.loads((state / "lab" / "state.json").read_text())["steps"]
            if record.get("operate.reboot", {}).get(NODE, {}).get("state") == "waiting":
                return wizard
        except (OSError, ValueError):
            pass
        assert wizard.poll() is None, wizard.communicate()
        time.sleep(0.05)
    wizard.kill()
    raise AssertionError("the reboot step never recorded 'waiting'")


def _resumed(site: Path, state: Path) -> None:
    done = subprocess.run(_command(site, state), cwd=REPO, capture_output=True, text=True,
                          timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    final = json.loads((state / "lab" / "state.json").read_text())["steps"]["operate.reboot"]
    assert final[NODE]["state"] == "done"


def test_every_signal_mid_change_names_the_node_and_the_resume(tmp_path):
    site = tmp_path / "lab" / "site.yaml"
    with served_lab(site, "greenfield"):  # the node already in the cluster
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            state = tmp_path / f"state-{sig.name}"
            wizard = _start_mid_change(site, state)
            wizard.send_signal(sig)
            out, err = wizard.communicate(timeout=60)
            assert wizard.returncode == 130, (sig, out, err)
            assert f"interrupted by {sig.name}" in err or "SIGINT (Ctrl-C)" in err, err
            assert "Traceback" not in err, err
            assert f"{NODE}: mid-change in operate.reboot" in err, err
            assert f"gpu-node-wizard run {site} --state-dir {state}" in err, err
            _resumed(site, state)


def _mount_tmpfs(where: Path, size: str) -> None:
    where.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                           str(where)], capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"no tmpfs can be mounted here ({done.stderr.strip()})")


@pytest.mark.parametrize("fault", ["read-only", "full"])
def test_a_state_folder_that_refuses_writes_mid_change_is_a_clear_stop(tmp_path, fault):
    site = tmp_path / "lab" / "site.yaml"
    state = tmp_path / f"mnt-{uuid.uuid4().hex[:6]}"
    _mount_tmpfs(state, "4m")
    try:
        with served_lab(site, "greenfield"):  # the node already in the cluster
            wizard = _start_mid_change(site, state)
            if fault == "read-only":
                # The folder as it is now, read-only, over the one the wizard writes to (a
                # file system with a file open for writing cannot be remounted read-only).
                frozen = tmp_path / "frozen"
                _mount_tmpfs(frozen, "4m")
                for path in (state / "lab").iterdir():
                    (frozen / path.name).write_bytes(path.read_bytes())
                subprocess.run(["mount", "-o", "remount,ro", str(frozen)], check=True)
                subprocess.run(["mount", "--bind", str(frozen), str(state / "lab")], check=True)
            else:
                with open(state / "filler", "wb") as filler:
                    try:
                        while True:
                            filler.write(b"\0" * 65536)
                            filler.flush()
                    except OSError:
                        pass
            out, err = wizard.communicate(timeout=120)
            assert wizard.returncode == 2, (out, err)
            assert "this is a bug" not in err and "Traceback" not in err, err
            why = "Read-only file system" if fault == "read-only" else "No space left on device"
            assert f"cannot write {state / 'lab'}" in err and why in err, err
            assert f"{NODE}: mid-change in operate.reboot" in err, err
            if fault == "read-only":
                subprocess.run(["umount", str(state / "lab")], check=True)
            else:
                os.unlink(state / "filler")
            _resumed(site, state)
    finally:
        for mounted in (state / "lab", tmp_path / "frozen", state):
            subprocess.run(["umount", "-l", str(mounted)], capture_output=True)
