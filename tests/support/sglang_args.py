"""What `specctl sglang-args` prints, for tests that start a server the way an operator's own line does.

The simulator takes the printed SPECCTL_SETTINGS as ``--set`` flags, as the plugin
takes the environment variable at start-up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def printed_settings(tmp_path: Path, *args: str) -> dict[str, Any]:
    """SPECCTL_SETTINGS as `specctl sglang-args ARGS --format json` prints it (its config written in tmp_path)."""
    out = subprocess.run([sys.executable, "-m", "specctl.console.cli.main", "sglang-args", *args, "--format", "json",
                          "--config", str(tmp_path / "adaptive.json")], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, SPECCTL_STATE_DIR=str(tmp_path / "state")))
    assert out.returncode == 0, out.stderr
    settings: dict[str, Any] = json.loads(json.loads(out.stdout)["env"]["SPECCTL_SETTINGS"])
    return settings


def as_sim_flags(settings: dict[str, Any]) -> list[str]:
    """The printed settings as the simulator's ``--set`` flags (lists, such as an empty candidates, left out)."""
    return [flag for k, v in settings.items() if not isinstance(v, list) for flag in ("--set", f"{k}={v}")]
