"""Every action of the console, once: its keys, footer word, help row, palette entry, button and when it applies.

The app's bindings, the help screen, the command palette and the control bar
are all derived from :data:`ACTIONS` (as Harlequin derives bindings, keymap
and help from its actions table), so adding a control is one entry here and
the four views cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from textual.binding import Binding

from specctl.widgets.controls import ButtonSpec

#: When an action applies: "always"; "live" (it steers a supervisor, so not in a replay, nor while the link
#: is lost, nor on a server without the plugin); "replay" (it moves a journal's playback); "gpu" (on a GPU:
#: the dashboard's focused GPU, or a GPU's own screen); "fleet" (the fleet console: `specctl tui --router`;
#: on its table the live actions act on the marked workers, or all).
Applies = Literal["always", "live", "replay", "gpu", "fleet"]
APPLIES_WORDS: dict[Applies, str] = {"always": "always", "live": "live", "replay": "replay only", "gpu": "on a GPU",
                                     "fleet": "fleet console"}


@dataclass(frozen=True)
class Action:
    """One thing the operator can do, and every place it shows."""

    action: str  # the app action it runs, with arguments: "seek(-10)", "server('stop')"
    help: str  # what it does: the help screen's row (and the palette's, unless ``palette_help``)
    keys: str = ""  # Textual key names, comma separated; "" for palette-only actions
    footer: str = ""  # the footer's word; "" keeps it out of the footer and the help screen
    key_display: str | None = None
    in_footer: bool = True  # False: the control bar shows it with its key instead
    applies: Applies = "always"
    palette: str = ""  # the palette's title; "" keeps it out of the palette
    palette_help: str = ""
    button: tuple[str, str] | None = None  # (widget id, label) on the control bar
    # One palette entry per depth the server was built for (where it has more than one positive one),
    # ``{depth}`` in the titles, the depth as the action's argument: "pin depth 2" runs pin_depth(2).
    each_depth: bool = False
    # One palette entry per GPU of the latest sample, ``{gpu}`` in the titles, its index as the argument.
    each_gpu: bool = False

    @property
    def name(self) -> str:
        """The action's name without its arguments: what check_action sees."""
        return self.action.split("(")[0]

    @property
    def first_key(self) -> str:
        return self.key_display or pretty_key(self.keys.split(",")[0])


