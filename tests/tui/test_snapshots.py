"""What operators see, pinned as SVG snapshots (``pytest --snapshot-update`` to accept a change).

Every snapshot is a committed journal fixture replayed and paused at a fixed
journal time, so nothing depends on the wall clock.
"""

from __future__ import annotations

import pytest

SMALL, LARGE = (80, 24), (160, 48)
ON_AT, OFF_AT = 100, 180  # seconds into the fixtures: speculation on, then off under load


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "160x48"])
@pytest.mark.parametrize("fixture", ["one_gpu.jsonl", "eight_gpu.jsonl"], ids=["1gpu", "8gpu"])
@pytest.mark.parametrize("at", [ON_AT, OFF_AT], ids=["spec_on", "spec_off"])
def test_dashboard(snap_compare, replay, settled, size, fixture, at):
    assert snap_compare(replay(fixture, at), terminal_size=size, run_before=settled)


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "160x48"])
def test_dashboard_with_a_failed_gpu(snap_compare, replay, settled, size):
    assert snap_compare(replay("eight_gpu.jsonl", 250), terminal_size=size, run_before=settled)


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "160x48"])
def test_dashboard_with_the_server_unreachable(snap_compare, replay, settled, size):
    assert snap_compare(replay("eight_gpu.jsonl", 290), terminal_size=size, run_before=settled)


async def _lost_in_view(pilot) -> None:
    from support.tui import T0, until

    await until(pilot, lambda: pilot.app.lost_since is not None, "the lost link")
    pilot.app.wall_clock = lambda: T0 + OFF_AT + 30  # 18 s later: "(18s ago)" counts on by itself
    await until(pilot, lambda: "18s ago" in str(pilot.app.dashboard.query_one("SpecBanner").render()),
                "the banner counting")
    await pilot.pause()


def test_supervisor_lost(snap_compare):
    """A supervisor gone 12 s ago: the banner says so, every figure is grey or `–`, the note says what works."""
    from specctl.console.tui.app import SpecctlApp

    from support.tui import T0, JournalThenGone

    app = SpecctlApp(JournalThenGone("eight_gpu.jsonl", OFF_AT, lose=True), remember_theme=False)
    app.wall_clock = lambda: T0 + OFF_AT + 12
    assert snap_compare(app, terminal_size=SMALL, run_before=_lost_in_view)


def test_server_unreachable_live(snap_compare):
    """Live (not a replay): the last figures are marked old and the note says the controls still work."""
    from specctl.console.tui.app import SpecctlApp

    from support.tui import JournalThenGone, until

    async def unreachable_in_view(pilot) -> None:
        await until(pilot, lambda: pilot.app.timeline.unreachable_since is not None
                    and pilot.app.timeline.now is not None and pilot.app.timeline.now >= 1764400000.0 + 290,
                    "the unreachable spell")
        await pilot.pause()

    app = SpecctlApp(JournalThenGone("eight_gpu.jsonl", 290, lose=False), remember_theme=False)
    assert snap_compare(app, terminal_size=SMALL, run_before=unreachable_in_view)


def test_server_start_up_progress(snap_compare, replay, settled):
    assert snap_compare(replay("eight_gpu.jsonl", 12), terminal_size=SMALL, run_before=settled)


def test_help_screen(snap_compare, replay, settled):
    async def open_help(pilot):
        await settled(pilot)
        await pilot.press("question_mark")
        await pilot.pause()

    assert snap_compare(replay("one_gpu.jsonl", ON_AT), terminal_size=(100, 32), run_before=open_help)


def test_thresholds_form_with_an_error(snap_compare, replay, settled):
    """In a replay the form cannot be opened, so this one opens it directly on the replayed settings."""
    from specctl.console.tui.screens.thresholds import ThresholdsScreen

    async def type_a_bad_value(pilot):
        await settled(pilot)
        spec = pilot.app.timeline.latest["spec"]
        await pilot.app.push_screen(ThresholdsScreen(spec["settings"]))
        await pilot.click("#field-on_at")
        await pilot.press("end", "backspace", "backspace", "8", "0")
        await settled(pilot)

    assert snap_compare(replay("one_gpu.jsonl", ON_AT), terminal_size=SMALL, run_before=type_a_bad_value)


@pytest.mark.parametrize("theme", ["specctl-light", "specctl-contrast"])
def test_themes(snap_compare, replay, settled, theme):
    assert snap_compare(replay("eight_gpu.jsonl", OFF_AT, theme=theme), terminal_size=SMALL, run_before=settled)


def test_dashboard_of_a_server_with_several_depths(snap_compare, replay, settled):
    """Depths 0,1,2,3: the banner says `depth 2 of 0,1,2,3`, the accept chart's bottom row the depth over time."""
    assert snap_compare(replay("depth.jsonl", 240), terminal_size=SMALL, run_before=settled)
