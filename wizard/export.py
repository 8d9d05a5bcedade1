"""Dry-run export: every artifact, the runbook and a manifest, from the site file alone.

Deterministic (no timestamps, sorted output: two runs are byte-identical) and offline:
nothing here opens a socket, which a test enforces.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from wizard import __version__
from wizard.artifacts import Artifact, Target, render
from wizard.errors import ExportError
from wizard.model import GATES
from wizard.plan import Plan, Scope
from wizard.redact import Redactor
from wizard.site import Site
from wizard.transports.base import write_file_command

MANIFEST = "MANIFEST.json"
RUNBOOK = "RUNBOOK.md"


@dataclass(frozen=True)
class StepBlock:
    """What the runbook prints for one step on one target."""

    target: str | None
    commands: list[str]
    artifacts: list[Artifact]
    instructions: str
    rollback: str | None
    by_hand: str | None = None


def collect(site: Site, plan: Plan) -> tuple[list[Artifact], dict[str, list[StepBlock]]]:
    """Every artifact the plan's steps render, and the runbook blocks per step."""
    artifacts: list[Artifact] = []
    blocks: dict[str, list[StepBlock]] = {}
    for step in plan.steps():
        targets = [None] if step.scope == Scope.CLUSTER else list(site.nodes)
        step_blocks = []
        for node in targets:
            rendered = step.artifacts(site, node)
            artifacts += rendered
            step_blocks.append(
                StepBlock(
                    target=node.name if node is not None and len(site.nodes) > 1 else None,
                    commands=step.commands(site, node),
                    artifacts=rendered,
                    instructions=step.instructions(site, node),
                    rollback=step.rollback(site, node),
                    by_hand=step.by_hand(site, node),
                )
            )
        if len(site.nodes) > 1 and step.scope == Scope.NODE:
            step_blocks = _merge_identical(step_blocks)
        blocks[step.id] = step_blocks
    return artifacts, blocks


def _merge_identical(blocks: list[StepBlock]) -> list[StepBlock]:
    """One block for all nodes when every node gets the same commands and no files."""
    first = blocks[0]
    if all(
        b.commands == first.commands
        and not b.artifacts
        and b.instructions == first.instructions
        and b.rollback == first.rollback
        and b.by_hand == first.by_hand
        for b in blocks
    ):
        return [StepBlock("every node", first.commands, [], first.instructions, first.rollback,
                          first.by_hand)]  # fmt: skip
    return blocks


def kubeconfig_assignment(site: Site) -> str:
    """The value of the runbook's ``export KUBECONFIG=...``: the site's cluster.kubeconfig
    as one shell word that names the same file from any folder. ``~/`` stays the home of
    whoever follows the runbook (``"$HOME"/...``: POSIX sh does not expand a tilde after
    ``=`` in an ``export`` argument); a relative path is resolved against the site file's
    folder, as the wizard reads it, so it no longer depends on where the site file was."""
    value = site.cluster.kubeconfig
    if value.startswith("~/"):
        rest = value[2:]
        return '"$HOME"' + (f"/{shlex.quote(rest)}" if rest else "")
    return shlex.quote(str(site.resolve_path(value).absolute()))


def file_writer() -> str:
    """How the runbook's ``install -m MODE FILE PATH`` is run from the export folder: FILE
    on the standard input of the wizard's own atomic writer on the node (one remote
    command, quoted once more for the remote shell that ssh hands it to)."""
    writer = shlex.quote(shlex.join(write_file_command("PATH", "MODE")))
    return f"ssh -F ansible/ssh_config HOST {writer} < FILE"


def runbook(site: Site, plan: Plan, blocks: dict[str, list[StepBlock]]) -> str:
    return render(
        "runbook.md.j2",
        site=site,
        file_writer=file_writer(),
        kubeconfig=kubeconfig_assignment(site),
        phases=plan.phases,
        gates=GATES,
        step_blocks=blocks,
        version=__version__,
    )


