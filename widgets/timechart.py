"""A braille line chart over a time window, with shaded spans and threshold lines.

Textual's Sparkline has one series, no time axis and no way to draw a
threshold; this widget draws up to two series as braille dots (2x4 dots a
cell), shades the columns where speculation was off, and rules the
``off_at``/``on_at`` thresholds across the plot. Optionally its bottom row is
a strip of small integers over time, one digit a column (the draft depth: an
exact value a line could only suggest, readable without colour). It takes a
plain :class:`ChartData` and knows nothing about records.

It draws line by line (widgets/redraw.py): a new ``data`` repaints only the
rows whose text or styles changed; composing every row of three charts each
sample was most of the console's CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.style import Style
from rich.text import Text
from textual.reactive import reactive

from specctl.widgets.redraw import LineRedraw, partial_style

# Braille dot bits by (x 0..1, y 0..3 from the top) inside one cell.
_DOTS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
_AXIS = 6  # columns for the y-axis labels


@dataclass(frozen=True)
class ChartData:
    """What to draw: times are seconds on any clock, ``now`` is the right edge."""

    title: str
    now: float
    window_s: float
    series: tuple[tuple[tuple[float, float], ...], ...] = ()  # up to two [(t, value)]
    off_spans: tuple[tuple[float, float], ...] = ()  # [(t0, t1)] shaded
    thresholds: tuple[tuple[float, str], ...] = ()  # [(value, label)]: first "off", second "on"
    legend: str = ""
    legend_narrow: str = ""  # said instead where title and legend would be cut: a cut number reads as another
    note: str = ""  # shown after the legend only where it fits whole
    y_min_top: float = 1.0  # the y axis reaches at least this, so a quiet chart stays flat
    y_top: float | None = None  # a fixed top (100 for a percentage, a GPU's memory): None fits the data
    unit_fmt: str = ".0f"
    strip: tuple[tuple[float, int], ...] = ()  # [(t, 0..9)]: a digit row under the plot; () for none
    strip_label: str = ""  # the strip's axis label, at most 5 characters


def si(value: float, fmt: str = ".0f") -> str:
    """Short axis label: 1834 -> 1.8k."""
    if abs(value) >= 10_000:
        return f"{value / 1000:.0f}k"
    if abs(value) >= 1000:
        return f"{value / 1000:.1f}k"
    return format(value, fmt)


class TimeChart(LineRedraw):
    """Draws a :class:`ChartData`; set ``data`` to redraw."""

    DEFAULT_CSS = """
    TimeChart {
        height: 1fr;
        min-height: 4;
        padding: 0 1 0 0;
        & > .timechart--title { text-style: bold; }
        & > .timechart--legend { color: $foreground-muted; }
        & > .timechart--axis { color: $foreground-muted; }
        & > .timechart--series-1 { color: $accent; }
        & > .timechart--series-2 { color: $primary; }
        & > .timechart--off { background: $error 20%; }
        & > .timechart--threshold-off { color: $error; }
        & > .timechart--threshold-on { color: $success; }
    }
    """
    COMPONENT_CLASSES = {"timechart--title", "timechart--legend", "timechart--axis", "timechart--series-1",
                         "timechart--series-2", "timechart--off", "timechart--threshold-off",
                         "timechart--threshold-on"}

    #: Set to redraw; only the rows that changed are repainted (widgets/redraw.py).
    data: reactive[ChartData | None] = reactive(None, repaint=False)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._styles: dict[str, Style] = {}  # component styles of one layout pass

    def _style(self, name: str) -> Style:
        """A component's own style, looked up once per layout pass (widgets/redraw.py says why)."""
        return partial_style(self, f"timechart--{name}", self._styles)

    def watch_data(self, data: ChartData | None) -> None:
        self.redraw()

    def content_lines(self) -> list[Text]:
        """Every row of the chart as Text: title, plot rows, the digit strip where there is one."""
        self._styles = {}
        data = self.data
        width, height = self.size.width, self.size.height
        if data is None or width < _AXIS + 4 or height < 2:
            return [Text(data.title if data else "")]
        legend = data.legend
        if data.legend_narrow and len(data.title) + 2 + len(legend) > width:
            legend = data.legend_narrow
        title = Text.assemble((data.title, self._style("title")), "  ", (legend, self._style("legend")))
        if data.note and title.cell_len + 2 + len(data.note) <= width:
            title.append(f"  {data.note}", self._style("legend"))
        title.truncate(width)
        strip = bool(data.strip) and height >= 4  # the plot keeps 2 rows at least
        plot = _Plot(width - _AXIS, height - 1 - strip, data)
        rows = self._rows(plot)
        if strip:
            rows.append(self._strip(plot))
        return [title, *rows]

    def _strip(self, plot: _Plot) -> Text:
        """The digit row: each column the value of its newest point, shaded where the plot is."""
        digits = [" "] * plot.cols
        for t, value in plot.data.strip:
            col = plot._x(t) // 2
            if 0 <= col < plot.cols:
                digits[col] = str(value) if 0 <= value <= 9 else "+"
        axis, off = self._style("axis"), self._style("off")
        line = Text(f"{plot.data.strip_label[:_AXIS - 1]:>{_AXIS - 1}}▕", style=axis)
        for col, digit in enumerate(digits):
            line.append(digit, off if plot.off[col] else Style())
        return line

    def _rows(self, plot: _Plot) -> list[Text]:
        """One Text per plot row, appending runs of equal style (cells one by one cost 10x)."""
        kinds = {1: self._style("series-1"), 2: self._style("series-2"), -1: self._style("threshold-off"),
                 -2: self._style("threshold-on"), 0: Style()}
        off, axis = self._style("off"), self._style("axis")
        styles = {(kind, shaded): (off + style if shaded else style) for kind, style in kinds.items()
                  for shaded in (False, True)}
        rows = []
        for row in range(plot.rows):
            label = si(plot.top, plot.data.unit_fmt) if row == 0 else ("0" if row == plot.rows - 1 else "")
            line = Text(f"{label:>{_AXIS - 1}}▕", style=axis)
            run: list[str] = []
            key: tuple[int, bool] | None = None
            for col in range(plot.cols):
                char, kind = plot.cell(col, row)
                cell_key = (kind, plot.off[col])
                if cell_key != key and run:
                    line.append("".join(run), styles[key])  # type: ignore[index]
                    run = []
                key = cell_key
                run.append(char)
            if run and key is not None:
                line.append("".join(run), styles[key])
            rows.append(line)
        return rows


