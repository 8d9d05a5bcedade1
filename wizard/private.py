"""Folders and files only the operator can read: 0700 folders, 0600 files.

The checkpoint, the journal and the report hold host names, addresses, command output and
the operator's answers; on a shared jump host no other user should read them. Folders and
files the wizard owns are tightened when they already exist with looser modes (an older
version, a restored backup, a ``cp -r``), not only created tight: ``mkdir(mode=...)`` and
``os.open(..., 0o600)`` do nothing to something that is already there.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


class PrivatePathError(OSError):
    """A path the wizard must own is something else (a file where a folder belongs...)."""


def private_dir(path: Path, *, tighten: bool = True) -> Path:
    """Create ``path`` (and missing parents) as 0700 folders; tighten ``path`` itself if it
    exists with group or other access and ``tighten`` is set.

    Only folders this call creates and ``path`` itself are touched: an existing parent is
    never chmod-ed. Nor is ``path`` when it is a shared folder (sticky bit, like ``/tmp``)
    or the home directory: ``--state-dir /tmp`` must not lock every other user out.
    """
    missing = []
    current = path
    while not os.path.lexists(current):
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made by a concurrent wizard
            os.mkdir(folder, DIR_MODE)
        os.chmod(folder, DIR_MODE)  # mkdir's mode is filtered by the umask
    info = os.stat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise PrivatePathError(f"{path} exists and is not a folder")
    mode = stat.S_IMODE(info.st_mode)
    shared = mode & stat.S_ISVTX or os.path.realpath(path) == os.path.realpath(Path.home())
    if tighten and mode & 0o077 and not shared:
        os.chmod(path, DIR_MODE)
    return path


def tighten_fd(fd: int) -> None:
    """An open file of the wizard's becomes 0600 whatever mode it was created with."""
    if stat.S_IMODE(os.fstat(fd).st_mode) != FILE_MODE:
        os.fchmod(fd, FILE_MODE)


def open_private(path: Path, flags: int) -> int:
    """``os.open`` for a private file: created 0600, an existing one tightened, and never
    through a symlink at the last component."""
    fd = os.open(path, flags | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), FILE_MODE)
    try:
        tighten_fd(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path``'s content with ``data``, the file 0600."""
    fd = open_private(path, os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def tighten_files(folder: Path) -> None:
    """Every regular file directly in ``folder`` (the wizard's own) becomes 0600; a file
    it cannot change (another owner's) is left to the error of whoever reads it."""
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_file(follow_symlinks=False):
                mode = stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode)
                if mode & 0o077:
                    with contextlib.suppress(OSError):
                        os.chmod(entry.path, FILE_MODE)
