"""The console's remembered preferences (the theme), kept under ``paths.state_dir()``.

Read once before the app starts and written from a worker thread, so the
event loop never waits on the disk. A missing or damaged file means defaults.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specctl.runtime.core.atomic_file import write_atomic
from specctl.runtime.core.json_file import read_json
from specctl.runtime.supervisor.paths import state_dir

FILE_NAME = "console.json"


def prefs_file() -> Path:
    return state_dir() / FILE_NAME


def load_prefs() -> dict[str, Any]:
    try:
        data = read_json(prefs_file(), 64 << 10, "preferences file")
    except ValueError:  # JsonFileError: absent, not a regular file, too large, not JSON
        return {}
    return data if isinstance(data, dict) else {}


def save_prefs(prefs: dict[str, Any]) -> None:
    """Write atomically: a crash mid-write leaves the old file, never half of one."""
    path = prefs_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(prefs, sort_keys=True) + "\n")
