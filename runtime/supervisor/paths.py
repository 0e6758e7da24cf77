"""Where specctl keeps things. One small module so tests can point everything at a temp folder."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import platformdirs

APP = "specctl"


def socket_path() -> Path:
    """The control socket: ``$SPECCTL_SOCKET``, else ``$XDG_RUNTIME_DIR/specctl.sock``."""
    if env := os.environ.get("SPECCTL_SOCKET"):
        return Path(env)
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR") or _fallback_runtime_dir()
    return Path(runtime_dir) / "specctl.sock"


def _fallback_runtime_dir() -> str:
    """platformdirs' per-user fallback (/tmp/runtime-UID), without the warning it prints.

    Without XDG_RUNTIME_DIR (containers, su, cron) platformdirs >= 4.5 falls back
    and emits a RuntimeDirWarning with a Python source line; an operator should
    see the socket path `specctl locate` prints, not that.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return platformdirs.user_runtime_dir(APP)


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
