"""The lab's temporary folders, and the sweep of those a killed lab left behind.

A demo or lab killed with SIGKILL runs no cleanup: its ``gnw-demo-*`` folder (site file,
keys, checkpoint) and its ``gnw-sh-*`` folder (the host shell's stand-ins and its Unix
socket) stayed in /tmp, one pair per kill. Each folder now names its owner (pid and start
time, wizard/transports/children.py) in ``owner.json``; the next lab to make one removes
every folder of that prefix that is the user's, carries the marker, and whose owner no
longer runs. A folder without the marker (another program's, an older version's) is
never touched.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

from wizard.transports import children

OWNER = "owner.json"


def scratch_dir(prefix: str) -> Path:
    """A new private temporary folder marked with this process; stale ones swept first."""
    sweep(prefix)
    path = Path(tempfile.mkdtemp(prefix=prefix))
    pid = os.getpid()
    (path / OWNER).write_text(json.dumps({"pid": pid, "started": children.start_time(pid)}))
    return path


def sweep(prefix: str, where: Path | None = None) -> list[Path]:
    """Remove the ``prefix`` folders in ``where`` (the temp folder) that a lab of this
    user made and whose process is gone; the folders removed."""
    removed = []
    root = where or Path(tempfile.gettempdir())
    with contextlib.suppress(OSError):
        for path in root.glob(f"{prefix}*"):
            with contextlib.suppress(OSError, ValueError, TypeError, KeyError):
                info = os.lstat(path)
                if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                    continue
                marker = path / OWNER
                if not stat.S_ISREG(os.lstat(marker).st_mode):
                    continue
                with open(marker, "rb") as handle:
                    owner = json.loads(handle.read(4096))
                if children.alive(owner["pid"], owner.get("started")):
                    continue
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
    return removed
