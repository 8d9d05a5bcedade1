"""File 2 of 3 of a new preflight check (README, "Adding a check"): the parser, its
command and its samples. In the product this is a module of wizard/facts/ (samples under
tests/facts/samples/KIND/).

`timedatectl show --property=NTPSynchronized` prints one `KEY=VALUE` line (systemd's
timedatectl(1): "show: Show the same information as status, but in machine readable
form"; NTPSynchronized is org.freedesktop.timedate1's boolean property, printed `yes`/`no`).
"""

from __future__ import annotations

from dataclasses import dataclass

from wizard.facts import Command, parser
from wizard.facts.base import Fact, ParseError, clean

KIND = "timedatectl-ntp"


@dataclass
class TimeSync(Fact):
    synchronized: bool


@parser(KIND)
def parse_timesync(text: str) -> TimeSync:
    """Whether systemd says the clock is NTP-synchronized (`synchronized`), from the
    NTPSynchronized= line of `timedatectl show`.

    (The first paragraph is what the facts contract prints for a kind it does not know.)
    """
    for line in clean(text, KIND).splitlines()[:64]:
        key, _, value = line.strip().partition("=")
        if key == "NTPSynchronized":
            if value not in ("yes", "no"):
                raise ParseError(KIND, f"NTPSynchronized={value[:20]!r}, not yes or no")
            return TimeSync(synchronized=value == "yes")
    raise ParseError(KIND, "no NTPSynchronized= line")


TIMESYNC = Command(
    ("timedatectl", "show", "--property=NTPSynchronized"), parse_timesync, note="systemd's NTP view"
)

# (output, the fact's JSON, or the ParseError's words)
SAMPLES = (
    ("NTPSynchronized=yes\n", {"synchronized": True}),
    ("NTPSynchronized=no\n", {"synchronized": False}),
    ("NTPSynchronized=maybe\n", "not yes or no"),
    ("Timezone=UTC\n", "no NTPSynchronized= line"),
)
