"""The thresholds form: edit the policy's settings, validated as a whole as you type.

Validation is the policy's own (``PolicySettings.with_changes``), so the form
refuses exactly what the supervisor would refuse, and says which field and
why. An invalid set is never sent: Apply stays disabled and Enter only
repeats the message. The form returns the changed fields; the app sends them
with ``set``, where the supervisor applies them all or none.
"""

from __future__ import annotations

from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from specctl.runtime.core.settings import PolicySettings, SettingsError
from specctl.widgets.banner import clock

FIELDS = (
    ("steps", "draft steps when on"),
    ("off_at", "turn off at batch ≥"),
    ("on_at", "turn on at batch ≤"),
    ("min_accept", "min mean accepted at batch 0"),
    ("accept_slope", "+ per request in the batch"),
    ("accept_window", "acceptance window (verifies)"),
    ("probe_after", "re-probe after (steps)"),
    ("dwell", "min steps between switches"),
    ("warm_below", "draft warm when off, batch <"),
)


def check(values: dict[str, str]) -> tuple[PolicySettings | None, SettingsError | None]:
    """The settings these texts make, or the first reason they are refused."""
    try:
        return PolicySettings().with_changes(values), None
    except SettingsError as exc:
        return None, exc


class ThresholdsScreen(ModalScreen[dict[str, Any] | None]):
    """Dismisses with the changed fields, or None when cancelled or nothing changed."""

    DEFAULT_CSS = """
    ThresholdsScreen {
        align: center middle;
        #form {
            width: 64; max-width: 100%; height: auto; max-height: 100%;
            border: round $accent; background: $surface; padding: 0 1;
        }
        #fields { grid-size: 2; grid-columns: 1fr 14; grid-rows: 1; height: auto; grid-gutter: 0 1; }
        #fields Label { color: $foreground-muted; }
        #fields Input { border: none; height: 1; padding: 0 1; }
        #fields Input.-invalid { background: $error 30%; }
        #form-error { color: $error; text-style: bold; height: auto; min-height: 1; }
        #form-learned { color: $foreground-muted; height: auto; display: none; }
        #form-buttons { height: 1; align-horizontal: right; }
        #form-buttons Button { margin-left: 1; width: auto; min-width: 8; }
    }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("ctrl+s", "apply", "Apply")]

    def __init__(self, current: dict[str, Any]) -> None:
        super().__init__()
        self._current = {name: current.get(name, getattr(PolicySettings(), name)) for name, _ in FIELDS}
        self._mode = current.get("mode", "auto")
        self._learned: dict[str, dict[str, Any]] = {}

    def compose(self) -> ComposeResult:
        with Vertical(id="form") as form:
            form.border_title = "Thresholds (applied all or nothing)"
            with Grid(id="fields"):
                for name, text in FIELDS:
                    yield Label(f"{name}  {text}")
                    yield Input(str(self._current[name]), id=f"field-{name}", compact=True)
            yield Static("", id="form-learned")
            yield Static("", id="form-error")
            with Horizontal(id="form-buttons"):
                yield Button("Cancel", id="cancel", compact=True, action="screen.cancel")
                yield Button("Apply", id="apply", variant="primary", compact=True, action="screen.apply")

    def show_learned(self, who: dict[str, Any]) -> None:
        """Say which of these values calibration learned, from how much and since when (the status's
        ``desired.who``: each setting's source, time and provenance); values people set say nothing."""
        self._learned = {k: w for k, w in who.items() if isinstance(w, dict) and w.get("source") == "calibration"}
        if self.is_mounted:  # else on_mount says it: the answer can come before the form is composed
            self._say_learned()

    def on_mount(self) -> None:
        self._say_learned()

    def _say_learned(self) -> None:
        learned = self._learned
        if not learned:
            return
        names = ", ".join(f"{k} {w.get('value')}" for k, w in learned.items())
        notes = sorted({w["note"] for w in learned.values() if isinstance(w.get("note"), str)})
        times = [w["t"] for w in learned.values() if isinstance(w.get("t"), (int, float))]
        since = f", since {clock(min(times))}" if times else ""
        line = self.query_one("#form-learned", Static)
        line.display = True
        line.update(
            f"learned by calibration: {names} ({'; '.join(notes) or 'calibration'}{since}); "
            "a value you apply here is yours and calibration leaves it alone")

    def values(self) -> dict[str, str]:
        return {name: self.query_one(f"#field-{name}", Input).value for name, _ in FIELDS}

    @on(Input.Changed)
    def _revalidate(self) -> None:
        self._validate()

    def _validate(self) -> PolicySettings | None:
        settings, error = check({"mode": self._mode, **self.values()})
        for name, _ in FIELDS:
            self.query_one(f"#field-{name}", Input).set_class(error is not None and error.field == name, "-invalid")
        message = "" if error is None else f"{error.field}: {error.message} — nothing will be applied"
        self.query_one("#form-error", Static).update(message)
        self.query_one("#apply", Button).disabled = error is not None
        return settings

    @on(Input.Submitted)
    def action_apply(self) -> None:
        settings = self._validate()
        if settings is None:
            self.app.bell()
            return
        new = settings.as_dict()
        changed = {name: new[name] for name, _ in FIELDS if new[name] != self._current[name]}
        self.dismiss(changed)  # {}: applied with nothing changed, which is not the same as cancelled (None)

    def action_cancel(self) -> None:
        self.dismiss(None)
