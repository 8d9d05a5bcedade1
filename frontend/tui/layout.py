"""Responsive layout: the size classes every screen gets, for wizard.tcss.

A jump host's terminal is often 80x24. Below 100 columns a screen has the class
``-narrow`` (the main screen's sidebar collapses), below 34 rows ``-short`` (dialogs use
the whole screen and keep a minimum diff height; margins go). Set on the screens rather
than the app, so that a screen shown on its own (tests, snapshots) lays out the same.
"""

from __future__ import annotations

HORIZONTAL = [(0, "-narrow"), (100, "-normal"), (150, "-wide")]
VERTICAL = [(0, "-short"), (34, "-tall")]
