"""The per-site checkpoint: step states, findings, measurements, and the command journal.

Layout under ``<state dir>/<site name>/``:

- ``state.json``: the whole state, rewritten atomically (temp file, fsync, rename, fsync of
  the directory), so that a kill -9 at any instant leaves either the old or the new file,
  never a torn one. A transition that guards an effect (running, done, failed of a change or
  a measurement, blocked, waiting) is written before anything else happens. The result of a
  read-only check is group-committed: written with the next durable transition, at the end
  of its step's fan-out (``flush``), or after FLUSH_INTERVAL_S, whichever comes first. A kill
  loses at most that much read-only work, which a resume simply re-checks; on 64 nodes it
  turns 500 whole-state writes into a handful. The interval stretches with the cost of a
  write (at least SAVE_SHARE times the last one took): the state grows with the fleet, so a
  fixed interval made whole-state writes a growing share of a big check (a 10 MB state
  on 1000 nodes, rewritten every second of a run that itself grows with the fleet).
- ``journal.jsonl``: append-only, one JSON object per line (output redacted). Read-only
  commands are written after they return, flushed to the kernel per entry (a killed wizard
  loses nothing) and fsynced with every state write. An *effect* (a changing command, a
  Kubernetes API write, a helm upgrade) is written ahead: an ``intent`` entry, fsynced
  before the effect starts, then an ``outcome`` entry naming the intent. An intent without
  an outcome is an effect that may or may not have happened; a resume lists them. A line
  torn by a crash is detected on open, reported, and never merged with the next entry.
  Kept apart from ``state.json`` so that a state write does not grow with the journal.
- ``lock``: an exclusive ``flock`` held while a wizard works on the site; the file holds
  who took it (pid, host, since) so that the refusal names the holder. The kernel drops
  the lock when its holder dies, however it dies.

Every file is created 0600 and the folder 0700: the journal holds host output.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import pwd
import shlex
import socket
import stat
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import platformdirs

from wizard.approvals import Addition, Approval, ClusterChange
from wizard.errors import (
    CheckpointError,
    CheckpointMissingError,
    CheckpointWriteError,
    LockHeldError,
)
from wizard.model import Finding, Severity, StepState
from wizard.private import open_private, private_dir, tighten_files
from wizard.redact import Redactor
from wizard.site import Site
from wizard.transports import children

FORMAT = 1
APP_NAME = "gpu-node-wizard"
# The longest a read-only result waits in memory before it is written (see the docstring).
FLUSH_INTERVAL_S = 1.0
SAVE_SHARE = 20  # time-driven writes take at most ~1/20 of a run's time
# What an operator does about a write the state folder refused, by errno.
WRITE_ERRORS = {
    errno.ENOSPC: " (the disk is full: free space on it)",
    errno.EDQUOT: " (the disk quota is used up: free space or raise the quota)",
    errno.EROFS: " (the file system is read-only: remount it read-write or use --state-dir)",
    errno.EACCES: " (no permission: the folder must belong to you, see --state-dir)",
    errno.EPERM: " (not permitted: the folder must belong to you, see --state-dir)",
}


def default_state_dir() -> Path:
    """The per-user state directory (e.g. ``~/.local/state/gpu-node-wizard``)."""
    return Path(platformdirs.user_state_dir(APP_NAME))


def site_state_dir(state_dir: Path, site: Site) -> Path:
    return state_dir / site.name


def foreign_site_file(run: RunState | None, site: Site) -> str | None:
    """Why the checkpoint ``run`` is not this site file's, or None when it is."""
    return _foreign(run.site.path if run is not None else None, site)


def _foreign(recorded: str | None, site: Site) -> str | None:
    """Why a checkpoint made from the site file ``recorded`` is not this site file's.

    A checkpoint belongs to one site file: the one it was made from (its resolved path).
    Another file that is still there with the same ``name:`` (a copy with another host) is
    a different site: sharing the checkpoint would let a ``check`` of the copy overwrite the
    real site's results. A file that moved (the recorded one is gone) is the same site, and
    the checkpoint follows it (``adopt_site``)."""
    here = site.source
    if not recorded or here is None or Path(recorded) == here:
        return None
    if not Path(recorded).exists():
        return None  # moved or renamed: the same site file
    return (
        f"this checkpoint belongs to the site file {recorded}, not to {here} (both say "
        f"name: {site.name}); nothing was read or changed. Give this file a name of its own "
        f"(`name:` in {here.name}), or keep its checkpoints apart with --state-dir DIR"
    )


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new file, never half."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


