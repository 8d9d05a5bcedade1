"""Each lab host's own filesystem view: a per-host folder mounted over ``/etc`` and
``/usr/local`` (bubblewrap, the sandbox Flatpak uses) for every shell the host runs, and
kept equal to the host model's files.

Why a view and not only the model's ``cat``/``tee``: a real program writes files itself.
Ansible's modules are Python (``copy`` writes ``/etc/modprobe.d/irdma.conf`` with
``open()`` and ``rename()``), OpenSSH's ``sftp-server`` receives files, coreutils'
``chmod``/``rm``/``dd`` act on paths; none of that goes through a tool the lab answers. So
the host's files are real files in a folder of its own, seen at their real paths inside a
mount namespace, and the model stays the one truth the rest of the lab reads:

- ``push`` before a shell starts and after each tool call the model answers: what the model
  holds under ``/etc`` and ``/usr/local`` (and the files it synthesizes there, os-release and
  machine-id) is written into the folder;
- ``pull`` after a shell ends and before each tool call: what a real program wrote, renamed
  or removed there goes into the model (``host.files``), so the wizard's own reads (its
  ``cat``, ``systemctl``, the modprobe model reading modprobe.d) see it.

Why bubblewrap rather than a chroot or an overlay: a chroot needs a whole root tree per
host (the machine's python3 and libraries copied or bind-mounted piece by piece), an
overlay mount over ``/etc`` cannot sit on every filesystem the lab's temp folder may be
on; ``bwrap --ro-bind / /`` gives the machine's programs read-only and only the host's
folders writable, so nothing a host's shell does can change this machine (the shell
still runs as ``nobody`` when the lab runs as root: /proc and /sys stay the machine's,
read-only to it; their host-facing files are the model's, answered by the tools).

What the folder starts with: the few files of the machine's ``/etc`` that a dynamically
linked program and Python's ``pwd`` need (the loader cache, passwd, group, nsswitch), and
the empty directories a RHEL or Ubuntu host has (modprobe.d, modules-load.d,
systemd/system, NetworkManager/system-connections, dracut.conf.d, /usr/local/sbin); those
are the OS image, not the model's, and are never pulled into it.

What the view does not model (a pass in the lab says nothing about these on a real host):

- sudo: the lab's is a shim that resets the environment as sudoers' env_reset does
  (simulator/shell.py) but has no sudoers file, so no password, ``requiretty``,
  ``secure_path`` or per-command rule is checked; every SSH user may become root.
- The SSH session: the lab's sshd hands a command's output back when it ends, not as it
  comes, so a client that waits for output before it sends stdin (Ansible's become with
  pipelining waits for BECOME-SUCCESS) times out here; the exported play is tested without
  pipelining, as Ansible's default is.
- systemd: ``daemon-reload`` does nothing, unit files are never parsed (syntax,
  ``[Install]``), and no unit is started until the lab's boot runs the enabled oneshots.
- Packages: dnf, rpm, apt-get, dpkg-query and dracut are the model's answers: no
  repositories, no locks, no conffile prompts, no ``/boot``.
- Only ``/etc``, ``/usr/local`` and the home are the host's; ``/var``, ``/tmp``, ``/boot``
  and ``/lib/modules`` are this machine's, read-only; ``/proc`` and ``/sys`` are this
  machine's too, their host-facing files answered by the tools alone.
- SELinux: no labels, so a ``copy``'s rename into ``/usr/local/sbin`` on an enforcing
  RHEL host is not checked.
- The remote Python is this machine's (Debian's 3.11), not RHEL 9's 3.9 or Ubuntu's 3.10.
- Users: every shell runs as one user (``nobody`` when the lab runs as root) whatever the
  SSH user, with the home as root's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from simulator.host.model import OS_RELEASE

if TYPE_CHECKING:
    from simulator.host import LabHost

BWRAP = "/usr/bin/bwrap"
# The host's own directories (their content is the model's); everything else of the view is
# the machine's, read-only. /var/lib holds what the exported scripts keep between runs
# (apply-qos.sh's capture in /var/lib/gpu-node-wizard, which rollback-qos.sh reads); the
# machine's own /var/lib is hidden, which no program the lab runs for real reads.
MOUNTED = ("/etc", "/usr/local", "/var/lib")
_BASE_FILES = ("ld.so.cache", "ld.so.conf", "passwd", "group", "nsswitch.conf", "hosts",
               "host.conf", "localtime")  # fmt: skip
_BASE_DIRS = ("etc/ld.so.conf.d",)
_OS_DIRS = ("etc/modprobe.d", "etc/modules-load.d", "etc/systemd/system",
            "etc/NetworkManager/system-connections", "etc/dracut.conf.d",
            "etc/systemd/network", "usr/local/bin", "usr/local/sbin", "usr/local/lib",
            "var/lib/gpu-node-wizard")  # fmt: skip
# Files the model answers itself (simulator/host/files.py _read), written for real programs
# to read; a write to them is not taken back (the model's are fixed per host).
_SYNTHESIZED = ("/etc/os-release", "/etc/machine-id")
_NOBODY = 65534


def bwrap_available() -> bool:
    """Whether bubblewrap is here and can make a mount namespace (a container may refuse)."""
    return os.access(BWRAP, os.X_OK)


@dataclass
class _Seen:
    """What the folder and the model last agreed a file was."""

    content: str
    stat: tuple[int, int, int]  # st_mtime_ns, st_size, st_ino: changed on disk when it differs


@dataclass
class HostRoot:
    """The per-host folder behind one host's ``/etc`` and ``/usr/local``."""

    host: LabHost
    folder: Path
    drop: bool  # the lab runs as root: the host's shell is nobody, who must own the folder
    seen: dict[str, _Seen] = field(default_factory=dict)
    _base: set[str] = field(default_factory=set)

    def create(self) -> None:
        self.folder.mkdir(mode=0o755)
        for directory in (*_BASE_DIRS, *_OS_DIRS):
            (self.folder / directory).mkdir(parents=True, exist_ok=True)
        for name in _BASE_FILES:
            source = Path("/etc") / name
            if source.is_file():
                shutil.copy2(source, self.folder / "etc" / name, follow_symlinks=True)
                self._base.add(f"/etc/{name}")
        conf_d = Path("/etc/ld.so.conf.d")
        if conf_d.is_dir():
            for entry in conf_d.iterdir():
                if entry.is_file():
                    shutil.copy2(entry, self.folder / "etc/ld.so.conf.d" / entry.name)
                    self._base.add(f"/etc/ld.so.conf.d/{entry.name}")
        if self.drop:
            for dirpath, _dirnames, filenames in os.walk(self.folder):
                os.chown(dirpath, _NOBODY, _NOBODY)
                for name in filenames:
                    os.chown(os.path.join(dirpath, name), _NOBODY, _NOBODY)
        self.push()

    def bwrap_argv(self, home: Path) -> list[str]:
        """bwrap's options: the machine read-only (the lab's tools and socket with it), the
        host's folders over /etc and /usr/local and the user's home writable, /dev as is.
        CAP_SETUID/SETGID stay for the lab's launcher, which then drops to nobody."""
        argv = [BWRAP, "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev"]
        for mount in MOUNTED:
            argv += ["--bind", str(self.folder / mount.lstrip("/")), mount]
        # The home is root's too (the lab's SSH user): `echo ~root` names it, as Ansible
        # asks for its temporary folder.
        argv += ["--bind", str(home), str(home), "--bind", str(home), "/root", "--die-with-parent"]
        # The shell in a session (and process group) of its own: a signal to it (a kill
        # test's SIGHUP) reaches the shell and its children, not bwrap, which waits and
        # hands back the shell's exit status (LabShell.process_group).
        argv.append("--new-session")
        if self.drop:
            argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        return [*argv, "--"]

    # -- model <-> folder ----------------------------------------------------------------------

    def _disk(self, path: str) -> Path:
        return self.folder / path.lstrip("/")

    def _wanted(self) -> dict[str, str]:
        """What the model says the mounted directories hold."""
        wanted = {p: c for p, c in self.host.files.items() if p.startswith(_PREFIXES)}
        wanted["/etc/os-release"] = OS_RELEASE[self.host.state.os]
        wanted["/etc/machine-id"] = self.host.state.machine_id + "\n"
        return wanted

    def push(self) -> None:
        """The model's files into the folder (only those that changed since last agreed)."""
        wanted = self._wanted()
        for path, content in wanted.items():
            seen = self.seen.get(path)
            if seen is not None and seen.content == content:
                continue
            disk = self._disk(path)
            if not disk.parent.is_dir():
                disk.parent.mkdir(parents=True, exist_ok=True)
                self._own_dirs(disk.parent)
            if disk.is_dir() and not disk.is_symlink():
                continue  # the model names a directory a real program made: it stays
            partial = disk.with_name(f".{disk.name}.gnw-lab")
            partial.write_bytes(content.encode(errors="surrogateescape"))
            if disk.exists():
                shutil.copymode(disk, partial)
            if self.drop:
                os.chown(partial, _NOBODY, _NOBODY)
            os.replace(partial, disk)
            self.seen[path] = _Seen(content, _stat(disk))
        for path in [p for p in self.seen if p not in wanted]:
            del self.seen[path]  # removed from the model: gone from the view too
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                self._disk(path).unlink()

    def pull(self) -> None:
        """What real programs changed in the folder into the model."""
        present: set[str] = set()
        for mount in MOUNTED:
            top = self.folder / mount.lstrip("/")
            for dirpath, _dirnames, filenames in os.walk(top):
                for name in filenames:
                    disk = Path(dirpath) / name
                    path = "/" + str(disk.relative_to(self.folder))
                    if path in self._base or name.endswith(".gnw-lab"):
                        continue
                    try:
                        info = _stat(disk)
                    except OSError:
                        continue
                    present.add(path)
                    seen = self.seen.get(path)
                    if seen is not None and seen.stat == info:
                        continue
                    if not disk.is_file() or disk.is_symlink():
                        continue
                    content = disk.read_bytes().decode(errors="surrogateescape")
                    self.seen[path] = _Seen(content, info)
                    if path not in _SYNTHESIZED:
                        self.host.files[path] = content
        for path in [p for p in self.seen if p not in present]:
            del self.seen[path]
            if path in _SYNTHESIZED:
                continue
            self.host.files.pop(path, None)

    def _own_dirs(self, directory: Path) -> None:
        if not self.drop:
            return
        while directory != self.folder and self.folder in directory.parents:
            os.chown(directory, _NOBODY, _NOBODY)
            directory = directory.parent


_PREFIXES = tuple(m + "/" for m in MOUNTED)


def _stat(path: Path) -> tuple[int, int, int]:
    info = path.lstat()
    return (info.st_mtime_ns, info.st_size, info.st_ino)
