"""File 3 of 3 of a new preflight check (README, "Adding a check"): the lab's tool, keyed
by the same Command. In the product this is a function in a module of simulator/host/.

systemd-timesyncd.service(8): /run/systemd/timesync/synchronized "is touched on each
successful synchronization"; the model answers from it (a real timedatectl asks the
kernel's adjtimex; the lab has no clock of its own to ask).
"""

from __future__ import annotations

from simulator.host.dispatch import lab_tool
from simulator.host.model import Result
from tests.adding_a_check.timesync_parser import TIMESYNC

SYNCED = "/run/systemd/timesync/synchronized"


@lab_tool(TIMESYNC)
def timedatectl(host, args: list[str]) -> Result:
    if args != ["show", "--property=NTPSynchronized"]:
        return Result(stderr=f"timedatectl: the lab models only {TIMESYNC.text}\n", exit_status=1)
    return Result(f"NTPSynchronized={'yes' if SYNCED in host.files else 'no'}\n")