START_OVER = "`run --start-over` sets it aside and starts again (the journal is kept)"
MAX_STATE_BYTES = 1 << 30  # a 1000-node state is about 10 MB
MAX_JOURNAL_LINE = 16 << 20  # one entry: a command's output is capped far below this
_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFLNK: "a symbolic link",
}


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def open_regular(path: Path) -> Any:
    """Open a checkpoint file for reading (a binary file object), only when it is a
    regular file: a FIFO must not hang the read, a link to /dev/zero must not fill the
    memory (a link is never followed)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CheckpointError(f"{path} is a symbolic link, not a file of its own") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise CheckpointError(f"{path} is {_kind(mode)}, not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _bounded_lines(handle: Any) -> Iterator[bytes | None]:
    """The file's lines, each at most MAX_JOURNAL_LINE bytes: a longer one is skipped to
    its end (yielded as None, a line that cannot be read), so a journal without newlines
    is never read into memory whole."""
    while True:
        line = handle.readline(MAX_JOURNAL_LINE)
        if not line:
            return
        if len(line) == MAX_JOURNAL_LINE and not line.endswith(b"\n"):
            while (rest := handle.readline(MAX_JOURNAL_LINE)) and not rest.endswith(b"\n"):
                pass
            yield None
            continue
        yield line


def check_entries(directory: Path, *, start_over: bool) -> None:
    """The journal and the lock are regular files, or absent: a folder, FIFO or link in
    their place is a clear error, and with ``start_over`` it is set aside."""
    for name in ("journal.jsonl", "lock"):
        path = directory / name
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISREG(mode):
            continue
        if start_over:
            os.replace(path, _aside_name(path))
            continue
        raise CheckpointError(
            f"the {'journal' if name == 'journal.jsonl' else 'lock file'} {path} is "
            f"{_kind(mode)}, not a regular file; {START_OVER.replace('the journal is kept', 'it is set aside too')}"
        )


def _aside_name(path: Path) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    return path.with_name(f"{path.name}.damaged-{stamp}-{os.urandom(2).hex()}")


def _empty_state(site: Site) -> dict[str, Any]:
    stamp = now()
    return {
        "format": FORMAT,
        "site": {
            "name": site.name,
            "path": str(site.source) if site.source else None,
            "fingerprint": site.fingerprint(),
            "sections": site.sections(),
        },
        "created": stamp,
        "updated": stamp,
        "steps": {},
        "artifacts": {},
        "waivers": [],
        "approvals": [],
        # The nodes the wizard itself cordoned and has not uncordoned yet (``CORDONS``).
        "cordons": {},
        "additions": [],
        # What the settled results describe: each node's machine and the cluster
        # (wizard/identity.py); a different machine under the same name resets its steps.
        "identity": {"nodes": {}, "cluster": None},
    }


# -- the typed run state ---------------------------------------------------------------------
#
# Every reader outside this module sees the checkpoint through these types: the JSON below
# them (``state.json``) is this module's alone (tests/test_run_state_boundary.py enforces it).

# The keys of a record's ``extra`` that the engine itself writes; the rest is the step's
# own result (``StepRecord.result``, what ``StepContext.recorded`` hands to later steps).
MAINTENANCE = "maintenance"
CORDONED = "cordoned"  # the per-record mark of earlier versions (read into ``CORDONS``)
# Top level, beside the step records: node -> the wizard's own cordon of it, written before
# the cordon and dropped only once its uncordon returned. Kept apart from the step records
# so that no record's replacement, a skip, a redo or a start over forgets a node that is
# still out of service; any step that uncordons the node clears it.
CORDONS = "cordons"
CORDON_STAGES = ("cordoning", "cordoned", "uncordoning")
EARLIER = "earlier"
SKIPPED_BY = "skipped_by"
REVERIFIED = "reverified"
VERIFIED_BOOT = "verified_boot"
ENGINE_KEYS = frozenset({MAINTENANCE, CORDONED, EARLIER, SKIPPED_BY, REVERIFIED, VERIFIED_BOOT})
# What a failed result keeps of itself when a later skip takes its place (``extra.earlier``).
EARLIER_KEYS = ("state", "message", "findings", "finished", "attempts")


@dataclass(frozen=True)
class Maintenance:
    """A maintenance change in flight (``extra.maintenance``): the stage it reached and the
    capture it is finished or rolled back from; and, read before its first effect, whether
    the node was cordoned already by someone else (then the change never uncordons it)
    and which bare pods the operator approved the deletion of by name."""

    stage: str = "confirmed"
    capture: Mapping[str, Any] = field(default_factory=dict)
    at: str | None = None  # when the change began (its capture was persisted)
    at_stage: str | None = None  # when it entered ``stage``
    # spec.unschedulable was true, and not by a cordon of the wizard's, before the change.
    cordoned_before: bool = False
    # ``namespace/name`` of each pod with no controller the operator approved to delete.
    delete_bare: tuple[str, ...] = ()

    @property
    def since(self) -> str:
        return self.at_stage or self.at or "?"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"stage": self.stage, "capture": dict(self.capture)}
        if self.at is not None:
            data["at"] = self.at
        if self.at_stage is not None:
            data["at_stage"] = self.at_stage
        if self.cordoned_before:
            data["cordoned_before"] = True
        if self.delete_bare:
            data["delete_bare"] = list(self.delete_bare)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Maintenance:
        stage, at, at_stage = data.get("stage"), data.get("at"), data.get("at_stage")
        return cls(
            stage=stage if isinstance(stage, str) else "confirmed",
            capture=dict(data.get("capture") or {}),
            at=str(at) if at is not None else None,
            at_stage=str(at_stage) if at_stage is not None else None,
            cordoned_before=data.get("cordoned_before") is True,
            delete_bare=tuple(str(p) for p in data.get("delete_bare") or ()),
        )


@dataclass(frozen=True)
class CordonMark:
    """A node the wizard cordoned and has not uncordoned (``CORDONS``): by which step, why,
    since when, and whether the cordon or the uncordon was under way when it was written
    ("cordoning" and "uncordoning" are intents: the node may or may not be cordoned, and
    is named so until the effect is known)."""

    by: str
    why: str
    since: str
    stage: str = "cordoned"

    @classmethod
    def from_json(cls, mark: Mapping[str, Any]) -> CordonMark:
        stage = str(mark.get("stage", "cordoned"))
        return cls(
            str(mark.get("by", "")),
            str(mark.get("why", "")),
            str(mark.get("since", "?")),
            stage if stage in CORDON_STAGES else "cordoned",
        )


def _cordons_raw(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The ``CORDONS`` of a state; for a checkpoint written before they existed, the marks
    its step records held (``extra.cordoned``), one per node."""
    if isinstance(state.get(CORDONS), dict):
        return state[CORDONS]
    found: dict[str, dict[str, Any]] = {}
    for step, targets in (state.get("steps") or {}).items():
        for target, record in targets.items():
            mark = (record.get("extra") or {}).get(CORDONED)
            if isinstance(mark, dict):
                found.setdefault(target, {**mark, "by": mark.get("by") or step})
    return found


@dataclass(frozen=True)
class EarlierResult:
    """A failed result a later skip took the place of (kept beside the skip)."""

    state: str
    message: str
    finished: str | None


