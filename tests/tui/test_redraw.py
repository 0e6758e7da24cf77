"""Widgets repaint only what changed, and still show every change: asserted on the lines they draw.

``render_lines`` is what the screen's compositor asks a widget for, cached lines included, so a
repaint that was skipped when the data did change shows here as the old text.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rich.text import Text
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.pilot import Pilot
from textual.reactive import reactive
from textual.widget import Widget

from specctl.themes.console_themes import THEMES
from specctl.widgets.banner import BannerState, SpecBanner
from specctl.widgets.gpu_panel import GpuPanel
from specctl.widgets.redraw import LineRedraw
from specctl.widgets.timechart import ChartData, TimeChart

GPU = {"index": 3, "name": "NVIDIA H200", "state": "ok", "util": 50.0, "mem_used": 70 * 1024**3,
       "mem_total": 141 * 1024**3, "power_w": 300.0, "power_limit_w": 700.0, "temp_c": 50.1, "sm_clock_mhz": 1980}


class Board(App[None]):
    """The three widgets a sample redraws, as the dashboard holds them."""

    CSS = "TimeChart.-alarm > .timechart--series-1 { color: $error; }"  # a class that changes one component

    def compose(self) -> ComposeResult:
        yield SpecBanner()
        yield GpuPanel()
        yield TimeChart()

    def on_mount(self) -> None:
        for theme in THEMES:
            self.register_theme(theme)
        self.query_one(TimeChart).styles.height = 12


def drawn(widget: SpecBanner | GpuPanel | TimeChart) -> list[str]:
    """The widget's lines as the compositor gets them (border and padding included)."""
    width, height = widget.outer_size
    return [strip.text for strip in widget.render_lines(Region(0, 0, width, height))]


def chart(now: float, values: list[float], legend: str,
          off_spans: tuple[tuple[float, float], ...] = ()) -> ChartData:
    points = tuple((now - 60 + 2 * i, v) for i, v in enumerate(values))
    return ChartData("Output tok/s", now, 60.0, (points,), off_spans, legend=legend, y_min_top=100.0)


async def shown(pilot: Pilot[None]) -> None:
    await pilot.pause()
    await pilot.pause()


async def flat_chart(app: Board, pilot: Pilot[None]) -> TimeChart:
    """The board's chart drawn with a flat series at 50: the starting point of the chart tests."""
    timechart = app.query_one(TimeChart)
    timechart.data = chart(1000.0, [50.0] * 30, "50")
    await shown(pilot)
    return timechart


async def test_a_gpu_panel_shows_each_new_reading_and_skips_none() -> None:
    app = Board()
    async with app.run_test(size=(60, 30)) as pilot:
        panel = app.query_one(GpuPanel)
        panel.gpu = dict(GPU)
        await shown(pilot)
        first = drawn(panel)
        assert any("50%" in line for line in first) and any("50°C" in line for line in first)
        panel.gpu = dict(GPU, temp_c=50.3)  # reads the same: "50°C"
        await shown(pilot)
        assert drawn(panel) == first
        panel.gpu = dict(GPU, temp_c=50.3, util=87.0, power_w=640.0)
        await shown(pilot)
        lines = drawn(panel)
        assert any("87%" in line for line in lines) and any("640/700W" in line for line in lines)
        assert not any("50%" in line for line in lines)
        panel.gpu = dict(GPU, index=5, util=87.0)
        await shown(pilot)
        assert "GPU 5 · H200" in drawn(panel)[0]
        panel.stale = True
        await shown(pilot)
        assert "GPU 5 · H200 · old" in drawn(panel)[0]


