"""Dry-run export: every artifact, the runbook and a manifest, from the site file alone.

Deterministic (no timestamps, sorted output: two runs are byte-identical) and offline:
nothing here opens a socket, which a test enforces.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from wizard import __version__
from wizard.artifacts import Artifact, Target, render
from wizard.errors import ExportError
from wizard.model import GATES
from wizard.plan import Plan, Scope
from wizard.redact import Redactor
from wizard.site import Site

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
        for b in blocks
    ):
        return [StepBlock("every node", first.commands, [], first.instructions, first.rollback)]
    return blocks


def runbook(site: Site, plan: Plan, blocks: dict[str, list[StepBlock]]) -> str:
    return render(
        "runbook.md.j2",
        site=site,
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

    _prepare(out, force)
    checksums: dict[str, str] = {}
    entries = {}
    for path in sorted(files):
        artifact = files[path]
        content = redactor.text(artifact.content).encode()
        target = out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        os.chmod(target, artifact.mode)
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
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return checksums


def _check_relative(path: str) -> None:
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts:
        raise ExportError(f"artifact path {path!r} escapes the export folder")


def _prepare(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise ExportError(f"{out} is not empty; choose an empty folder or pass --force")
        _remove_previous(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExportError(f"cannot create {out}: {exc}") from None


def _remove_previous(out: Path) -> None:
    """With --force: remove what an earlier export wrote (listed in its manifest) only."""
    manifest = out / MANIFEST
    if not manifest.is_file():
        raise ExportError(
            f"{out} is not empty and holds no earlier export ({MANIFEST} missing); "
            "refusing to overwrite it even with --force"
        )
    try:
        listed = json.loads(manifest.read_text()).get("files", {})
    except (OSError, ValueError) as exc:
        raise ExportError(f"cannot read the earlier {manifest}: {exc}") from None
    for rel in listed:
        _check_relative(rel)
        (out / rel).unlink(missing_ok=True)
    manifest.unlink()
    # Drop folders the earlier export left empty.
    for folder in sorted((p for p in out.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(folder.iterdir()):
            shutil.rmtree(folder)
