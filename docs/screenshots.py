"""Regenerate the README's screenshots from a demo run: docs/main.svg (the main screen once
the run is through) and docs/measurements.svg (the measurements charts).

    python docs/screenshots.py [--out docs]

The TUI is driven through the whole demo against the embedded lab, as an operator would
(approving each review, confirming each manual step, typing the node name at the
maintenance window), with Textual's Pilot; the screens are saved with
``App.export_screenshot`` (SVG). About a minute; nothing outside a temporary folder is
touched.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from textual.widgets import Input  # noqa: E402

from frontend.lab_session import open_lab  # noqa: E402
from frontend.tui.app import WizardApp  # noqa: E402

MAIN_SIZE = (120, 36)
MEASUREMENTS_SIZE = (160, 48)


def _ready(app: WizardApp, name: str) -> bool:
    return type(app.screen).__name__ == name and app.screen.is_mounted


async def _until(pilot, condition, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit("the demo did not get there in time")
        await pilot.pause(0.1)


async def _run_through(app: WizardApp, pilot, timeout: float = 300) -> None:
    """Answer every decision the demo asks for until the run is finished."""
    deadline = time.monotonic() + timeout
    while not app.finished:
        if time.monotonic() > deadline:
            raise SystemExit("the demo did not finish in time")
        if _ready(app, "ReviewScreen"):
            await pilot.press("a")
        elif _ready(app, "ManualScreen") and app.screen.query("#proceed"):
            await pilot.click("#proceed")
        elif _ready(app, "MaintenanceScreen") and app.screen.query("#node-name"):
            app.screen.query_one("#node-name", Input).value = app.screen.decision.confirm_text
            await pilot.click("#confirm")
        await pilot.pause(0.1)


async def capture(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gnw-screenshots-") as state:
        app = WizardApp(lambda: open_lab((), 1, Path(state)), auto_start=True)
        async with app.run_test(size=MAIN_SIZE) as pilot:
            await _run_through(app, pilot)
            await _until(pilot, lambda: _ready(app, "ReportScreen"), 30)
            await pilot.press("escape")  # the report goes: the main screen as the run left it
            await _until(pilot, lambda: app.screen is app.main_screen, 10)
            await pilot.pause(0.5)
            main = out / "main.svg"
            main.write_text(app.export_screenshot(title="gpu-node-wizard demo"))
            await pilot.resize_terminal(*MEASUREMENTS_SIZE)
            await pilot.press("m")
            await _until(pilot, lambda: _ready(app, "MeasurementsScreen"), 30)
            await pilot.pause(0.5)
            measurements = out / "measurements.svg"
            measurements.write_text(app.export_screenshot(title="gpu-node-wizard measurements"))
            await pilot.press("q")
    return [main, measurements]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs")
    args = parser.parse_args()
    for path in asyncio.run(capture(args.out)):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