class _Plot:
    """The braille grid of one chart: dots per series, shaded columns, threshold rows."""

    def __init__(self, cols: int, rows: int, data: ChartData) -> None:
        self.cols, self.rows, self.data = cols, rows, data
        self.xres, self.yres = cols * 2, rows * 4
        values = [v for s in data.series for _, v in s] + [v for v, _ in data.thresholds]
        self.top = data.y_top if data.y_top else max([data.y_min_top, *values]) * 1.1
        self.bits = [[0] * (cols * rows) for _ in data.series]
        self.off = [False] * cols
        self.rules = {self._row(v): -(i + 1) for i, (v, _) in enumerate(data.thresholds[:2])}
        for i, points in enumerate(data.series[:2]):
            self._draw(i, points)
        for t0, t1 in data.off_spans:
            self._shade(t0, t1)

    def _x(self, t: float) -> int:
        start = self.data.now - self.data.window_s
        return round((t - start) / self.data.window_s * (self.xres - 1))

    def _y(self, value: float) -> int:
        """Dot row from the top."""
        return self.yres - 1 - min(max(round(value / self.top * (self.yres - 1)), 0), self.yres - 1)

    def _row(self, value: float) -> int:
        return self._y(value) // 4

    def _draw(self, series: int, points: tuple[tuple[float, float], ...]) -> None:
        buckets: dict[int, list[float]] = {}
        for t, value in points:
            x = self._x(t)
            if 0 <= x < self.xres:
                buckets.setdefault(x, []).append(value)
        previous: int | None = None
        for x in sorted(buckets):
            y = self._y(sum(buckets[x]) / len(buckets[x]))
            low, high = (y, y) if previous is None else (min(y, previous), max(y, previous))
            for dot in range(low, high + 1):
                self._set(series, x, dot)
            previous = y

    def _set(self, series: int, x: int, y: int) -> None:
        self.bits[series][(y // 4) * self.cols + x // 2] |= _DOTS[x % 2][y % 4]

    def _shade(self, t0: float, t1: float) -> None:
        first, last = max(self._x(t0) // 2, 0), min(self._x(t1) // 2, self.cols - 1)
        for col in range(first, last + 1):
            self.off[col] = True

    def cell(self, col: int, row: int) -> tuple[str, int]:
        """The character of one cell and what drew it: series n>0, threshold -n, nothing 0."""
        index = row * self.cols + col
        for series, bits in enumerate(self.bits):
            if bits[index]:
                dots = 0
                for grid in self.bits:
                    dots |= grid[index]
                return chr(0x2800 | dots), series + 1
        if row in self.rules:
            return "┈", self.rules[row]
        return " ", 0
