"""Toasts stay off the event log at 80x24 and leave after a few seconds; the palette names each entry once.

Toasts are turned on here (``notifications=True``: Textual's tests run without them by default),
on the 8-GPU journal whose dashboard at 80x24 puts the event log in the bottom rows.
"""

from __future__ import annotations

import pytest
from textual.command import CommandList
from textual.widgets._toast import Toast

from specctl.console.tui.app import TOAST_S, SpecctlApp
from specctl.console.tui.screens.help import HelpScreen
from specctl.widgets.event_log import EventLog

from support.tui import GONE, JournalThenGone, palette, settle, until

SMALL = (80, 24)


def toasts(app: SpecctlApp) -> list[Toast]:
    return list(app.screen.query(Toast))


def lost_app() -> SpecctlApp:
    """A console whose supervisor goes away at 180 s: an error toast, and controls that say why they cannot act."""
    return SpecctlApp(JournalThenGone("eight_gpu.jsonl", 180, lose=True), remember_theme=False)


async def three_toasts(pilot) -> list[Toast]:
    """An error (the supervisor lost), a warning (a control that cannot act) and an information toast."""
    app = pilot.app
    await until(pilot, lambda: any(GONE in str(t.render()) for t in toasts(app)), "the lost-link toast")
    await pilot.press("o")  # force on: not connected, says why
    await pilot.press("c")  # next theme: says which
    await until(pilot, lambda: len(toasts(app)) == 3, "three toasts")
    await pilot.pause()
    return toasts(app)


async def test_toasts_never_cover_the_event_log_at_80x24() -> None:
    app = lost_app()
    async with app.run_test(size=SMALL, notifications=True) as pilot:
        shown = await three_toasts(pilot)
        log = app.dashboard.query_one(EventLog).region
        assert log.height >= 3 and log.bottom >= SMALL[1] - 2, "the log is where this test expects it"
        for toast in shown:
            assert not toast.region.overlaps(log), (str(toast.render()), toast.region, log)
            assert toast.region.width <= SMALL[0] // 2, "narrow: the GPU lines stay readable beside it"
            assert toast.region.y >= 3, "under the banner and the buttons"


async def test_toasts_are_short_lived_and_an_error_stays_longest() -> None:
    assert TOAST_S["information"] < TOAST_S["warning"] < TOAST_S["error"] <= 6.0
    app = lost_app()
    async with app.run_test(size=SMALL, notifications=True) as pilot:
        shown = await three_toasts(pilot)
        lives = {toast._notification.severity: toast._notification.timeout for toast in shown}
        assert lives == TOAST_S  # the lost link's toast too: it no longer asks for 10 s


@pytest.mark.slow
async def test_toasts_leave_by_themselves_the_information_first() -> None:
    """Waits on real seconds (about six): the toasts go without a key press, the information one first."""
    app = lost_app()
    async with app.run_test(size=SMALL, notifications=True) as pilot:
        await three_toasts(pilot)
        await until(pilot, lambda: len(toasts(app)) == 2, "the information toast gone")
        assert {t._notification.severity for t in toasts(app)} == {"warning", "error"}
        await until(pilot, lambda: not toasts(app), "every toast gone")


async def test_the_palette_names_each_entry_once_and_keys_opens_the_help(replay) -> None:
    app = replay("one_gpu.jsonl", 100)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        titles = [command.title for command in app.get_system_commands(app.screen)]
        assert titles.count("Keys") == 1
        assert len(titles) == len(set(titles)), sorted(t for t in titles if titles.count(t) > 1)
        await pilot.press("ctrl+p")
        await pilot.press(*"Keys")

        def listed() -> list[str]:
            found = app.screen.query(CommandList)
            options = found.first() if found else None
            if options is None:
                return []
            return [str(options.get_option_at_index(i).prompt).split("\n")[0] for i in range(options.option_count)]

        await until(pilot, lambda: "Keys" in listed(), "Keys in the palette")
        assert listed().count("Keys") == 1, listed()
        await pilot.press("escape")
        await pilot.pause()
        await palette(pilot, "Keys")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen), "our help screen")