async def test_the_banner_follows_the_state_and_the_time() -> None:
    app = Board()
    async with app.run_test(size=(100, 30)) as pilot:
        banner = app.query_one(SpecBanner)
        state = BannerState(spec_on=True, mode="auto", server_state="ready", reason="load", switch_t=100.0, now=105.0)
        banner.state = state
        await shown(pilot)
        assert "SPEC ON  AUTO" in drawn(banner)[0] and "5s ago" in drawn(banner)[1]
        banner.state = BannerState(**{**state.__dict__, "now": 105.2})  # "5s ago" still
        await shown(pilot)
        assert "5s ago" in drawn(banner)[1]
        banner.state = BannerState(**{**state.__dict__, "now": 112.0})
        await shown(pilot)
        assert "12s ago" in drawn(banner)[1]
        banner.state = BannerState(**{**state.__dict__, "now": 112.0, "spec_on": False, "mode": "off"})
        await shown(pilot)
        assert "SPEC OFF  FORCED OFF" in drawn(banner)[0]


async def test_a_chart_repaints_the_rows_that_changed_and_shows_them() -> None:
    app = Board()
    async with app.run_test(size=(60, 30)) as pilot:
        timechart = app.query_one(TimeChart)
        timechart.data = chart(1000.0, [10.0] * 30, "10")
        await shown(pilot)
        flat = drawn(timechart)
        assert flat[0].startswith("Output tok/s  10")
        timechart.data = chart(1000.0, [10.0] * 29 + [90.0], "90")  # the newest point jumps up
        await shown(pilot)
        jumped = drawn(timechart)
        assert jumped[0].startswith("Output tok/s  90")
        assert jumped[1:] != flat[1:], "the plot shows the new point"
        top = next(i for i, line in enumerate(jumped) if i > 0 and line.rstrip()[-1:] not in ("▕", ""))
        assert top < len(jumped) - 2, "the jump is drawn high in the plot, not only on the flat line"
        assert jumped[-1] == flat[-1], "the row under the line (its axis says 0) is as it was"
        await pilot.resize_terminal(40, 30)  # narrower: every row laid out again at the new width
        await shown(pilot)
        narrow = drawn(timechart)
        assert narrow[0].startswith("Output tok/s  90") and all(len(line) == 40 for line in narrow)
        assert any("\u2801" <= ch <= "\u28ff" for ch in narrow[top][6:]), "the newest point, at the new right edge"


def series_colour(timechart: TimeChart) -> object:
    """The colour of the first braille dots the chart draws."""
    width, height = timechart.outer_size
    for strip in timechart.render_lines(Region(0, 0, width, height))[1:]:
        for segment in strip:
            if segment.text.strip() and "\u2800" <= segment.text.strip()[0] <= "\u28ff":
                return segment.style.color if segment.style else None
    raise AssertionError("no braille dots drawn")


async def test_a_chart_shades_a_span_where_only_the_colours_change() -> None:
    """Speculation went off: the same characters, on the off colour: a change of style alone is drawn."""
    app = Board()
    async with app.run_test(size=(60, 30)) as pilot:
        timechart = await flat_chart(app, pilot)
        plain = drawn(timechart)

        def backgrounds() -> set[object]:
            width, height = timechart.outer_size
            return {segment.style.bgcolor for strip in timechart.render_lines(Region(0, 0, width, height))[1:]
                    for segment in strip if segment.style}

        before = backgrounds()
        timechart.data = chart(1000.0, [50.0] * 30, "50", off_spans=((970.0, 990.0),))
        await shown(pilot)
        assert drawn(timechart) == plain
        assert backgrounds() - before, "the shaded span's background is drawn"


def another_theme(app: App[None], timechart: Widget) -> None:
    """A theme whose accent differs from the first one's: the chart's colours must follow."""
    first = next(iter(THEMES))
    app.theme = next(t.name for t in THEMES if t.accent != first.accent)


def alarm_class(app: App[None], timechart: Widget) -> None:
    """A class that restyles only the dots (the widget's own rules as they were): every row repaints."""
    timechart.add_class("-alarm")


