"""A yes/no question before an action that interrupts serving (stopping or restarting the server)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmScreen(ModalScreen[bool]):
    """Dismisses with True on y, enter or the Yes button; False on n, escape or No."""

    DEFAULT_CSS = """
    ConfirmScreen {
        align: center middle;
        #confirm-box {
            width: 60; max-width: 100%; height: auto;
            border: round $warning; background: $surface; padding: 0 1;
        }
        #confirm-buttons { height: auto; align-horizontal: right; }
        #confirm-buttons Button { margin-left: 1; }
    }
    """
    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, title: str, question: str) -> None:
        super().__init__()
        self._title, self._question = title, question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box") as box:
            box.border_title = self._title
            yield Static(self._question)
            with Horizontal(id="confirm-buttons"):
                yield Button("No [n]", id="no")
                yield Button("Yes [y]", id="yes", variant="warning")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()  # enter on an untouched dialog does nothing harmful

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