@dataclass(frozen=True)
class StepRecord:
    """One step's record on one target, as the checkpoint holds it."""

    state: StepState = StepState.PENDING
    attempts: int = 0
    message: str = ""
    started: str | None = None
    finished: str | None = None
    findings: tuple[Finding, ...] = ()
    # name -> {"value", "unit", "labels"}, as ``StepContext.record`` measured them.
    measurements: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # The step's own result (its ``ctx.data``), what later steps read through ``needs``.
    result: Mapping[str, Any] = field(default_factory=dict)
    maintenance: Maintenance | None = None
    earlier: tuple[EarlierResult, ...] = ()
    skipped_by: str | None = None
    reverified: bool = False
    verified_boot: str | None = None
    recorded: bool = False  # False: the step never ran on the target

    @property
    def in_flight(self) -> bool:
        """A maintenance change begun (capture persisted), neither finished nor rolled back."""
        return self.maintenance is not None and self.state.value in IN_FLIGHT_STATES

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StepRecord:
        if not data:
            return _NEVER_RUN
        extra = data.get("extra") or {}
        inflight = extra.get(MAINTENANCE)
        return cls(
            state=StepState(data.get("state", StepState.PENDING.value)),
            attempts=int(data.get("attempts", 0) or 0),
            message=str(data.get("message", "")),
            started=data.get("started"),
            finished=data.get("finished"),
            findings=tuple(Finding.from_json(f) for f in data.get("findings", ())),
            measurements=dict(data.get("measurements") or {}),
            result={k: v for k, v in extra.items() if k not in ENGINE_KEYS},
            maintenance=Maintenance.from_json(inflight) if isinstance(inflight, dict) else None,
            earlier=tuple(
                EarlierResult(str(e.get("state")), str(e.get("message", "")), e.get("finished"))
                for e in extra.get(EARLIER) or ()
                if isinstance(e, dict)
            ),
            skipped_by=extra.get(SKIPPED_BY),
            reverified=bool(extra.get(REVERIFIED)),
            verified_boot=extra.get(VERIFIED_BOOT),
            recorded=True,
        )


_NEVER_RUN = StepRecord()


@dataclass(frozen=True)
class Waiver:
    """A failed check the operator waived, with the reason, when and by whom."""

    check: str
    reason: str
    at: str | None = None
    by: str | None = None

    def to_json(self) -> dict[str, str]:
        data = {"check": self.check, "reason": self.reason}
        data.update({k: v for k, v in (("at", self.at), ("by", self.by)) if v is not None})
        return data


@dataclass(frozen=True)
class SiteFile:
    """Which site file the checkpoint describes: its name, path and section digests."""

    name: str
    path: str | None
    fingerprint: str | None
    sections: Mapping[str, str]


@dataclass(frozen=True)
class RunState:
    """The whole checkpoint, typed: what ``status``, the report, the front ends and the
    exit code read (through ``wizard.runview.fold``)."""

    site: SiteFile
    created: str | None
    updated: str | None
    steps: Mapping[tuple[str, str], StepRecord]
    waivers: tuple[Waiver, ...] = ()
    approvals: tuple[Approval, ...] = ()
    # The objects made for the new nodes only (wizard/approvals.py Addition).
    additions: tuple[Addition, ...] = ()
    artifacts: Mapping[str, str] = field(default_factory=dict)
    # What the settled results describe: each node's machine and the cluster
    # (wizard/identity.py); a different machine under the same name resets its steps.
    nodes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    cluster: Mapping[str, Any] | None = None
    # node -> the wizard's own cordon of it, not yet uncordoned (``CORDONS``).
    cordons: Mapping[str, CordonMark] = field(default_factory=dict)

    def record(self, step: str, target: str) -> StepRecord:
        return self.steps.get((step, target), _NEVER_RUN)

    def in_flight(self) -> list[tuple[str, str, Maintenance]]:
        """(step, target, change) of every maintenance change in flight."""
        return [
            (step, target, record.maintenance)
            for (step, target), record in self.steps.items()
            if record.maintenance is not None and record.in_flight
        ]

    @classmethod
    def from_json(cls, state: dict[str, Any] | None) -> RunState:
        state = state or {}
        site = state.get("site") or {}
        identity = state.get("identity") or {}
        return cls(
            site=SiteFile(
                str(site.get("name", "")),
                site.get("path"),
                site.get("fingerprint"),
                dict(site.get("sections") or {}),
            ),
            created=state.get("created"),
            updated=state.get("updated"),
            steps={
                (step, target): StepRecord.from_json(record)
                for step, targets in (state.get("steps") or {}).items()
                for target, record in targets.items()
            },
            waivers=tuple(
                Waiver(w["check"], w["reason"], w.get("at"), w.get("by"))
                for w in state.get("waivers") or ()
            ),
            approvals=tuple(Approval.from_json(a) for a in state.get("approvals") or ()),
            additions=tuple(Addition.from_json(a) for a in state.get("additions") or ()),
            artifacts=dict(state.get("artifacts") or {}),
            nodes={k: dict(v) for k, v in (identity.get("nodes") or {}).items()},
            cluster=dict(identity["cluster"]) if identity.get("cluster") else None,
            cordons={
                node: CordonMark.from_json(mark)
                for node, mark in _cordons_raw(state).items()
                if isinstance(mark, dict)
            },
        )


def load_run(directory: Path) -> RunState | None:
    """The typed state of a site's checkpoint without taking the lock (for ``status``, the
    report, the TUI's start screen); None if there is none."""
    state = read_state(directory)
    return None if state is None else RunState.from_json(state)


def read_state(directory: Path) -> dict[str, Any] | None:
    """Read ``state.json`` without taking the lock (for ``status``); None if absent."""
    path = directory / "state.json"
    if directory.is_dir():
        check_entries(directory, start_over=False)  # the journal and lock are files too
    try:
        with open_regular(path) as handle:
            raw = handle.read(MAX_STATE_BYTES + 1)
    except FileNotFoundError:
        return None
    except (OSError, CheckpointError) as exc:
        raise CheckpointError(
            f"cannot read checkpoint {path}: {getattr(exc, 'strerror', None) or exc}; {START_OVER}"
        ) from None
    if len(raw) > MAX_STATE_BYTES:
        raise CheckpointError(
            f"checkpoint {path} is larger than {MAX_STATE_BYTES >> 20} MB, far more than any "
            f"site's state; {START_OVER}"
        )
    try:
        state = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        # Not JSON, not UTF-8 (UnicodeDecodeError), or nested too deep to read.
        why = "nested too deep" if isinstance(exc, RecursionError) else str(exc)[:200]
        raise CheckpointError(
            f"checkpoint {path} is not valid JSON ({why}); `run --start-over` sets it aside "
            "and starts again (the journal is kept)"
        ) from None
    problem = _shape_problem(state)
    if problem:
        raise CheckpointError(
            f"checkpoint {path} is damaged ({problem}); `run --start-over` sets it aside "
            "and starts again (the journal is kept)"
        )
    return state


