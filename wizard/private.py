"""Folders and files only the operator can read: 0700 folders, 0600 files.

The checkpoint, the journal and the report hold host names, addresses, command output and
the operator's answers; on a shared jump host no other user should read them. Folders and
files the wizard owns are tightened when they already exist with looser modes (an older
version, a restored backup, a ``cp -r``), not only created tight: ``mkdir(mode=...)`` and
``os.open(..., 0o600)`` do nothing to something that is already there.

And only what is the operator's own is used: a state folder, or a file in one, that belongs
to another local user (planted in a shared folder before the operator's first run), or
that others may write, is refused (``ForeignPathError``): its journal would receive every
host's output, its lab state would be believed.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import stat
from pathlib import Path

from wizard.errors import WizardError

DIR_MODE = 0o700
FILE_MODE = 0o600


class PrivatePathError(OSError):
    """A path the wizard must own is something else (a file where a folder belongs...)."""


class ForeignPathError(WizardError):
    """A state folder or file belongs to another user, or others may write it."""


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def check_owned(path: Path, *, folder: bool = False, info: os.stat_result | None = None) -> None:
    """Refuse ``path`` unless it belongs to the effective user and no one else may write
    it (a shared sticky folder such as /tmp may hold it, but not be it)."""
    info = info or os.lstat(path)
    if info.st_uid != os.geteuid():
        raise ForeignPathError(
            f"{path} belongs to {_owner(info.st_uid)}, not to you ({_owner(os.geteuid())}): "
            f"the wizard does not use {'a state folder' if folder else 'a state file'} another "
            "user could have planted or can read; remove it or choose another --state-dir"
        )
    if stat.S_IMODE(info.st_mode) & 0o022:
        raise ForeignPathError(
            f"{path} may be written by others (mode {stat.S_IMODE(info.st_mode):04o}): "
            f"`chmod go-w {path}` or choose another --state-dir"
        )


def private_dir(path: Path, *, tighten: bool = True) -> Path:
    """Create ``path`` (and missing parents) as 0700 folders; tighten ``path`` itself if it
    exists with group or other access and ``tighten`` is set.

    Only folders this call creates and ``path`` itself are touched: an existing parent is
    never chmod-ed. Nor is ``path`` when it is a shared folder (sticky bit, like ``/tmp``)
    or the home directory: ``--state-dir /tmp`` must not lock every other user out. With
    ``tighten`` (a state folder), an existing ``path`` of another user is refused
    (ForeignPathError): a shared sticky folder may hold the state, never be planted as it.
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
    if shared or not tighten:
        return path  # a shared one's entries only their owners replace; each is checked
    if info.st_uid != os.geteuid():
        check_owned(path, folder=True, info=info)  # another user's: refused
    if mode & 0o077:
        os.chmod(path, DIR_MODE)  # the user's own: tightened
    return path


def check_folder(path: Path) -> None:
    """A folder the wizard reads its own files from: the user's and writable by no one
    else, or a shared sticky one (whose entries only their owners replace)."""
    info = os.stat(path)
    if not stat.S_IMODE(info.st_mode) & stat.S_ISVTX:
        check_owned(path, folder=True, info=info)


def tighten_fd(fd: int) -> None:
    """An open file of the wizard's becomes 0600 whatever mode it was created with."""
    if stat.S_IMODE(os.fstat(fd).st_mode) != FILE_MODE:
        os.fchmod(fd, FILE_MODE)


def open_private(path: Path, flags: int) -> int:
    """``os.open`` for a private file: created 0600, an existing one tightened, and never
    through a symlink at the last component."""
    # O_NONBLOCK: a FIFO planted at the path must not hang the open (it is refused below).
    fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, FILE_MODE)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise PrivatePathError(f"{path} is not a regular file")
        if info.st_uid != os.geteuid():
            check_owned(path, info=info)
        os.set_blocking(fd, True)
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
    """Every regular file directly in ``folder`` (the wizard's own) becomes 0600; an entry
    of another user is refused (ForeignPathError)."""
    with os.scandir(folder) as entries:
        for entry in entries:
            info = entry.stat(follow_symlinks=False)
            if info.st_uid != os.geteuid():
                check_owned(Path(entry.path), info=info)  # another user's: refused
            if entry.is_file(follow_symlinks=False):
                mode = stat.S_IMODE(info.st_mode)
                if mode & 0o077:
                    with contextlib.suppress(OSError):
                        os.chmod(entry.path, FILE_MODE)
