"""Console test fixtures: replays of committed journals, frozen time zone, private state dir."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from specctl.widgets import event_log

from support.tui import replay_app, settle


@pytest.fixture(autouse=True)
def frozen_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Clock times render in UTC, uid 1000 is "operator", preferences go to a temp dir, colour is on."""
    monkeypatch.setattr(event_log, "user_name", {1000: "operator"}.get)
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setenv("SPECCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("NO_COLOR", raising=False)
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def replay():
    """``replay(fixture_name, seconds_after_T0)``: the console paused there."""
    return replay_app


@pytest.fixture
def settled():
    """``await settled(pilot)``: the replay's seek is on screen."""
    return settle