_STATES = {state.value for state in StepState}
_SEVERITIES = {severity.value for severity in Severity}


def _shape_problem(state: Any) -> str | None:
    """What is wrong with a parsed state.json, in a few words; None when it can be used.

    A hand-edited or damaged file must end in a clear error, never in a traceback deep in
    the engine: every field the engine reads is checked here, once.
    """
    if not isinstance(state, dict):
        return f"the top level is {type(state).__name__}, not an object"
    if state.get("format") != FORMAT:
        return f"format {state.get('format')!r}, expected {FORMAT}"
    site = state.get("site")
    if not isinstance(site, dict) or not isinstance(site.get("sections", {}), dict):
        return "'site' is not an object with 'sections'"
    for key in ("artifacts", "identity"):
        if not isinstance(state.get(key, {}), dict):
            return f"{key!r} is not an object"
    identity = state.get("identity", {})
    if not isinstance(identity.get("nodes", {}), dict) or not all(
        isinstance(v, dict) for v in identity.get("nodes", {}).values()
    ):
        return "'identity.nodes' is not an object of objects"
    cluster = identity.get("cluster")
    if cluster is not None and not (
        isinstance(cluster, dict) and isinstance(cluster.get("node_uids", {}), dict)
    ):
        return "'identity.cluster' is not an object"
    waivers = state.get("waivers", [])
    if not isinstance(waivers, list) or not all(
        isinstance(w, dict) and isinstance(w.get("check"), str) and isinstance(w.get("reason"), str)
        for w in waivers
    ):
        return "'waivers' is not a list of {check, reason} objects"
    approvals = state.get("approvals", [])
    known = {c.value for c in ClusterChange}
    if not isinstance(approvals, list) or not all(
        isinstance(a, dict)
        and a.get("change") in known
        and isinstance(a.get("step"), str)
        and isinstance(a.get("target"), str)
        and isinstance(a.get("predicted", []), list)
        and isinstance(a.get("restarted") or [], list)
        for a in approvals
    ):
        return "'approvals' is not a list of {change, step, target} objects of known changes"
    additions = state.get("additions", [])
    if not isinstance(additions, list) or not all(
        isinstance(a, dict) and isinstance(a.get("object"), str) and isinstance(a.get("step"), str)
        for a in additions
    ):
        return "'additions' is not a list of {object, step} objects"
    steps = state.get("steps")
    if not isinstance(steps, dict):
        return "'steps' is not an object"
    for step, targets in steps.items():
        if not isinstance(targets, dict):
            return f"step {step!r} is not an object of targets"
        for target, record in targets.items():
            where = f"step {step!r} on {target!r}"
            if not isinstance(record, dict):
                return f"{where} is not an object"
            if record.get("state", "pending") not in _STATES:
                return f"{where} has state {record.get('state')!r}"
            for key, kind in (("findings", list), ("measurements", dict), ("extra", dict)):
                if not isinstance(record.get(key, kind()), kind):
                    return f"{where}: {key!r} is not a {kind.__name__}"
            for finding in record.get("findings", []):
                if not isinstance(finding, dict) or not {"check", "gate", "severity"} <= set(
                    finding
                ):
                    return f"{where}: a finding lacks check/gate/severity"
                if finding["severity"] not in _SEVERITIES:
                    return f"{where}: a finding has severity {finding['severity']!r}"
            inflight = record.get("extra", {}).get("maintenance")
            if inflight is not None and not isinstance(inflight, dict):
                return f"{where}: 'extra.maintenance' is not an object"
            if isinstance(inflight, dict):
                if not isinstance(inflight.get("capture", {}), dict):
                    return f"{where}: 'extra.maintenance.capture' is not an object"
                if not isinstance(inflight.get("stage", ""), str):
                    return f"{where}: 'extra.maintenance.stage' is not a string"
            if not isinstance(record.get("message", ""), str):
                return f"{where}: 'message' is not a string"
    return None


def set_aside(directory: Path) -> Path | None:
    """Move a damaged ``state.json`` out of the way (kept for inspection); its new name."""
    path = directory / "state.json"
    if not os.path.lexists(path):
        return None
    # A random suffix, as for the journal and lock: two set aside within one second (a
    # start over that meets another damaged file) must not overwrite the first copy.
    aside = _aside_name(path)
    while os.path.lexists(aside):
        aside = _aside_name(path)
    os.replace(path, aside)
    return aside


