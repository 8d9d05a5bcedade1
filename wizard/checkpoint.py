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
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import platformdirs

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


def foreign_site_file(state: dict[str, Any] | None, site: Site) -> str | None:
    """Why the checkpoint ``state`` is not this site file's, or None when it is.

    A checkpoint belongs to one site file: the one it was made from (its resolved path).
    Another file that is still there with the same ``name:`` (a copy with another host) is
    a different site: sharing the checkpoint would let a ``check`` of the copy overwrite the
    real site's results. A file that moved (the recorded one is gone) is the same site, and
    the checkpoint follows it (``adopt_site``)."""
    recorded = ((state or {}).get("site") or {}).get("path")
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
        # What the settled results describe: each node's machine and the cluster
        # (wizard/identity.py); a different machine under the same name resets its steps.
        "identity": {"nodes": {}, "cluster": None},
    }


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
        self.state = state
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
            foreign = foreign_site_file(state, site)
            if foreign is not None:
                raise CheckpointError(f"{directory}: {foreign}")
            if state is not None and start_over:
                refuse_start_over(state, finish_command(site, state_dir))
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
                    checkpoint.journal({"event": "start over: every step result was reset"})
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
        self.state["updated"] = now()
        # Compact on purpose: json's C encoder (no indent) keeps a write cheap on a big fleet;
        # `gpu-node-wizard status` is the readable view.
        started = time.monotonic()
        blob = json.dumps(self.state, sort_keys=True, separators=(",", ":"))
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

    def record(self, step: str, target: str) -> dict[str, Any]:
        """The stored record of ``step`` on ``target`` (empty dict if never run)."""
        return self.state["steps"].get(step, {}).get(target, {})

    def step_state(self, step: str, target: str) -> StepState:
        return StepState(self.record(step, target).get("state", StepState.PENDING))

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
        record = self.state["steps"].setdefault(step, {}).setdefault(target, {})
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
        record = self.state["steps"].setdefault(step, {}).setdefault(target, {})
        record["message"] = self.redactor.text(message)
        if extra is not None:
            record.setdefault("extra", {}).update(self.redactor.data(extra))
        self.save()

    def findings(self, step: str, target: str) -> list[Finding]:
        return [Finding.from_json(f) for f in self.record(step, target).get("findings", [])]

    def reset(self, step: str, target: str | None = None) -> None:
        """Forget a step's result (for every target when ``target`` is None)."""
        if target is None:
            self.state["steps"].pop(step, None)
        else:
            self.state["steps"].get(step, {}).pop(target, None)
        self.save()

    def reset_all(self) -> None:
        """Start over: forget every step result (the journal keeps the history); refused
        while a change is in flight (its capture is what finishes or rolls it back)."""
        refuse_start_over(self.state, self.finish)
        self.state["steps"] = {}
        self.state["identity"] = {"nodes": {}, "cluster": None}
        self.journal({"event": "start over: every step result was reset"})
        self.save()

    def add_waiver(self, check: str, reason: str) -> None:
        self.state["waivers"] = [w for w in self.state["waivers"] if w["check"] != check]
        self.state["waivers"].append(
            {"check": check, "reason": self.redactor.text(reason), "at": now(), "by": who_am_i()}
        )
        self.save()

    def record_artifacts(self, checksums: dict[str, str]) -> None:
        self.state["artifacts"].update(checksums)
        self.save()

    def adopt_site(self, site: Site) -> None:
        """Store the current site's fingerprint and section digests."""
        self.state["site"].update(
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


def in_flight_changes(state: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
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


def refuse_start_over(state: dict[str, Any], finish: str) -> None:
    """Starting over forgets every result, the persisted capture of a change in flight
    with them: the node would stay cordoned and half changed with nothing to roll it back
    from. A CheckpointError naming each change and the command that finishes it."""
    changes = in_flight_changes(state)
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


def out_of_service(state: dict[str, Any], site: Site) -> list[str]:
    """One line per node of the site that a stop leaves out of service: mid-change (a
    maintenance change in flight) or left cordoned by a change that did not verify."""
    names = {node.name for node in site.nodes}
    lines = []
    for step, target, inflight in in_flight_changes(state):
        if target in names:
            stage = inflight.get("stage", "confirmed")
            lines.append(f"{target}: mid-change in {step} (maintenance stage {stage!s:.40})")
    flagged = {line.split(":", 1)[0] for line in lines}
    for step, targets in state.get("steps", {}).items():
        for target, record in targets.items():
            message = str(record.get("message", ""))
            if target in names and target not in flagged and "stays cordoned" in message:
                lines.append(f"{target}: cordoned ({step}: {message[:200]})")
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
        for step, target, _ in in_flight_changes(state):
            if target in names or same_file:
                found.append((str(state.get("site", {}).get("name", other.name)), step, target))
    return found


def changed_sections(state: dict[str, Any], site: Site) -> list[str]:
    """Site sections whose content differs from what the checkpoint was made with."""
    old = state.get("site", {}).get("sections", {})
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