@pytest.mark.parametrize("restyle", [another_theme, alarm_class], ids=["theme", "component-class"])
async def test_a_chart_takes_a_restyle(restyle: Callable[[App[None], Widget], None]) -> None:
    app = Board()
    async with app.run_test(size=(60, 30)) as pilot:
        timechart = await flat_chart(app, pilot)
        app.theme = next(iter(THEMES)).name
        await shown(pilot)
        before = series_colour(timechart)
        restyle(app, timechart)
        await shown(pilot)
        assert series_colour(timechart) != before


async def test_text_selected_on_a_chart_is_highlighted_and_copied_as_before() -> None:
    """Drawing by line must not cut a selection into lines of their own: it copies the chart's text."""
    app = Board()
    async with app.run_test(size=(60, 30)) as pilot:
        timechart = await flat_chart(app, pilot)
        plain = drawn(timechart)
        await pilot.mouse_down(timechart, offset=(0, 0))
        await pilot.hover(timechart, offset=(8, 1))
        await pilot.mouse_up(timechart, offset=(8, 1))
        await shown(pilot)
        selected = app.screen.get_selected_text()
        assert selected is not None and selected.startswith("Output tok/s  50\n"), selected
        width, height = timechart.outer_size
        strips = timechart.render_lines(Region(0, 0, width, height))
        assert [strip.text for strip in strips] == plain, "the same characters, highlighted"
        highlighted = {y for y, strip in enumerate(strips) for segment in strip
                       if segment.style and segment.style.bgcolor and segment.text.strip()}
        assert {0, 1} <= highlighted, highlighted


class Words(LineRedraw):
    """A LineRedraw of plain words, for what no dashboard widget does today: a line wider than itself."""

    DEFAULT_CSS = "Words { width: 20; height: 3; }"
    words: reactive[str] = reactive("", repaint=False)

    def watch_words(self, words: str) -> None:
        self.redraw()

    def content_lines(self) -> list[Text]:
        return [Text(self.words)]


class WordsApp(App[None]):
    def compose(self) -> ComposeResult:
        yield Words()


async def test_a_line_wider_than_the_widget_wraps_as_a_plain_render_would() -> None:
    app = WordsApp()
    async with app.run_test(size=(40, 10)) as pilot:
        widget = app.query_one(Words)
        widget.words = "short"
        await shown(pilot)
        assert [line.rstrip() for line in drawn(widget)] == ["short", "", ""]
        widget.words = "the server stopped answering at noon"
        await shown(pilot)
        assert [line.rstrip() for line in drawn(widget)] == ["the server stopped", "answering at noon", ""]


async def test_a_server_never_off_for_load_keeps_its_requests_chart_readable() -> None:
    """FA3's rows and a MoE's on Triton set off_at 1048576: no rule up there to squash the running line flat."""
    from specctl.console.tui.model.charts import build_charts
    from specctl.console.tui.model.timeline import Timeline
    from specctl.runtime.core import records

    timeline = Timeline()
    for i in range(60):
        timeline.fold(records.sample({"state": "ready", "running": 20 + i, "queued": 0, "gen_tps": 100.0},
                                     {"mode": "auto", "on": True, "steps": 3, "reason": "load",
                                      "settings": {"steps": 3, "off_at": 1 << 20, "on_at": (1 << 20) - 1}},
                                     [], [], sim=True, t=1000.0 + i))
    requests = build_charts(timeline, 60.0)[2]
    assert requests.thresholds == () and requests.note == "┈off_at never"
    app = Board()
    async with app.run_test(size=(60, 30)) as pilot:
        timechart = app.query_one(TimeChart)
        timechart.data = requests
        await shown(pilot)
        lines = drawn(timechart)
    assert not any("M" in line.split("│")[0] for line in lines), lines  # the axis tops out near 80, not 1.2M
    rows_with_dots = [line for line in lines if any("\u2801" <= ch <= "\u28ff" for ch in line)]
    assert len(rows_with_dots) >= 4, lines  # the rising line climbs the chart, not one row at the bottom
    assert any("off_at never" in line for line in lines), lines
