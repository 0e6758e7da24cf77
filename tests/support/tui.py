"""Helpers for the console tests: the journal fixtures and how to replay them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.pilot import Pilot
from textual.widgets import Input

from specctl.console.tui.app import SpecctlApp
from specctl.console.tui.links import ReplayLink

FIXTURES = Path(__file__).resolve().parent.parent / "tui" / "fixtures"
T0 = 1764400000.0  # the fixtures' first sample (tests/tui/fixtures/make_fixtures.py)
STEPS = 600  # pauses of 0.05 s while waiting: a guard against hangs, nothing asserts on speed


def replay_app(name: str, at: float, *, theme: str | None = None) -> SpecctlApp:
    """The console on a fixture journal, paused at ``at`` seconds after T0."""
    link = ReplayLink(FIXTURES / name, start_at=T0 + at, paused=True)
    return SpecctlApp(link, theme=theme, remember_theme=False)


async def settle(pilot: Pilot) -> None:
    """Wait until the replay has delivered its seek and the screen has drawn it; stop blinking."""
    app = pilot.app
    assert isinstance(app, SpecctlApp) and isinstance(app.link, ReplayLink)
    await app.link.settled.wait()
    await pilot.pause()
    for widget in app.screen.query(Input):
        widget.cursor_blink = False
    await pilot.pause()


async def until(pilot: Pilot, predicate: Callable[[], Any], what: str) -> Any:
    """Let the app run until ``predicate()`` is true; fail (not hang) if it never is."""
    for _ in range(STEPS):
        if value := predicate():
            return value
        await pilot.pause(0.05)
    raise AssertionError(f"gave up waiting for {what}")