class Checkpoint:
    """The open, locked checkpoint of one site. Use ``Checkpoint.open`` as a context."""

    def __init__(self, directory: Path, state: dict[str, Any], lock_fd: int, redactor: Redactor):
        self.directory = directory
        # The JSON of state.json: read and written here only, through the typed methods.
        self._state = state
        state[CORDONS] = _cordons_raw(state)  # an older checkpoint's marks, kept
        self._lock_fd = lock_fd
        self.redactor = redactor
        # The command that finishes a change in flight (set by ``open``, which knows the
        # site file and state folder), for refusals such as a start over.
        self.finish = "`gpu-node-wizard run SITE`"
        self._pending = False  # read-only results not yet on disk
        self._last_save = time.monotonic()
        self._save_seconds = 0.0  # how long the last state write took
        journal_path = directory / "journal.jsonl"
        # A crash can cut the last line short: close it off so the next entry stays whole.
        self.torn_journal_bytes = _torn_tail(journal_path)
        self._journal = open(  # noqa: SIM115 - kept open for the life of the checkpoint
            open_private(journal_path, os.O_WRONLY | os.O_APPEND),
            "a",
            encoding="utf-8",
        )
        if self.torn_journal_bytes:
            self._journal.write("\n")
            self.journal(
                {
                    "event": "torn-journal-line",
                    "detail": f"the previous last line ({self.torn_journal_bytes} bytes) was cut "
                    "off by a crash; it is kept as it is and not read as an entry",
                }
            )
        self.session = os.urandom(4).hex()  # names this opening's intents
        self._intents = 0
        self.unfinished = _unfinished_intents(journal_path)

    # -- opening and closing ---------------------------------------------------------

    @classmethod
    @contextlib.contextmanager
    def open(
        cls,
        state_dir: Path,
        site: Site,
        redactor: Redactor | None = None,
        *,
        start_over: bool = False,
    ) -> Iterator[Checkpoint]:
        """Open and lock the site's checkpoint.

        A damaged ``state.json``, or one that is gone while the journal says work was done,
        is an error (never a silent fresh start): ``start_over=True`` sets the damaged file
        aside and begins again, keeping the journal.
        """
        directory = site_state_dir(state_dir, site)
        try:
            # The root too: a fresh --state-dir is 0700, an existing one is tightened (unless
            # it is a shared folder such as /tmp, see wizard/private.py).
            private_dir(state_dir)
            private_dir(directory)
        except OSError as exc:
            raise CheckpointError(
                f"cannot create state directory {directory}: {exc.strerror or exc}"
            ) from None
        check_entries(directory, start_over=start_over)
        lock_fd = _take_lock(directory)
        try:
            tighten_files(directory)
            try:
                state = read_state(directory)
            except CheckpointError:
                if not start_over:
                    raise
                set_aside(directory)
                state = None
            foreign = _foreign(((state or {}).get("site") or {}).get("path"), site)
            if foreign is not None:
                raise CheckpointError(f"{directory}: {foreign}")
            if state is not None and start_over:
                _refuse_start_over(state, finish_command(site, state_dir))
                state["steps"] = {}
                state["identity"] = {"nodes": {}, "cluster": None}
            if state is None and not start_over and _journal_has_work(directory):
                raise CheckpointMissingError(
                    f"the checkpoint {directory / 'state.json'} is missing, but the journal "
                    f"{directory / 'journal.jsonl'} records earlier work on this site. Restore "
                    "the file, or pass `--start-over` to begin again (the journal is kept)"
                )
            state = state or _empty_state(site)
            checkpoint = cls(directory, state, lock_fd, redactor or Redactor(site.secret_values()))
            checkpoint.finish = finish_command(site, state_dir)
            try:
                if start_over:
                    checkpoint.journal(
                        {"event": "start over: every step result was reset", **_kept(state)}
                    )
                if start_over or not (directory / "state.json").exists():
                    checkpoint.save()
                yield checkpoint
            finally:
                # Also on Ctrl-C: the read-only results so far are kept. A failing disk
                # must not hide the error that got us here.
                with contextlib.suppress(OSError, CheckpointWriteError):
                    checkpoint.flush()
                with contextlib.suppress(OSError):
                    checkpoint._journal.close()
        finally:
            os.close(lock_fd)  # releases the flock

    # -- state -------------------------------------------------------------------------

    def save(self) -> None:
        # Everything is redacted as it enters the state (set_step, add_waiver), so a save is
        # a plain dump: its cost does not grow with redaction work over the whole history.
        self._state["updated"] = now()
        # Compact on purpose: json's C encoder (no indent) keeps a write cheap on a big fleet;
        # `gpu-node-wizard status` is the readable view.
        started = time.monotonic()
        blob = json.dumps(self._state, sort_keys=True, separators=(",", ":"))
        with self._writing(self.directory / "state.json"):
            # The journal reaches the disk no later than the state that points past it.
            os.fsync(self._journal.fileno())
            atomic_write(self.directory / "state.json", blob.encode())
        self._pending = False
        self._last_save = time.monotonic()
        self._save_seconds = self._last_save - started

    def flush_interval(self) -> float:
        """Seconds a group-committed read-only result may wait in memory at most."""
        return max(FLUSH_INTERVAL_S, SAVE_SHARE * self._save_seconds)

    def flush(self) -> None:
        """Write group-committed read-only results now (no-op when there are none)."""
        if self._pending:
            self.save()

    def _record(self, step: str, target: str) -> dict[str, Any]:
        """The stored JSON of ``step`` on ``target`` (empty dict if never run)."""
        return self._state["steps"].get(step, {}).get(target, {})

    def record(self, step: str, target: str) -> StepRecord:
        """The record of ``step`` on ``target`` (``recorded`` False if it never ran)."""
        return StepRecord.from_json(self._record(step, target))

    def step_state(self, step: str, target: str) -> StepState:
        return StepState(self._record(step, target).get("state", StepState.PENDING))

    def run(self) -> RunState:
        """The whole state, typed (a snapshot: later writes do not change it)."""
        return RunState.from_json(self._state)

    def in_flight(self) -> list[tuple[str, str, Maintenance]]:
        """(step, target, change) of every maintenance change in flight."""
        return [
            (step, target, Maintenance.from_json(inflight))
            for step, target, inflight in _in_flight_raw(self._state)
        ]

    def changed_sections(self, site: Site) -> list[str]:
        """Site sections whose content differs from what the checkpoint was made with."""
        return changed_sections(self._state["site"].get("sections", {}), site)

    def has_results(self, target: str) -> bool:
        """Whether any step recorded a result for ``target``."""
        return any(target in targets for targets in self._state["steps"].values())

    def waivers(self) -> tuple[Waiver, ...]:
        return RunState.from_json({"waivers": self._state.get("waivers", [])}).waivers

    def drop_result(self, step: str, target: str, keys: tuple[str, ...] | list[str]) -> None:
        """Forget result keys of a record (in memory: the next transition writes it)."""
        extra = self._record(step, target).get("extra", {})
        for key in keys:
            extra.pop(key, None)

    # -- the wizard's own cordons: intent before effect, cleared by any uncordon ---------

    def cordon_of(self, node: str) -> CordonMark | None:
        """The wizard's cordon of ``node`` (None: it holds none)."""
        mark = self._state.setdefault(CORDONS, {}).get(node)
        return CordonMark.from_json(mark) if isinstance(mark, dict) else None

    def cordoning(self, node: str, by: str, why: str) -> None:
        """Written before ``by`` cordons ``node``: from here on the node is named cordoned
        (status, the report, every screen) until an uncordon of it returned."""
        self._state.setdefault(CORDONS, {})[node] = {
            "by": by,
            "why": self.redactor.text(why),
            "since": now(),
            "stage": "cordoning",
        }
        self.save()

    def cordon_held(self, node: str, why: str | None = None, *, by: str | None = None) -> None:
        """The cordon returned (or why, and for which step, the node stays cordoned)."""
        cordons = self._state.setdefault(CORDONS, {})
        mark = cordons.get(node)
        if mark is None and by is not None:  # cordoned by a run before the marks existed
            mark = cordons[node] = {"by": by, "why": "", "since": now()}
        if mark is None:
            return
        mark["stage"] = "cordoned"
        if by is not None:
            mark["by"] = by
        if why is not None:
            mark["why"] = self.redactor.text(why)
        self.save()

    def uncordoning(self, node: str) -> None:
        """Written before an uncordon of ``node``: a kill now leaves it named cordoned."""
        mark = self._state.setdefault(CORDONS, {}).get(node)
        if mark is not None:
            mark["stage"] = "uncordoning"
            self.save()

    def uncordoned(self, node: str) -> None:
        """The uncordon of ``node`` returned: whichever step cordoned it, it is in service."""
        if self._state.setdefault(CORDONS, {}).pop(node, None) is not None:
            self.save()

    def end_maintenance(self, step: str, target: str) -> None:
        """The change is over (done or failed): nothing of it is in flight any more (in
        memory: the transition that ends the step writes it)."""
        self._record(step, target).get("extra", {}).pop(MAINTENANCE, None)

    def earlier_with_failure(self, step: str, target: str) -> list[dict[str, Any]] | None:
        """The ``earlier`` results of a record that failed, with that failure added (a
        skip about to take its place keeps them); None when it did not fail."""
        before = self._record(step, target)
        if before.get("state") != StepState.FAILED.value:
            return None
        earlier = before.get("extra", {}).get(EARLIER, [])
        return [*earlier, {key: before.get(key) for key in EARLIER_KEYS}]

    def forget(self, step: str, target: str) -> bool:
        """Forget one record in memory (the caller saves); whether there was one."""
        return self._state["steps"].get(step, {}).pop(target, None) is not None

    # -- identity: which machines the results describe ----------------------------------

    def node_identity(self, name: str) -> dict[str, Any] | None:
        known = self._identity()["nodes"].get(name)
        return dict(known) if known is not None else None

    def set_node_identity(self, name: str, identity: dict[str, Any]) -> None:
        """Store a node's identity (in memory: ``save`` writes it)."""
        self._identity()["nodes"][name] = dict(identity)

    def note_boot(self, name: str, boot_id: str) -> None:
        """A step saw the node boot anew: that boot is the known one (in memory)."""
        self._identity()["nodes"].setdefault(name, {})["boot_id"] = boot_id

    def cluster_identity(self) -> dict[str, Any] | None:
        known = self._identity().get("cluster")
        return dict(known) if known is not None else None

    def set_cluster_identity(self, identity: dict[str, Any]) -> None:
        self._identity()["cluster"] = dict(identity)

    def _identity(self) -> dict[str, Any]:
        known = self._state.setdefault("identity", {"nodes": {}, "cluster": None})
        known.setdefault("nodes", {})
        return known

    def set_step(
        self,
        step: str,
        target: str,
        state: StepState,
        *,
        message: str = "",
        findings: list[Finding] | None = None,
        measurements: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
        durable: bool = True,
    ) -> None:
        """Record a transition and write it before anything else happens.

        ``durable=False`` is for the results of read-only checks: they are group-committed
        (see the module docstring), because losing one costs only a re-check.
        """
        record = self._state["steps"].setdefault(step, {}).setdefault(target, {})
        stamp = now()
        if state == StepState.RUNNING:
            record["started"] = stamp
            record["attempts"] = record.get("attempts", 0) + 1
        else:
            record["finished"] = stamp
        record["state"] = state.value
        record["message"] = self.redactor.text(message)
        if findings is not None:
            record["findings"] = self.redactor.data([f.to_json() for f in findings])
        if measurements is not None:
            record["measurements"] = self.redactor.data(measurements)
        if extra is not None:
            record.setdefault("extra", {}).update(self.redactor.data(extra))
        if durable or time.monotonic() - self._last_save >= self.flush_interval():
            self.save()
        else:
            self._pending = True

    def annotate(
        self, step: str, target: str, *, message: str, extra: dict[str, Any] | None = None
    ) -> None:
        """Record progress inside a step (its state unchanged), durably, before going on."""
        record = self._state["steps"].setdefault(step, {}).setdefault(target, {})
        record["message"] = self.redactor.text(message)
        if extra is not None:
            record.setdefault("extra", {}).update(self.redactor.data(extra))
        self.save()

    def findings(self, step: str, target: str) -> list[Finding]:
        return [Finding.from_json(f) for f in self._record(step, target).get("findings", [])]

    def reset(self, step: str, target: str | None = None) -> None:
        """Forget a step's result (for every target when ``target`` is None)."""
        if target is None:
            self._state["steps"].pop(step, None)
        else:
            self._state["steps"].get(step, {}).pop(target, None)
        self.save()

    def reset_all(self) -> None:
        """Start over: forget every step result (the journal keeps the history); refused
        while a change is in flight (its capture is what finishes or rolls it back). The
        nodes the wizard holds cordoned are kept (``CORDONS``): they are still out of
        service, and every reader keeps naming them until an uncordon."""
        _refuse_start_over(self._state, self.finish)
        self._state["steps"] = {}
        self._state["identity"] = {"nodes": {}, "cluster": None}
        self.journal({"event": "start over: every step result was reset", **_kept(self._state)})
        self.save()

    def add_waiver(self, check: str, reason: str) -> None:
        self._state["waivers"] = [w for w in self._state["waivers"] if w["check"] != check]
        self._state["waivers"].append(
            {"check": check, "reason": self.redactor.text(reason), "at": now(), "by": who_am_i()}
        )
        self.save()

    # -- approvals of changes outside the new nodes (wizard/approvals.py) -------------------

    def add_approval(self, approval: Approval) -> None:
        """Record an approved change outside the new nodes (replacing the record of the same
        change by the same step and target: its measured outcome is written later)."""
        kept = [
            a
            for a in self._state.setdefault("approvals", [])
            if (a.get("change"), a.get("step"), a.get("target"))
            != (approval.change.value, approval.step, approval.target)
        ]
        self._state["approvals"] = [*kept, self.redactor.value(approval.as_json())]
        self.save()

    def add_addition(self, addition: Addition) -> None:
        """Record an object made for the new nodes (once per object: a rerun that finds it
        in place adds nothing, and the first record's time stays)."""
        kept = self._state.setdefault("additions", [])
        if any(a.get("object") == addition.obj for a in kept):
            return
        kept.append(self.redactor.value(addition.as_json()))
        self.save()

    def approvals(self) -> tuple[Approval, ...]:
        return RunState.from_json({"approvals": self._state.get("approvals", [])}).approvals

    def record_artifacts(self, checksums: dict[str, str]) -> None:
        self._state["artifacts"].update(checksums)
        self.save()

    def adopt_site(self, site: Site) -> None:
        """Store the current site's fingerprint and section digests."""
        self._state["site"].update(
            fingerprint=site.fingerprint(),
            sections=site.sections(),
            path=str(site.source) if site.source else None,
        )
        self.save()

    @contextlib.contextmanager
    def _writing(self, path: Path) -> Iterator[None]:
        """A write the state folder refuses (a full disk, a read-only or foreign folder)
        stops the run with what happened and what to do, not as a bug: nothing that needs
        this write to be durable runs after it, and the resume starts from what is on disk."""
        try:
            yield
        except OSError as exc:
            why = WRITE_ERRORS.get(exc.errno or 0, "")
            raise CheckpointWriteError(
                f"cannot write {path}: {exc.strerror or exc}{why}. The run stopped there; "
                "once the folder takes writes again, the same command resumes from the last "
                "state written"
            ) from None

    # -- journal -----------------------------------------------------------------------

    def journal(self, entry: dict[str, Any]) -> None:
        """Append one entry (redacted) to the journal and hand it to the kernel.

        Flushed, not fsynced: a killed wizard loses nothing; the fsync rides on the next state
        write, so a fleet's hundreds of probe lines cost no disk flush each.
        """
        line = json.dumps({"at": now(), **self.redactor.data(entry)}, sort_keys=True)
        with self._writing(self.directory / "journal.jsonl"):
            self._journal.write(line + "\n")
            self._journal.flush()

    def intent(self, entry: dict[str, Any]) -> str:
        """Write an effect's intent and make it durable *before* the effect; its id.

        The entry says what is about to change (command or API write, target, step),
        redacted like every entry. Pair it with ``outcome`` once the effect returned.
        """
        self._intents += 1
        ident = f"{self.session}-{self._intents}"
        self.journal({"intent": ident, **entry})
        with self._writing(self.directory / "journal.jsonl"):
            os.fsync(self._journal.fileno())
        return ident

    def outcome(self, ident: str, entry: dict[str, Any]) -> None:
        """What became of an intent (exit status and output, or the error)."""
        self.journal({"outcome": ident, **entry})

    def child(self, ident: str, entry: dict[str, Any]) -> None:
        """The process an intent's effect runs in (pid, start time), as soon as it started."""
        self.journal({"child": ident, **entry})

    def living_children(self) -> list[dict[str, Any]]:
        """Intents without an outcome whose process (a killed run's ansible-playbook or
        helm) still runs: a second one must not start beside it."""
        return [
            entry
            for entry in self.unfinished
            if isinstance(entry.get("pid"), int)
            and children.alive(entry["pid"], entry.get("started"), entry.get("boot"))
        ]