ACTIONS: tuple[Action, ...] = (
    Action("force_on", "Force speculation on (mode on)", "o", "Force on", in_footer=False, applies="live",
           palette="Force speculation on", palette_help="Mode on: speculate at every batch size",
           button=("force-on", "On")),
    Action("force_off", "Force speculation off (mode off)", "x", "Force off", in_footer=False, applies="live",
           palette="Force speculation off", palette_help="Mode off: never speculate", button=("force-off", "Off")),
    Action("auto", "Let the policy decide (mode auto)", "a", "Auto", in_footer=False, applies="live",
           palette="Auto speculation", palette_help="Let the policy switch on load and acceptance",
           button=("auto", "Auto")),
    Action("thresholds", "Edit thresholds: off_at, on_at, min_accept, ...", "t", "Thresholds", in_footer=False,
           applies="live", palette="Edit thresholds",
           palette_help="off_at, on_at, min_accept, ... applied all or nothing",
           button=("thresholds", "Thresholds")),
    Action("pin_depth", "Pin a draft depth: force on at N steps (force-on --steps N)", applies="live",
           palette="Pin depth {depth}", each_depth=True,
           palette_help="Force on at {depth} draft steps (specctl force-on --steps {depth})"),
    Action("server('restart')", "Restart the model server (asks first)", applies="live",
           palette="Restart the model server", palette_help="Stop it and start it again (asks first)"),
    Action("server('stop')", "Stop the model server (asks first)", applies="live",
           palette="Stop the model server", palette_help="It stays stopped until started (asks first)"),
    Action("server('start')", "Start the model server (asks first)", applies="live",
           palette="Start the model server", palette_help="After a stop, or a start that failed"),
    Action("toggle_pause", "Pause or resume the view (in a replay: the playback)", "p,space", "Pause",
           key_display="p", in_footer=False, palette="Pause or resume",
           palette_help="Freeze the view (or the replay)", button=("pause", "Pause")),
    Action("seek(-10)", "Seek back 10 s", "left", "-10s", applies="replay",
           palette="Replay: back 10 s", palette_help="Seek the replay back"),
    Action("seek(10)", "Seek forward 10 s", "right", "+10s", applies="replay",
           palette="Replay: forward 10 s", palette_help="Seek the replay forward"),
    Action("seek_start", "Seek to the start", "home", "Start", in_footer=False, applies="replay"),
    Action("seek_end", "Seek to the end", "end", "End", in_footer=False, applies="replay"),
    Action("speed(0.5)", "Play at half the speed", "minus", "Slower", applies="replay",
           palette="Replay: slower", palette_help="Halve the playback speed"),
    Action("speed(2)", "Play at twice the speed", "plus,equals_sign", "Faster", key_display="+", applies="replay",
           palette="Replay: faster", palette_help="Double the playback speed"),
    Action("gpu_detail", "Open the focused GPU's screen: history, processes", "enter",
           "GPU detail", applies="gpu", palette="GPU {gpu}: history and processes", each_gpu=True,
           palette_help="Utilisation, memory, power, temperature and clocks over time, and its processes"),
    Action("close_gpu", "Back from a GPU's screen to the dashboard", "escape", "Back", applies="gpu"),
    Action("fleet_mark", "Mark or unmark the worker under the cursor: fleet actions act on the marked, else all",
           "m", "Mark", applies="fleet"),
    Action("fleet_back", "Back to the fleet table from a worker opened with Enter", "escape", "Fleet",
           applies="fleet"),
    Action("cycle_theme", "Next theme: dark, light, high contrast (remembered)", "c", "Theme",
           palette="Cycle theme", palette_help="specctl dark, light and high contrast"),
    Action("help", "This screen", "question_mark", "Help", key_display="?", palette="Keys",
           palette_help="Every key of the console", button=("help", "Help")),
    Action("quit", "Quit (also stops what the console started)", "q", "Quit"),
)
#: Rows the help screen adds for keys Textual itself binds.
TEXTUAL_ROWS = (("ctrl+p", "Command palette: every action by name", "always"),
                ("ctrl+q", "Quit (also stops what the console started)", "always"))
#: What each server action does to the requests in flight, asked before it is done.
SERVER_QUESTIONS = {
    "stop": "Stop the model server? Requests in flight fail, and it stays stopped until started again.",
    "restart": "Restart the model server? Requests in flight fail while it starts again.",
    "start": "Start the model server?",
}


def applies(name: str) -> Applies:
    """When the action called ``name`` (without arguments) applies; "always" for one not listed."""
    return next((a.applies for a in ACTIONS if a.name == name), "always")


def bindings() -> list[Binding]:
    return [Binding(a.keys, a.action, a.footer, show=a.in_footer, key_display=a.key_display)
            for a in ACTIONS if a.keys]


def help_rows(fleet: bool = False) -> list[tuple[str, str, str]]:
    """(keys, what it does, when) for every keyed action, then Textual's own keys; the fleet console's
    own keys only in the fleet console (``fleet``)."""
    rows = [(", ".join(pretty_key(k) for k in a.keys.split(",")), a.help, APPLIES_WORDS[a.applies])
            for a in ACTIONS if a.keys and a.footer and (fleet or a.applies != "fleet")]
    return rows + list(TEXTUAL_ROWS)


def buttons() -> list[ButtonSpec]:
    """The control bar's buttons, the key in each label so the mouse teaches the keys."""
    return [ButtonSpec(a.button[0], f"{a.button[1]} [{a.first_key}]", f"app.{a.action}", a.applies == "live")
            for a in ACTIONS if a.button]


def palette_entries() -> list[Action]:
    return [a for a in ACTIONS if a.palette]


def pretty_key(key: str) -> str:
    return {"question_mark": "?", "left": "←", "right": "→", "minus": "-", "plus": "+", "equals_sign": "=",
            "enter": "Enter", "escape": "Esc"}.get(key.strip(), key.strip())
