"""`export --force` deletes only the regular files an earlier export wrote (issue #18).

Each case is one of the campaign's reproductions: a crafted manifest under a symlinked
folder, manifests of the wrong shape, directory entries, the operator's own folders.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from frontend.cli import main
from wizard.export import MANIFEST


@pytest.fixture
def exported(site_file: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    assert main(["export", str(site_file), "--out", str(out)]) == 0
    return out


def force(site_file: Path, out: Path, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["export", str(site_file), "--out", str(out), "--force"])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err
    return code, err


def manifest_of(out: Path) -> dict:
    return json.loads((out / MANIFEST).read_text())


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_an_entry_under_a_symlinked_folder_is_refused_and_nothing_is_deleted(
    site_file, exported, tmp_path, capsys
):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "important.txt").write_bytes(b"the operator's data\n")
    (exported / "sub").symlink_to(elsewhere)
    manifest = manifest_of(exported)
    manifest["files"]["sub/important.txt"] = {"sha256": sha(b"the operator's data\n")}
    (exported / MANIFEST).write_text(json.dumps(manifest))
    some_export_file = next(p for p in manifest["files"] if not p.startswith("sub/"))

    code, err = force(site_file, exported, capsys)

    assert code == 2
    assert "sub is a symbolic link" in err and "Nothing was deleted" in err
    assert (elsewhere / "important.txt").read_bytes() == b"the operator's data\n"
    assert (exported / some_export_file).is_file()  # validated before anything is removed


@pytest.mark.parametrize(
    ("manifest", "says"),
    [
        ([], "the top level is list"),
        ({"generator": "gpu-node-wizard 0.1.0", "files": "abc"}, "'files' is str"),
        ({"files": {}}, "no 'generator'"),
        ({"generator": "gpu-node-wizard 0.1.0", "files": {"a": "x"}}, "has no sha256"),
        ({"generator": "gpu-node-wizard 0.1.0", "files": {"a": {"sha256": "zz"}}}, "malformed"),
    ],
)
def test_a_manifest_of_the_wrong_shape_is_refused(site_file, tmp_path, capsys, manifest, says):
    out = tmp_path / "out"
    out.mkdir()
    for name in ("a", "b", "c"):
        (out / name).write_text(f"mine {name}")
    (out / MANIFEST).write_text(json.dumps(manifest))

    code, err = force(site_file, out, capsys)

    assert code == 2
    assert says in err and "was not written by gpu-node-wizard export" in err
    assert sorted(p.name for p in out.iterdir()) == sorted(["a", "b", "c", MANIFEST])


def test_a_manifest_that_is_not_json_or_not_a_file_is_refused(site_file, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST).write_bytes(b"\x00\xff not json")
    code, err = force(site_file, out, capsys)
    assert code == 2 and "cannot read the earlier" in err
    (out / MANIFEST).unlink()
    (out / MANIFEST).mkdir()
    code, err = force(site_file, out, capsys)
    assert code == 2 and f"{MANIFEST} is a folder" in err


def test_a_directory_or_symlink_entry_is_refused(site_file, exported, tmp_path, capsys):
    (exported / "mine").mkdir()
    (exported / "mine" / "keep.txt").write_text("keep")
    target = tmp_path / "target.txt"
    target.write_text("outside")
    (exported / "link.txt").symlink_to(target)
    manifest = manifest_of(exported)
    manifest["files"]["mine"] = {"sha256": "0" * 64}
    manifest["files"]["link.txt"] = {"sha256": sha(b"outside")}
    (exported / MANIFEST).write_text(json.dumps(manifest))

    code, err = force(site_file, exported, capsys)

    assert code == 2
    assert "mine: is a folder" in err and "link.txt: is a symbolic link" in err
    assert (exported / "mine" / "keep.txt").read_text() == "keep"
    assert target.read_text() == "outside" and (exported / "link.txt").is_symlink()


def test_a_file_changed_since_the_export_is_kept(site_file, exported, capsys):
    runbook = exported / "RUNBOOK.md"
    runbook.write_text(runbook.read_text() + "\nmy notes\n")
    code, err = force(site_file, exported, capsys)
    assert code == 2 and "RUNBOOK.md: changed since it was exported" in err
    assert runbook.read_text().endswith("my notes\n")


def test_the_operators_own_folders_stay_even_when_empty(site_file, exported, capsys):
    (exported / "my-empty").mkdir()
    (exported / "cluster" / "my-empty-too").mkdir()
    (exported / "cluster" / "notes.txt").write_text("mine")
    listed = set(manifest_of(exported)["files"])

    code, _ = force(site_file, exported, capsys)

    assert code == 0
    assert (exported / "my-empty").is_dir() and (exported / "cluster" / "my-empty-too").is_dir()
    assert (exported / "cluster" / "notes.txt").read_text() == "mine"
    assert set(manifest_of(exported)["files"]) == listed  # the new export is complete


def test_force_replaces_an_export_and_removes_the_folders_it_emptied(site_file, exported, capsys):
    old = exported / "nodes" / "gpu-1"
    assert old.is_dir()
    site_file.write_text(site_file.read_text().replace("name: gpu-1", "name: gpu-7"))
    code, _ = force(site_file, exported, capsys)
    assert code == 0
    assert not old.exists()  # the export made it, the export emptied it
    assert (exported / "nodes" / "gpu-7").is_dir()


def test_the_new_export_never_writes_through_a_symlinked_folder(
    site_file, exported, tmp_path, capsys
):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    site_file.write_text(site_file.read_text().replace("name: gpu-1", "name: gpu-7"))
    (exported / "nodes" / "gpu-7").symlink_to(elsewhere)  # not listed: the removal keeps it

    code, err = force(site_file, exported, capsys)

    assert code == 2 and "gpu-7 is a symbolic link" in err
    assert list(elsewhere.iterdir()) == []
    assert os.path.islink(exported / "nodes" / "gpu-7")


# -- issue #27, point 11: the new export never writes over what is not its own ------------------


def _second_node_paths(site_file: Path, exported: Path, tmp_path: Path) -> list[str]:
    """Paths a two-node export writes that the one-node export did not."""
    from tests.conftest import node_entry

    site_file.write_text(
        site_file.read_text().replace("aistor:", node_entry("gpu-2", 2) + "aistor:")
    )
    scratch = tmp_path / "scratch"
    assert main(["export", str(site_file), "--out", str(scratch)]) == 0
    new = sorted(set(manifest_of(scratch)["files"]) - set(manifest_of(exported)["files"]))
    assert new
    return new


@pytest.mark.parametrize("what", ["operator file", "hard link", "fifo"])
def test_force_never_writes_over_an_entry_the_earlier_export_did_not_write(
    site_file, exported, tmp_path, capsys, what
):
    rel = _second_node_paths(site_file, exported, tmp_path)[0]
    target = exported / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    precious = tmp_path / "precious"
    precious.write_text("the operator's own\n")
    if what == "operator file":
        target.write_text("the operator's own\n")
    elif what == "hard link":
        os.link(precious, target)
    else:
        os.mkfifo(target)
    before = manifest_of(exported)

    code, err = force(site_file, exported, capsys)

    assert code == 2, err
    assert "the earlier export did not write" in err and rel in err, err
    assert "Nothing was deleted" in err
    assert manifest_of(exported) == before, "the earlier export is untouched"
    assert precious.read_text() == "the operator's own\n"
    if what == "operator file":
        assert target.read_text() == "the operator's own\n"


def test_a_deeply_nested_manifest_is_refused_not_a_crash(site_file, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST).write_text("[" * 200_000 + "]" * 200_000)  # under the size bound
    (out / "keep.txt").write_text("the operator's\n")
    code, err = force(site_file, out, capsys)
    assert code == 2 and "cannot read the earlier" in err, (code, err)
    assert (out / "keep.txt").read_text() == "the operator's\n"
