"""Helpers for the console tests: the journal fixtures and how to replay them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from textual.app import App, ComposeResult
from textual.command import CommandList
from textual.pilot import Pilot
from textual.widgets import Input

from specctl.console.tui.app import SpecctlApp
from specctl.console.tui.links import Link, LinkError, ReplayLink
from specctl.runtime.core.errors import UNAVAILABLE
from specctl.runtime.supervisor.journal import read_journal
from specctl.widgets.banner import BannerState, SpecBanner

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


async def palette(pilot: Pilot, title: str) -> None:
    """Type a command's title into the palette and run it once the search has put it first."""
    await pilot.press("ctrl+p")
    await pilot.press(*title)

    def first_is_it() -> bool:
        found = pilot.app.screen.query(CommandList)
        options = found.first() if found else None
        highlighted = options.highlighted if options is not None else None
        return highlighted is not None and title in str(options.get_option_at_index(highlighted).prompt)

    await until(pilot, first_is_it, f"{title!r} highlighted in the palette")
    await pilot.press("enter")


class JournalThenGone(Link):
    """A stand-in for a supervisor behind a socket, for snapshots: it streams a fixture journal up to
    ``until`` seconds after T0, then either goes away (``lose=True``, as a killed supervisor does) or
    falls silent. The live tests (test_stale.py) kill a real one; this one makes the same view
    deterministic for a picture."""

    kind = "socket"

    def __init__(self, name: str, until: float, *, lose: bool) -> None:
        self.path, self.until, self.lose = FIXTURES / name, T0 + until, lose
        self.opened = 0

    @property
    def describe(self) -> str:
        return "socket /run/user/1000/specctl.sock"

    async def open(self) -> None:
        self.opened += 1
        if self.opened > 1:
            raise LinkError(UNAVAILABLE, GONE)

    async def records(self) -> AsyncIterator[dict[str, Any]]:
        for record in read_journal(self.path):
            if isinstance(record.get("t"), (int, float)) and record["t"] <= self.until:
                yield record
        if self.lose:
            raise LinkError(UNAVAILABLE, GONE)
        await asyncio.Event().wait()

    async def request(self, cmd: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        raise LinkError(UNAVAILABLE, GONE)


GONE = "lost the supervisor: connection reset by peer"


class BannerOnly(App[None]):
    """The banner alone, to read the words a state gives it."""

    def compose(self) -> ComposeResult:
        yield SpecBanner()


async def first_line(state: BannerState) -> str:
    """The banner's first line, as drawn, for ``state``."""
    return (await banner_lines(state))[0]


async def banner_lines(state: BannerState) -> list[str]:
    """The banner's two lines, as drawn, for ``state``."""
    app = BannerOnly()
    async with app.run_test(size=(100, 4)) as pilot:
        app.query_one(SpecBanner).state = state
        await pilot.pause()
        return app.query_one(SpecBanner).render().plain.split("\n")