def read_journal(directory: Path) -> tuple[list[dict[str, Any]], int]:
    """Every whole entry of a site's journal, and how many lines could not be read
    (torn by a crash, or damaged)."""
    entries: list[dict[str, Any]] = []
    bad = 0
    try:
        handle = open_regular(directory / "journal.jsonl")
    except FileNotFoundError:
        return entries, 0
    except (OSError, CheckpointError):
        return entries, 1  # not a file that can be read: counted, never a hang
    with handle:
        for raw in _bounded_lines(handle):
            try:
                entry = json.loads(raw) if raw is not None else None
            except (ValueError, RecursionError):
                bad += 1
                continue
            if isinstance(entry, dict):
                entries.append(entry)
            else:
                bad += 1
    return entries, bad


def _unfinished_intents(path: Path) -> list[dict[str, Any]]:
    """Intents with no outcome: effects that may have happened when a run was killed.

    Only the lines that can be intents or outcomes are parsed, so opening a checkpoint
    with a long journal stays cheap.
    """
    intents: dict[str, dict[str, Any]] = {}
    try:
        handle = open_regular(path)
    except (OSError, CheckpointError):
        return []  # absent, or refused on open (check_entries) before this is asked
    with handle:
        for raw in _bounded_lines(handle):
            if raw is None:
                continue
            if (
                b'"intent"' not in raw
                and b'"outcome"' not in raw
                and b'"child"' not in raw
                and b"intents-reported" not in raw
            ):
                continue
            try:
                entry = json.loads(raw)
            except (ValueError, RecursionError):
                continue  # a torn line: reported on open, never read as an entry
            if not isinstance(entry, dict):
                continue
            if isinstance(entry.get("intent"), str):
                intents[entry["intent"]] = entry
            elif isinstance(entry.get("child"), str) and entry["child"] in intents:
                started, boot = entry.get("started"), entry.get("boot")
                intents[entry["child"]].update(
                    pid=entry.get("pid"),
                    started=started if isinstance(started, int) else None,
                    boot=boot if isinstance(boot, str) else None,
                )
            elif isinstance(entry.get("outcome"), str):
                intents.pop(entry["outcome"], None)
            elif entry.get("event") == "intents-reported" and isinstance(entry.get("ids"), list):
                for ident in entry["ids"]:
                    if isinstance(ident, str):
                        intents.pop(ident, None)
    return list(intents.values())


