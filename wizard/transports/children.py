"""Child processes that change things (ansible-playbook, helm): they die with the wizard,
and each is journaled with its pid and start time so that a resume can tell whether one
that a killed run started still lives.

A kill -9 reaches only the wizard's own pid: before, ansible-playbook ran on (parent 1)
and the resume started a second scale.yml beside it, two kubeadm joins racing. Now:

- the child asks the kernel for SIGTERM when its parent dies (prctl(2) PR_SET_PDEATHSIG,
  set between fork and exec), however the wizard dies (kill -9, SIGTERM, SIGHUP, a crash);
  ansible-playbook stops its workers on SIGTERM like on Ctrl-C;
- its pid and start time (proc(5): /proc/PID/stat field 22, clock ticks since boot) are
  in the journal next to the intent, so a pid reused by another program is not mistaken
  for it (``alive``);
- the engine waits at the start of a resume for such a child to end, and refuses to go on
  while it lives (wizard/engine/core.py, ``_wait_for_children``).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import signal
from typing import Any

from wizard import journal

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

try:
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    _prctl = _libc.prctl
except (OSError, AttributeError):  # not Linux: the journal and the resume's wait remain
    _prctl = None


def _die_with_parent(parent: int) -> None:
    """In the child, between fork and exec: SIGTERM when the wizard dies. Loaded before
    the fork (no import, no allocation here); a parent already gone ends the child now."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (proc(5), /proc/PID/stat field
    22), or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read(4096)
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ')': the fields
    # after the last ')' start with field 3.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def boot_id() -> str | None:
    """This boot's id (proc(5): /proc/sys/kernel/random/boot_id): a start time counts
    clock ticks since boot, so it identifies a process only within one boot."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def alive(pid: int, started: int | None, boot: str | None = None) -> bool:
    """True while the process that was journaled with this pid and start time (and boot,
    when journaled) runs. A zombie does not count, nor a pid reused by another process;
    nor a record without its start time (the pid alone proves nothing) or of another
    boot."""
    if not isinstance(pid, int) or pid <= 0 or started is None:
        return False
    if boot is not None and boot != boot_id():
        return False
    now = start_time(pid)
    if now is None or (started is not None and now != started):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read(4096)
        return stat[stat.rfind(b")") + 2 :][:1] != b"Z"
    except OSError:
        return False


async def spawn(argv: list[str], intent: str | None, **kwargs: Any) -> asyncio.subprocess.Process:
    """Start ``argv`` so that it dies with the wizard, and journal its pid and start time
    under ``intent`` (the effect's intent, from journal.begin)."""
    parent = os.getpid()
    process = await asyncio.create_subprocess_exec(
        *argv, preexec_fn=lambda: _die_with_parent(parent), **kwargs
    )
    journal.child(
        intent, {"pid": process.pid, "started": start_time(process.pid), "boot": boot_id()}
    )
    return process