def export(
    site: Site, plan: Plan, out: Path, *, force: bool = False, redactor: Redactor | None = None
) -> dict[str, str]:
    """Write the export into ``out``; return {relative path: sha256}."""
    redactor = redactor or Redactor(site.secret_values())
    artifacts, blocks = collect(site, plan)
    for extra in plan.extra_artifacts:
        artifacts += extra(site)
    artifacts.append(
        Artifact(RUNBOOK, runbook(site, plan, blocks), Target.DOCUMENT, RUNBOOK, "the runbook")
    )
    files: dict[str, Artifact] = {}
    for artifact in artifacts:
        _check_relative(artifact.path)
        if artifact.path in files:
            raise ExportError(f"two artifacts want the same path {artifact.path}")
        files[artifact.path] = artifact

    _prepare(out, force, [*files, MANIFEST])
    checksums: dict[str, str] = {}
    entries = {}
    for path in sorted(files):
        artifact = files[path]
        content = redactor.text(artifact.content).encode()
        _write(out, path, content, artifact.mode)
        digest = hashlib.sha256(content).hexdigest()
        checksums[path] = digest
        entries[path] = {
            "sha256": digest,
            "target": artifact.target.value,
            "destination": artifact.destination,
            "description": artifact.description,
        }
    manifest = {
        "generator": f"gpu-node-wizard {__version__}",
        "site": site.name,
        "site_fingerprint": site.fingerprint(),
        "files": entries,
    }
    _write(out, MANIFEST, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode(), 0o644)
    return checksums


def _check_relative(path: str) -> None:
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise ExportError(f"artifact path {path!r} escapes the export folder")


def _prepare(out: Path, force: bool, wanted: list[str]) -> None:
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise ExportError(f"{out} is not empty; choose an empty folder or pass --force")
        _remove_previous(out, wanted)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExportError(f"cannot create {out}: {exc.strerror or exc}") from None


def _write(out: Path, rel: str, content: bytes, mode: int) -> None:
    """Write one file under ``out`` without following a symlink anywhere below ``out``.

    After ``--force`` the folder may still hold the operator's own entries; a symlinked
    folder or file among them must not make the export write outside ``out``.
    """
    parent = out
    for part in PurePosixPath(rel).parts[:-1]:
        parent = parent / part
        try:
            info = os.lstat(parent)
        except FileNotFoundError:
            _mkdir(parent)
            continue
        if not stat.S_ISDIR(info.st_mode):
            raise ExportError(
                f"cannot write {rel}: {parent} is {_kind(info.st_mode)}, not a folder the "
                "export may write into"
            )
    target = out / rel
    # A new file, always: whatever is at the path now (the operator's file, a hard link
    # to one, a FIFO) is not written through or over; _remove_previous removed ours.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    try:
        fd = os.open(target, flags, 0o600)
    except FileExistsError:
        raise ExportError(
            f"cannot write {target}: it exists and is not a file the earlier export wrote; "
            "move it away and export again"
        ) from None
    except OSError as exc:
        raise ExportError(f"cannot write {target}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(content)
        os.fchmod(handle.fileno(), mode)


def _mkdir(path: Path) -> None:
    try:
        path.mkdir()
    except OSError as exc:
        raise ExportError(f"cannot create {path}: {exc.strerror or exc}") from None


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


# A manifest of a thousand nodes is a few MB; anything far larger is not one of ours.
MAX_MANIFEST_BYTES = 64 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _remove_previous(out: Path, wanted: list[str]) -> None:
    """With --force: remove the regular files an earlier export wrote, and nothing else.

    The manifest is the only authority, so it is checked before anything is deleted: it
    must be a regular file in the shape this module writes (a ``generator`` naming
    gpu-node-wizard, ``files`` mapping relative paths to their sha256). Each listed file
    must still be a regular file with the recorded hash, reached through real folders (a
    symlinked folder could point anywhere). Any doubt refuses the whole removal, so a
    crafted or damaged manifest deletes nothing. Only folders that held a removed file and
    are left empty are removed; the operator's own folders, empty or not, stay.

    The new export's paths (``wanted``) are checked first as well: one that holds an entry
    the earlier export did not write (the operator's host_vars file, once a second node
    makes its path an artifact; a hard link; a FIFO), or that is reached through anything
    but real folders, refuses the export before anything is deleted.
    """
    manifest = out / MANIFEST
    listed = _read_manifest(out, manifest)
    doomed: list[Path] = []
    problems: list[str] = []
    for rel, entry in sorted(listed.items()):
        problem = _removable(out, rel, entry)
        if problem == "missing":
            continue
        if problem:
            problems.append(f"{rel}: {problem}")
        else:
            doomed.append(out / rel)
    ours = set(doomed) | {manifest}
    for rel in sorted(set(wanted)):
        problem = _occupied(out, rel, ours)
        if problem:
            problems.append(f"{rel}: {problem}")
    if problems:
        shown = "; ".join(problems[:5]) + (
            f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        )
        raise ExportError(
            f"refusing to replace the earlier export in {out}: {shown}. Nothing was deleted; "
            "move those entries away (or choose an empty folder) and export again"
        )
    folders: set[Path] = set()
    for path in doomed:
        path.unlink()
        parent = path.parent
        while parent != out:
            folders.add(parent)
            parent = parent.parent
    manifest.unlink()
    for folder in sorted(folders, key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):  # not empty: it holds the operator's files
            folder.rmdir()


def _read_manifest(out: Path, manifest: Path) -> dict[str, dict[str, object]]:
    try:
        info = os.lstat(manifest)
    except FileNotFoundError:
        info = None
    if info is None or not stat.S_ISREG(info.st_mode):
        raise ExportError(
            f"{out} is not empty and holds no earlier export ({MANIFEST} "
            f"{'missing' if info is None else 'is ' + _kind(info.st_mode)}); refusing to "
            "overwrite it even with --force"
        )
    if info.st_size > MAX_MANIFEST_BYTES:
        raise ExportError(f"{manifest} is larger than any manifest the wizard writes; refusing")
    try:
        data = json.loads(manifest.read_bytes())
    except RecursionError:
        # The json module recurses per nesting level: a deep enough array is no manifest.
        raise ExportError(
            f"cannot read the earlier {manifest}: nested deeper than any manifest the wizard "
            "writes; refusing"
        ) from None
    except (OSError, ValueError) as exc:
        raise ExportError(f"cannot read the earlier {manifest}: {exc}; refusing") from None
    wrong = _manifest_shape_problem(data)
    if wrong:
        raise ExportError(
            f"{manifest} was not written by gpu-node-wizard export ({wrong}); refusing to "
            f"delete anything in {out} even with --force"
        )
    return data["files"]


def _manifest_shape_problem(data: object) -> str | None:
    if not isinstance(data, dict):
        return f"the top level is {type(data).__name__}, not an object"
    generator = data.get("generator")
    if not isinstance(generator, str) or not generator.startswith("gpu-node-wizard"):
        return "no 'generator': 'gpu-node-wizard ...'"
    files = data.get("files")
    if not isinstance(files, dict):
        return f"'files' is {type(files).__name__}, not an object of path -> entry"
    for rel, entry in files.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str):
            return f"the entry for {str(rel)[:80]!r} has no sha256"
        if not _SHA256.fullmatch(entry["sha256"]):
            return f"the entry for {str(rel)[:80]!r} has a malformed sha256"
    return None


