"""Buttons for the same actions the keys run, for operators who reach for the mouse.

Each button names an app action, so a click takes exactly the path of its
key: ``check_action``, ``Link.request``, the supervisor's journal.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import HorizontalGroup
from textual.reactive import reactive
from textual.widgets import Button

#: (id, label, action) in display order; the key is in the label so the mouse teaches the keys.
BUTTONS = (
    ("force-on", "On [o]", "app.force_on"),
    ("force-off", "Off [x]", "app.force_off"),
    ("auto", "Auto [a]", "app.auto"),
    ("thresholds", "Thresholds [t]", "app.thresholds"),
    ("pause", "Pause [p]", "app.toggle_pause"),
    ("help", "Help [?]", "app.help"),
)
CONTROL_BUTTONS = ("force-on", "force-off", "auto", "thresholds")


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

    def compose(self) -> ComposeResult:
        for ident, label, action in BUTTONS:
            yield Button(label.replace("[", "\\["), id=ident, action=action, compact=True)

    def watch_can_control(self, can_control: bool) -> None:
        for ident in CONTROL_BUTTONS:
            self.query_one(f"#{ident}", Button).disabled = not can_control

    def watch_paused(self, paused: bool) -> None:
        label = "Resume \\[p]" if paused else "Pause \\[p]"
        self.query_one("#pause", Button).label = label
