"""The help screen: every key of the console, from the app's one actions table so it cannot drift."""

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
            yield Static("Keys marked live cannot act in a replay, while a connection is lost, or on a server "
                         "specctl can only watch (one without the plugin or without speculation): they say why. "
                         "Every action is also in the command palette (ctrl+p), and the buttons "
                         "under the banner run the same actions.", id="help-note")