def _occupied(out: Path, rel: str, ours: set[Path]) -> str | None:
    """Why the new export cannot write ``rel`` (None: its path is free or holds a file of
    the earlier export's, about to be removed)."""
    current = out
    for part in PurePosixPath(rel).parts[:-1]:
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return None
        if not stat.S_ISDIR(info.st_mode):
            return f"{current.relative_to(out)} is {_kind(info.st_mode)}, not a folder"
    target = out / rel
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return None
    if target in ours:
        return None
    links = f", with {info.st_nlink} hard links" if info.st_nlink > 1 else ""
    return (
        f"holds {_kind(info.st_mode)}{links} that the earlier export did not write (not in its "
        f"{MANIFEST} with its checksum); the export does not write over it"
    )


def _removable(out: Path, rel: str, entry: dict[str, object]) -> str | None:
    """Why ``rel`` must not be deleted (None: it may; "missing": nothing to do)."""
    pure = PurePosixPath(rel)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts or "\0" in rel:
        return "the path leaves the export folder"
    if rel == MANIFEST:
        return "the manifest lists itself"
    current = out
    for part in pure.parts[:-1]:
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            return "missing"
        if not stat.S_ISDIR(info.st_mode):
            return (
                f"{current.relative_to(out)} is {_kind(info.st_mode)}, not a folder the export made"
            )
    target = out / rel
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return "missing"
    if not stat.S_ISREG(info.st_mode):
        return f"is {_kind(info.st_mode)}; the export writes regular files only"
    digest = hashlib.sha256()
    with open(target, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    if digest.hexdigest() != entry["sha256"]:
        return "changed since it was exported (its sha256 differs from the manifest)"
    return None
