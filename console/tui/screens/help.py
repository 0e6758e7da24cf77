"""The help screen: every key of the console, read from the live bindings so it cannot drift."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static


class HelpScreen(ModalScreen[None]):
    """Lists (key, action, when it applies); escape, q or ? closes it."""

    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
        #help-box {
            width: 92; max-width: 100%; height: auto; max-height: 100%;
            border: round $accent; background: $surface; padding: 0 1;
        }
        #help-box DataTable { height: auto; }
        #help-note { color: $foreground-muted; }
    }
    """
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def __init__(self, rows: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self._rows = rows

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box") as box:
            box.border_title = "specctl keys"
            table: DataTable[str] = DataTable(cursor_type="none", zebra_stripes=True)
            table.add_columns("Key", "Action", "Applies")
            table.add_rows(self._rows)
            yield table
            yield Static("Keys marked live are greyed out in a replay and while a connection is lost. "
                         "Every action is also in the command palette (ctrl+p), and the buttons "
                         "under the banner run the same actions.", id="help-note")


def key_rows(bindings: list[Binding], details: dict[str, str],
             applies: dict[str, str]) -> list[tuple[str, str, str]]:
    """(keys, what it does, when) for each binding with a description, in binding order.

    ``details`` and ``applies`` are keyed by the action's name without its
    arguments; a binding missing from ``details`` shows its footer text.
    """
    rows: list[tuple[str, str, str]] = []
    for binding in bindings:
        if not binding.description:
            continue
        keys = ", ".join(_pretty(k) for k in binding.key.split(","))
        action = binding.action
        rows.append((keys, details.get(action, binding.description), applies.get(action.split("(")[0], "always")))
    rows.append(("ctrl+p", "Command palette: every action by name", "always"))
    rows.append(("ctrl+q", "Quit (also stops what the console started)", "always"))
    return rows


def _pretty(key: str) -> str:
    return {"question_mark": "?", "left": "←", "right": "→", "minus": "-", "plus": "+", "equals_sign": "=",
            "space": "space", "home": "home", "end": "end"}.get(key.strip(), key.strip())
