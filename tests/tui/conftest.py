"""Console test fixtures: replays of committed journals, frozen time zone, private state dir."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from specctl.console.app import SpecctlApp
from specctl.console.links import ReplayLink

FIXTURES = Path(__file__).parent / "fixtures"
T0 = 1764400000.0  # the fixtures' first sample (tests/tui/fixtures/make_fixtures.py)


@pytest.fixture(autouse=True)
def frozen_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Clock times render in UTC, preferences go to a temp dir, colour is on."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setenv("SPECCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("NO_COLOR", raising=False)
    yield
    monkeypatch.undo()
    time.tzset()


def replay_app(name: str, at: float, *, theme: str | None = None) -> SpecctlApp:
    """The console on a fixture journal, paused at ``at`` seconds after T0."""
    link = ReplayLink(FIXTURES / name, start_at=T0 + at, paused=True)
    return SpecctlApp(link, theme=theme, remember_theme=False)


@pytest.fixture
def replay():
    return replay_app


@pytest.fixture
def settled():
    return settle


async def settle(pilot: Pilot) -> None:
    """Wait until the replay has delivered its seek and the screen has drawn it; stop blinking."""
    app = pilot.app
    assert isinstance(app, SpecctlApp) and isinstance(app.link, ReplayLink)
    await app.link.settled.wait()
    await pilot.pause()
    for widget in app.screen.query(Input):
        widget.cursor_blink = False
    await pilot.pause()
