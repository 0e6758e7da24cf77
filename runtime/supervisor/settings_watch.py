"""The server's settings as each poll reads them: a change nobody here made becomes the desired state.

Someone with the admin key may POST /set_internal_state beside the supervisor (another
supervisor, ``specctl fleet``, a curl); what the supervisor sent itself is expected and is
no such change. A policy step counter that goes back is a server restarted between two polls,
with its launch settings: then the desired state goes to the server, not the other way round.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from specctl.runtime.core.settings import PolicySettings, SettingsError
from specctl.runtime.supervisor.desired import Desired


class SettingsWatch:
    """What the server ran at the last poll, and which settings the supervisor is waiting to read back."""

    def __init__(self, desired: Desired) -> None:
        self.desired = desired
        self.known: dict[str, Any] | None = None  # the server's settings as last read
        self.expected: deque[dict[str, Any] | None] = deque(maxlen=8)  # settings we sent, not yet read back
        self.last_step: int | None = None  # the policy's step counter as last read: a drop is a restart
        self.last_step_t: float | None = None  # unix time the step counter last moved

    def expect(self, settings: dict[str, Any]) -> None:
        """Settings the supervisor itself just gave the server: reading them back is no external change."""
        self.expected.append(_normal_settings(settings))

    def restarted_unseen(self, spec: dict[str, Any]) -> bool:
        """The policy's step counter went back: the server restarted between two polls, with its launch settings.

        Those are no change anyone made: the desired state goes back to it, not the other way round.
        """
        step = spec.get("step")
        if not isinstance(step, int):
            return False
        last, self.last_step = self.last_step, step
        if last is None or step != last:
            self.last_step_t = time.time()
        return last is not None and step < last

    def note_change(self, spec: dict[str, Any]) -> None:
        """Settings that changed without us (someone POSTed /set_internal_state with the admin key: another
        supervisor, ``specctl fleet``, a curl) become the desired state, journaled ``settings_adopted``,
        so that no restart undoes them."""
        settings = _normal_settings(spec.get("settings"))
        if settings is None:
            return
        known, self.known = self.known, settings
        self.desired.saw(settings, spec.get("step"))
        if known is None or settings == known:
            return
        if settings in self.expected:
            self.expected.clear()
            return
        changes = {k: v for k, v in settings.items() if known.get(k) != v}
        if self.desired.pin is not None and {"mode", "steps"} & set(changes):
            changes["steps"] = settings["steps"]  # the pin ends: what the server runs now is what is wanted
        self.desired.adopt(changes, settings)


def _normal_settings(settings: Any) -> dict[str, Any] | None:
    """Settings compared by value (48 and 48.0 alike), through the policy's own parsing; None if unusable."""
    if not isinstance(settings, dict):
        return None
    try:
        return PolicySettings().with_changes(settings).as_dict()
    except SettingsError:
        return None

