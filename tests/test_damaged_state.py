"""Every damaged checkpoint, journal or lock is a clear error, and `--start-over` clears
it (issue #27, point 8): invalid UTF-8, 100k-deep nesting, a FIFO (no hang), a link to
/dev/zero (no unbounded read), a journal that is a folder, a lock that is a FIFO, a
capture that is not an object. Before: exit 70, a hang, or the OOM killer."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import MINIMAL_SITE, REPO
from wizard.checkpoint import read_journal


def _state(**record) -> bytes:
    return json.dumps({"format": 1, "site": {}, "steps": {"qos.apply": {"gpu-1": record}}}).encode()


DAMAGE = {
    "invalid utf-8": lambda d: (d / "state.json").write_bytes(
        b'{"format": 1, "site": {"\xff\xfe": 1}}'
    ),
    "100k-deep nesting": lambda d: (d / "state.json").write_bytes(b"[" * 100_000 + b"]" * 100_000),
    "state a fifo": lambda d: os.mkfifo(d / "state.json"),
    "state a link to /dev/zero": lambda d: os.symlink("/dev/zero", d / "state.json"),
    "state a folder": lambda d: (d / "state.json").mkdir(),
    "journal a folder": lambda d: (d / "journal.jsonl").mkdir(),
    "journal a fifo": lambda d: os.mkfifo(d / "journal.jsonl"),
    "journal a link to /dev/zero": lambda d: os.symlink("/dev/zero", d / "journal.jsonl"),
    "lock a fifo": lambda d: os.mkfifo(d / "lock"),
    "capture not an object": lambda d: (d / "state.json").write_bytes(
        _state(state="running", extra={"maintenance": {"stage": "applying", "capture": [1]}})
    ),
}


def _wizard(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "frontend.cli", *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_a_damaged_state_folder_is_a_clear_error_and_start_over_clears_it(tmp_path, case):
    site = tmp_path / "site.yaml"
    site.write_text(MINIMAL_SITE.replace("host: 10.0.0.1", "host: 127.0.0.1\n    ssh: {port: 9}"))
    state = tmp_path / "state"
    directory = state / "lab"
    directory.mkdir(parents=True, mode=0o700)
    DAMAGE[case](directory)
    for argv in (["status", str(site)], ["run", str(site), "--headless"],
                 ["report", str(site), "--out", str(tmp_path / "r")]):  # fmt: skip
        done = _wizard(*argv, "--state-dir", str(state))
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr and "this is a bug" not in done.stderr, done.stderr
        assert str(directory) in done.stderr and "--start-over" in done.stderr, done.stderr
    done = _wizard("run", str(site), "--headless", "--start-over", "--step", "preflight.host",
                   "--state-dir", str(state), timeout=120)  # fmt: skip
    assert done.returncode in (0, 1, 2), done.stderr
    assert "Traceback" not in done.stderr and "--start-over" not in done.stderr, done.stderr
    assert json.loads((directory / "state.json").read_text())["format"] == 1
    assert (directory / "journal.jsonl").is_file() and (directory / "lock").is_file()
    assert list(directory.glob("*.damaged-*")), "the damaged file is kept aside"
    # And the next run after it is an ordinary resume.
    again = _wizard("status", str(site), "--state-dir", str(state))
    assert again.returncode == 0, again.stderr


def test_a_journal_line_without_end_is_not_read_whole(tmp_path, monkeypatch):
    from wizard import checkpoint

    monkeypatch.setattr(checkpoint, "MAX_JOURNAL_LINE", 1024)
    directory = tmp_path / "lab"
    directory.mkdir()
    (directory / "journal.jsonl").write_bytes(b'{"a": 1}\n' + b"x" * 100_000 + b'\n{"b": 2}\n')
    entries, bad = read_journal(directory)
    assert entries == [{"a": 1}, {"b": 2}] and bad == 1


def test_two_damaged_states_set_aside_within_one_second_are_both_kept(tmp_path):
    from wizard.checkpoint import set_aside

    kept = []
    for text in ("first damaged", "second damaged"):
        (tmp_path / "state.json").write_text(text)
        kept.append(set_aside(tmp_path))
    assert kept[0] != kept[1]
    assert sorted(p.read_text() for p in kept) == ["first damaged", "second damaged"]
