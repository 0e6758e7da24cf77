"""Where specctl keeps things. One small module so tests can point everything at a temp folder."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

APP = "specctl"


def socket_path() -> Path:
    """The control socket: ``$SPECCTL_SOCKET``, else ``$XDG_RUNTIME_DIR/specctl.sock``."""
    if env := os.environ.get("SPECCTL_SOCKET"):
        return Path(env)
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR") or platformdirs.user_runtime_dir(APP)
    return Path(runtime_dir) / "specctl.sock"


def state_dir() -> Path:
    """Remembered preferences (theme, ...): ``$SPECCTL_STATE_DIR`` or the XDG state dir."""
    if env := os.environ.get("SPECCTL_STATE_DIR"):
        return Path(env)
    return Path(platformdirs.user_state_dir(APP))


def config_file() -> Path:
    """The TOML config: ``$SPECCTL_CONFIG`` or the XDG config dir's ``specctl.toml``."""
    if env := os.environ.get("SPECCTL_CONFIG"):
        return Path(env)
    return Path(platformdirs.user_config_dir(APP)) / "specctl.toml"
