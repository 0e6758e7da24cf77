"""Repaint only the lines of a widget that changed, not the whole widget whenever its data did.

A sample brings new numbers every half second. Many read the same once
formatted (a temperature of 50.1 then 50.2 °C shows "50°C" both times), the
time in a banner moves on while its words stay, and a chart's new point moves
a few rows of dots. Laying the text out is cheap; turning every line into
strips and styling it is what costs. A :class:`LineRedraw` widget lays its
text out when its data are set, compares it line by line with the text on
screen (characters and styles), and repaints only the lines that differ,
through Textual's line API (``render_line``); every other line keeps the
strip already drawn.
"""

from __future__ import annotations

from typing import Any

from rich.style import Style
from rich.text import Span, Text
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.visual import Visual, visualize
from textual.widget import Widget

TextKey = tuple[str, tuple[Span, ...], "str | Style"]


def text_key(text: Text) -> TextKey:
    """What a line looks like on screen: equal keys draw equal cells."""
    return text.plain, tuple(text.spans), text.style


def partial_style(widget: Widget, component: str, cache: dict[str, Style]) -> Style:
    """A component's own (partial) style, looked up once per ``cache``.

    ``get_component_rich_style(partial=True)`` gives the same Style, but forgets its answers at every
    refresh and works out the full style through the ancestors as well, which a partial one does not
    need: looked up for every run of cells of every repaint, that was a tenth of the console's CPU.
    """
    style = cache.get(component)
    if style is None:
        styles = widget.get_component_styles(component)
        style = styles.partial_rich_style
        if styles.has_rule("background") and styles.background.a < 1:
            # a translucent background (`$error 20%`) is a tint of what lies under it; a partial style
            # carries the colour whole, which would paint a full-strength block over the chart
            under = widget.background_colors[1]
            style += Style(bgcolor=(under + styles.background).rich_color)
        cache[component] = style
    return style


class LineRedraw(Widget):
    """A widget drawn line by line from ``content_lines()``; ``redraw()`` repaints the lines that changed.

    Declare the data reactives with ``repaint=False`` and call ``redraw()`` from their watchers.
    Invariant: each line on screen is the one in ``_lines``, or a repaint of it is pending. A repaint
    of the whole widget (Textual asks for one on new styles or classes, a theme, a first draw) lays
    every line out afresh, as does a new size. Where a line would be wider than the widget, or a
    text selection is shown, the widget is drawn whole, as a plain ``render`` would be, so wrapping
    and selections read exactly as before.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._lines: list[Text] | None = None  # the lines on screen (or about to be); None: lay out afresh
        self._lines_size = Size(0, 0)  # the content size they were laid out for
        self._whole: list[Strip] | None = None  # the widget drawn whole (a selection, a line too wide)

    def content_lines(self) -> list[Text]:
        """The widget's lines for its data and size now."""
        raise NotImplementedError

    def redraw(self) -> None:
        """Repaint the lines that differ from those on screen; all of them where none are."""
        old = self._lines
        if old is None or self._lines_size != self.size:
            self.refresh()
            return
        new = self._lay_out()
        self._lines = new
        width = self.size.width
        if len(new) != len(old) or self._too_wide(new):
            self.refresh()
            return
        changed = [Region(0, y, width, 1) for y, (was, now) in enumerate(zip(old, new))
                   if text_key(was) != text_key(now)]
        if changed:
            self.refresh(*changed)

    def refresh(self, *regions: Region, repaint: bool = True, layout: bool = False,
                recompose: bool = False) -> LineRedraw:
        if repaint and not regions:
            self._lines = None
        self._whole = None
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def render(self) -> Text:
        """The whole text: what a selection copies, and what is drawn where lines cannot be."""
        return Text("\n").join(self._current())

    def render_line(self, y: int) -> Strip:
        lines = self._current()
        width = self.size.width
        if self.text_selection is not None or self._too_wide(lines):
            if self._whole is None:
                visual = visualize(self, self.render(), markup=False)
                self._whole = Visual.to_strips(self, visual, width, self.size.height, self.visual_style)
            if y < len(self._whole):
                return self._whole[y]
        elif y < len(lines):
            visual = visualize(self, lines[y], markup=False)
            return Visual.to_strips(self, visual, width, 1, self.visual_style)[0]
        return Strip.blank(width, self.visual_style.rich_style)

    def _current(self) -> list[Text]:
        if self._lines is None or self._lines_size != self.size:
            self._lines = self._lay_out()
        return self._lines

    def _lay_out(self) -> list[Text]:
        self._lines_size = self.size
        return self.content_lines()

    def _too_wide(self, lines: list[Text]) -> bool:
        width = self.size.width
        return any(line.cell_len > width for line in lines)
