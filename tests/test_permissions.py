"""State, journal, lock and report files are 0600 in 0700 folders, also when they already
existed with looser modes (issue #18)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from frontend.cli import main
from wizard.checkpoint import Checkpoint
from wizard.site import load_site


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_fresh_state_dir_root_and_site_folder_are_private(site_file, tmp_path):
    root = tmp_path / "deep" / "state"
    with Checkpoint.open(root, load_site(site_file)) as checkpoint:
        checkpoint.journal({"event": "x"})
        directory = checkpoint.directory
    assert mode(tmp_path / "deep") == 0o700  # created by the wizard: private too
    assert mode(root) == 0o700 and mode(directory) == 0o700
    for name in ("journal.jsonl", "state.json", "lock"):
        assert mode(directory / name) == 0o600, name


def test_existing_loose_folders_and_files_are_tightened(site_file, tmp_path):
    root = tmp_path / "state"
    site = load_site(site_file)
    with Checkpoint.open(root, site) as checkpoint:
        directory = checkpoint.directory
    os.chmod(root, 0o755)
    os.chmod(directory, 0o755)
    for name in ("journal.jsonl", "state.json", "lock"):
        os.chmod(directory / name, 0o644)

    with Checkpoint.open(root, site):
        pass

    assert mode(root) == 0o700 and mode(directory) == 0o700
    for name in ("journal.jsonl", "state.json", "lock"):
        assert mode(directory / name) == 0o600, name


def test_a_shared_sticky_state_root_is_not_locked_down(site_file, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # like /tmp
    with Checkpoint.open(shared, load_site(site_file)) as checkpoint:
        directory = checkpoint.directory
    assert mode(shared) == 0o1777
    assert mode(directory) == 0o700


def report(site_file: Path, state: Path, out: Path, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["report", str(site_file), "--out", str(out), "--state-dir", str(state)])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err
    return code, err


def test_report_files_are_private_and_tightened(site_file, tmp_path, capsys):
    state = tmp_path / "state"
    with Checkpoint.open(state, load_site(site_file)):
        pass
    out = tmp_path / "new" / "report"
    assert report(site_file, state, out, capsys)[0] == 0
    assert mode(out) == 0o700
    names = ("report.json", "report.md", "report.xlsx")
    assert all(mode(out / n) == 0o600 for n in names)
    for name in names:
        os.chmod(out / name, 0o644)
    assert report(site_file, state, out, capsys)[0] == 0
    assert all(mode(out / n) == 0o600 for n in names)


def test_report_out_at_a_file_or_under_a_file_is_a_usage_error(site_file, tmp_path, capsys):
    state = tmp_path / "state"
    with Checkpoint.open(state, load_site(site_file)):
        pass
    a_file = tmp_path / "a-file"
    a_file.write_text("mine")
    code, err = report(site_file, state, a_file, capsys)
    assert code == 2 and "is a file, not a folder" in err
    code, err = report(site_file, state, a_file / "sub", capsys)
    assert code == 2 and "a file is in the way" in err
    assert a_file.read_text() == "mine"


async def test_the_lab_never_tightens_a_shared_folder_it_writes_its_site_into(tmp_path):
    """`lab --write-site /tmp/s.yaml` chmod-ed /tmp to 0700 (a new user's review found it)."""
    import os
    import stat

    from simulator.lab import Lab

    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    lab = Lab(shared)
    await lab.start()
    await lab.stop()
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o1777
    own = tmp_path / "own"
    lab = Lab(own)
    await lab.start()
    await lab.stop()
    assert stat.S_IMODE(os.stat(own).st_mode) == 0o700  # a folder the lab made is private
