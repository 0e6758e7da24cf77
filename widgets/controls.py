"""Buttons for the same actions the keys run, for operators who reach for the mouse.

Each button names an app action, so a click takes exactly the path of its
key: ``check_action``, ``Link.request``, the supervisor's journal. The app
hands the bar its buttons (from its one actions table); the bar knows
nothing of the app.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from textual.app import ComposeResult
from textual.containers import HorizontalGroup
from textual.reactive import reactive
from textual.widgets import Button


class ButtonSpec(NamedTuple):
    """One button: its widget id, label (with the key in brackets), the action it runs, whether it steers."""

    ident: str
    label: str
    action: str
    steers: bool


class ControlBar(HorizontalGroup):
    """A row of compact buttons; ``can_control`` False greys out those that steer the server."""

    DEFAULT_CSS = """
    ControlBar {
        height: 1;
        padding: 0 1;
        background: $surface;
        Button { width: auto; min-width: 0; margin: 0 1 0 0; }
    }
    """

    can_control: reactive[bool] = reactive(True)
    paused: reactive[bool] = reactive(False)

    def __init__(self, buttons: Sequence[ButtonSpec], **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._buttons = tuple(buttons)

    def compose(self) -> ComposeResult:
        for spec in self._buttons:
            yield Button(spec.label.replace("[", "\\["), id=spec.ident, action=spec.action, compact=True)

    def watch_can_control(self, can_control: bool) -> None:
        for spec in self._buttons:
            if spec.steers:
                self.query_one(f"#{spec.ident}", Button).disabled = not can_control

    def watch_paused(self, paused: bool) -> None:
        for spec in self._buttons:
            if spec.action.endswith("toggle_pause"):
                label = spec.label.replace("Pause", "Resume") if paused else spec.label
                self.query_one(f"#{spec.ident}", Button).label = label.replace("[", "\\[")