def _torn_tail(path: Path) -> int:
    """The length of an unterminated last line (0 when the journal ends cleanly)."""
    try:
        with open_regular(path) as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            if size == 0:
                return 0
            back = min(size, 1 << 20)
            handle.seek(size - back)
            tail = handle.read(back)
    except FileNotFoundError:
        return 0
    if tail.endswith(b"\n"):
        return 0
    return len(tail) - (tail.rfind(b"\n") + 1)


def _journal_has_work(directory: Path) -> bool:
    try:
        return (directory / "journal.jsonl").stat().st_size > 0
    except FileNotFoundError:
        return False


IN_FLIGHT_STATES = (StepState.RUNNING.value, StepState.WAITING.value, StepState.FAILED.value)


def _in_flight_raw(state: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(step, target, maintenance record) of every maintenance change a checkpoint holds in
    flight: begun (its capture persisted) and neither finished nor rolled back. Such a node
    may be cordoned and half changed, whatever any other result says."""
    found = []
    for step, targets in state.get("steps", {}).items():
        for target, record in targets.items():
            inflight = record.get("extra", {}).get("maintenance")
            if isinstance(inflight, dict) and record.get("state") in IN_FLIGHT_STATES:
                found.append((step, target, inflight))
    return found


def _refuse_start_over(state: dict[str, Any], finish: str) -> None:
    """Starting over forgets every result, the persisted capture of a change in flight
    with them: the node would stay cordoned and half changed with nothing to roll it back
    from. A CheckpointError naming each change and the command that finishes it."""
    changes = _in_flight_raw(state)
    if changes:
        named = "; ".join(
            f"{step} on {target} (maintenance stage {record.get('stage', '?')})"
            for step, target, record in changes
        )
        raise CheckpointError(
            f"cannot start over: a change is in flight: {named}. Starting over would forget "
            f"the capture it is finished or rolled back from. Finish it first with {finish}, "
            "then start over"
        )


def _kept(state: dict[str, Any]) -> dict[str, Any]:
    """What a start over keeps: the nodes the wizard still holds cordoned (a start over
    forgets results, never that a node is out of service)."""
    cordoned = sorted(_cordons_raw(state))
    return {"kept_cordons": cordoned} if cordoned else {}


def finish_command(site: Site, state_dir: Path | None = None) -> str:
    """The command line that finishes (or rolls back) the changes in flight on a site."""
    where = shlex.quote(str(site.source)) if site.source else "SITE"
    extra = (
        f" --state-dir {shlex.quote(str(state_dir))}"
        if state_dir is not None and Path(state_dir) != default_state_dir()
        else ""
    )
    return (
        f"`gpu-node-wizard run {where}{extra}` (headless: add --headless --maintenance-window-open)"
    )


def out_of_service(run: RunState, site: Site) -> list[str]:
    """One line per node of the site that a stop leaves out of service: mid-change (a
    maintenance change in flight) or left cordoned by a change that did not verify."""
    names = {node.name for node in site.nodes}
    lines = []
    for step, target, change in run.in_flight():
        if target in names:
            lines.append(f"{target}: mid-change in {step} (maintenance stage {change.stage:.40})")
    flagged = {line.split(":", 1)[0] for line in lines}
    for target, mark in sorted(run.cordons.items()):
        if target in names and target not in flagged:
            lines.append(f"{target}: cordoned ({mark.by}: {mark.why[:200]})")
            flagged.add(target)
    return lines


def in_flight_elsewhere(directory: Path, site: Site) -> list[tuple[str, str, str]]:
    """(site name, step, node) of changes in flight that another checkpoint in the same
    state folder holds on this site's nodes (the site renamed: its checkpoint is another
    folder, and a fresh one must not start beside a node left half changed)."""
    names = {node.name for node in site.nodes}
    source = str(site.source) if site.source else None
    found = []
    try:
        siblings = [p for p in directory.parent.iterdir() if p != directory and p.is_dir()]
    except OSError:
        return []
    for other in sorted(siblings):
        try:
            state = read_state(other)
        except CheckpointError:
            continue  # damaged: its own commands say so
        if state is None:
            continue
        same_file = source is not None and state.get("site", {}).get("path") == source
        for step, target, _ in _in_flight_raw(state):
            if target in names or same_file:
                found.append((str(state.get("site", {}).get("name", other.name)), step, target))
    return found


def changed_sections(old: Mapping[str, str], site: Site) -> list[str]:
    """Site sections whose content differs from ``old`` (what the checkpoint was made with)."""
    new = site.sections()
    return sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))


def who_am_i() -> str:
    """user@host of the wizard's process: who waived a check or skipped a step, on record."""
    try:
        user = os.getlogin()
    except OSError:
        # No controlling terminal (a container, a service): the password database names
        # the uid ("root", not "0"); a uid without an entry is the number.
        try:
            user = pwd.getpwuid(os.getuid()).pw_name
        except KeyError:
            user = os.environ.get("USER") or str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def _take_lock(directory: Path) -> int:
    path = directory / "lock"
    try:
        fd = open_private(path, os.O_RDWR)
    except OSError as exc:
        raise CheckpointError(f"cannot open the lock file {path}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _describe_holder(path)
        os.close(fd)
        raise LockHeldError(
            f"another gpu-node-wizard is working on this site ({holder}); "
            f"wait for it to finish or stop it. Lock file: {path}"
        ) from None
    info = {"pid": os.getpid(), "host": socket.gethostname(), "since": now(), "t": time.time()}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(info).encode(), 0)
    return fd


def _describe_holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text())
        return f"pid {info['pid']} on {info['host']} since {info['since']}"
    except (OSError, ValueError, KeyError):
        return "holder unknown"
