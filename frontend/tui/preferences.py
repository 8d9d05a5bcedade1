"""What the TUI remembers between runs (the theme), in the user's config folder.

Only presentation lives here: nothing the engine reads. A missing, unreadable or mangled
file is the defaults, never an error; the file is written 0600 in a 0700 folder like the
wizard's other files (wizard/private.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import platformdirs

from wizard.checkpoint import APP_NAME
from wizard.private import private_dir, write_private

MAX_BYTES = 64 << 10  # a preferences file is a few bytes; a huge one is not ours


def preferences_path() -> Path:
    """``$XDG_CONFIG_HOME/gpu-node-wizard/tui.json`` (platformdirs' user config folder)."""
    return Path(platformdirs.user_config_dir(APP_NAME)) / "tui.json"


def load_preferences(path: Path | None = None) -> dict[str, Any]:
    path = path or preferences_path()
    try:
        if path.stat().st_size > MAX_BYTES:
            return {}
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save_preference(key: str, value: Any, path: Path | None = None) -> None:
    """Set one preference, keeping the others. A folder that cannot be written is left
    alone (the theme is only a convenience): the error is returned to nobody."""
    path = path or preferences_path()
    data = load_preferences(path)
    data[key] = value
    try:
        private_dir(path.parent)
        write_private(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())
    except OSError:
        pass


def remembered_theme(available: dict[str, Any], path: Path | None = None) -> str | None:
    """The theme the operator chose last time, if this Textual still has it."""
    theme = load_preferences(path).get("theme")
    return theme if isinstance(theme, str) and theme in available else None
