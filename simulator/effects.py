"""What the lab's hosts and cluster received that changes them, for crash tests.

``Lab(record_effects=PATH)`` appends one JSON line per changing command or API write (the
host, the command as received); with ``kill_control=PATH`` it also kills the wizard right
after each *new* distinct change (before the wizard sees the answer): the control file
holds ``{"pid": N}`` written by the test, and the lab adds the changes it has killed on.
That is the most hostile instant for a write-ahead journal: the effect happened and the
wizard never learned it. ``gpu-node-wizard lab --record-effects FILE --kill-on-effect FILE``
serves it to another process.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import threading
import time
from pathlib import Path

from simulator.host.dispatch import without_sudo
from wizard.transports.base import WRITE_FILE_SCRIPT, WRITE_VALUE_SCRIPT

_DCB_CHANGES = {"set", "add", "del", "replace", "flush"}
_SYSTEMCTL_CHANGES = {"enable", "disable", "start", "stop", "restart", "daemon-reload", "reboot"}
_ALWAYS = {"modprobe", "mkdir", "rmdir", "install", "dnf", "yum", "apt-get", "dracut",
           "update-initramfs", "tee", "rm", "mv", "reboot"}  # fmt: skip


def changes_host(command: str) -> bool:
    """Whether a command line, as a host receives it, changes the host."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return False
    argv = without_sudo(argv)
    if not argv:
        return False
    if argv[:2] == ["sh", "-c"] and len(argv) >= 3:
        if argv[2] in (WRITE_FILE_SCRIPT, WRITE_VALUE_SCRIPT):
            return True
        return changes_host(argv[2])
    tool, rest = argv[0], argv[1:]
    if tool in _ALWAYS:
        return not (tool == "modprobe" and ("-n" in rest or "--dry-run" in rest))
    if tool == "dcb":
        return bool(_DCB_CHANGES & set(rest[:3]))
    if tool == "ip":
        return rest[:2] == ["link", "set"] or (
            rest[:1] in (["addr"], ["address"]) and rest[1:2] in (["add"], ["del"])
        )
    if tool == "ethtool":
        return bool(rest) and (rest[0].startswith("--set") or rest[0] in ("-s", "-K", "-L", "-G"))
    if tool == "systemctl":
        return bool(rest) and rest[0] in _SYSTEMCTL_CHANGES
    words = [w for w in rest if not w.startswith("-") and "," not in w]
    if tool == "nmcli":  # `connection up/down ...`, `device connect/disconnect ...`
        return words[:1] in (["connection"], ["device"]) and words[1:2] in (
            ["up"],
            ["down"],
            ["modify"],
            ["add"],
            ["delete"],
            ["connect"],
            ["disconnect"],
        )
    if tool == "networkctl":
        return words[:1] in (["reconfigure"], ["reload"], ["up"], ["down"], ["renew"])
    return False


_SIGNALS = {name: getattr(signal, name) for name in ("SIGKILL", "SIGTERM", "SIGHUP", "SIGINT")}


def shape(where: str, what: str) -> str:
    """A change without its host or the values that differ per run (pod names, ports)."""
    del where
    text = re.sub(r"gnw-[a-z0-9-]+-[0-9a-f]{4,}", "gnw-<name>", what)
    return re.sub(r"\.tmp\.[A-Za-z0-9]+", ".tmp.<x>", text)


class EffectLog:
    """Append-only record of changes, and the optional killer (see the module docstring)."""

    def __init__(self, path: Path | None, kill_control: Path | None = None) -> None:
        self.path = path
        self.kill_control = kill_control
        self._lock = threading.Lock()

    def record(self, where: str, what: str) -> None:
        with self._lock:
            if self.path is not None:
                line = json.dumps({"where": where, "what": what, "t": time.time()})
                with self.path.open("a", encoding="utf-8") as handle:
                    handle.write(line + "\n")
            self._maybe_kill(where, what)

    def _maybe_kill(self, where: str, what: str) -> None:
        if self.kill_control is None:
            return
        try:
            control = json.loads(self.kill_control.read_text())
        except (OSError, ValueError):
            return
        pid = control.get("pid")
        done = control.setdefault("killed_on", [])
        key = shape(where, what)
        if not pid or key in done:
            return
        # Optional: only changes whose text holds one of ``only`` (a campaign inside one
        # change), and ``signal`` instead of SIGKILL (SIGTERM, SIGHUP, SIGINT: the stops a
        # wizard can answer).
        only = control.get("only")
        if isinstance(only, list) and not any(str(word) in what for word in only):
            return
        sig = _SIGNALS.get(str(control.get("signal") or "SIGKILL"), signal.SIGKILL)
        done.append(key)
        control["pid"] = None  # one kill per started wizard
        tmp = self.kill_control.with_suffix(".tmp")
        tmp.write_text(json.dumps(control))
        os.replace(tmp, self.kill_control)
        with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
            os.kill(int(pid), sig)
