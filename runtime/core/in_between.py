"""The words for a state a command has set and the server has not yet run (one place: the supervisor's
answers, ``specctl status`` and the console say it alike)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def switching(spec: Mapping[str, Any]) -> str | None:
    """The in-between state of a forced mode the server has taken but not yet run: the words for it, else None.

    A mode reaches the policy at once and speculation turns on or off at the server's next decode
    step, which an idle server may not take for a while.
    """
    mode, on = spec.get("mode"), spec.get("on")
    if mode == "off" and on is True:
        return "switching off at the next step"
    if mode == "on" and on is False:
        return "switching on at the next step"
    settings = spec.get("settings")
    if not isinstance(settings, dict):
        settings = {}
    steps, depth = settings.get("steps"), spec.get("depth", spec.get("steps"))
    if mode == "on" and on and isinstance(steps, int) and isinstance(depth, int) and depth != steps:
        return f"going to depth {steps} at the next step"
    return None
