"""One actions table drives the bindings, the help screen, the palette and the buttons (issue 18, item 4)."""

from __future__ import annotations

import inspect
from pathlib import Path

from textual.app import App
from textual.widgets import Button

from specctl.console.tui import actions
from specctl.console.tui.actions import ACTIONS
from specctl.console.tui.app import SpecctlApp
from specctl.console.tui.links import ReplayLink
from specctl.widgets.controls import ControlBar

from support.tui import FIXTURES, T0


def test_every_action_method_of_the_app_is_in_the_table_and_every_entry_has_one() -> None:
    own = {name.removeprefix("action_") for name, _ in inspect.getmembers(SpecctlApp)
           if name.startswith("action_") and not hasattr(App, name)}
    listed = {a.name for a in ACTIONS}
    assert own - listed == set(), "an action the table does not know"
    assert {n for n in listed if not hasattr(SpecctlApp, f"action_{n}") and actions.applies(n) != "fleet"} == set(), \
        "an entry with no action"
    from specctl.console.tui.fleet_app import FleetApp  # the fleet console's own, there and only there

    assert {n for n in listed if actions.applies(n) == "fleet" and not hasattr(FleetApp, f"action_{n}")} == set()


def test_bindings_help_and_buttons_come_from_the_table() -> None:
    keyed = [a for a in ACTIONS if a.keys]
    assert [(b.key, b.action) for b in SpecctlApp.BINDINGS] == [(a.keys, a.action) for a in keyed]
    helped = {row[1] for row in actions.help_rows(fleet=True)}
    assert all(a.help in helped for a in keyed if a.footer)
    for spec in actions.buttons():
        entry = next(a for a in ACTIONS if a.button and a.button[0] == spec.ident)
        assert spec.action == f"app.{entry.action}" and f"[{entry.first_key}]" in spec.label
        assert spec.steers == (entry.applies == "live")


async def test_a_new_entry_shows_as_a_key_a_help_row_and_a_button(monkeypatch) -> None:
    """Adding a control is one entry: it appears in all four places with nothing else written."""
    extra = actions.Action("cycle_theme", "Another way to change the theme", "k", "Other", palette="Other theme",
                           button=("other", "Other"))
    monkeypatch.setattr(actions, "ACTIONS", (*ACTIONS, extra))

    class Extended(SpecctlApp):
        BINDINGS = actions.bindings()  # Textual reads BINDINGS when a class is made
        CSS_PATH = [Path(inspect.getfile(SpecctlApp)).parent / "app.tcss"]

    app = Extended(ReplayLink(FIXTURES / "one_gpu.jsonl", start_at=T0 + 100, paused=True), remember_theme=False)
    async with app.run_test(size=(120, 40)) as pilot:
        assert app.dashboard.query_one(ControlBar).query_one("#other", Button)
        assert "Other theme" in [c.title for c in app.get_system_commands(app.screen)]
        assert ("k", "Another way to change the theme", "always") in actions.help_rows()
        before = app.theme
        await pilot.press("k")
        assert app.theme != before
