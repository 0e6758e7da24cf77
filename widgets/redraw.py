"""Repaint a widget only when what it shows changed, not whenever its data did.

A sample brings new numbers every half second, most of which read the same
once formatted (a temperature of 50.1 then 50.2 °C shows "50°C" both times),
and the time in a banner moves on while its words stay. Laying the text out
is cheap; turning it into strips and styling every line is what costs. So a
widget built on :class:`RedrawOnChange` works out its text when its data are
set and repaints only if that text (characters and styles) differs from the
text it last rendered.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Span, Text
from textual.widget import Widget

TextKey = tuple[str, tuple[Span, ...], "str | Style"]


def text_key(text: Text) -> TextKey:
    """What a Text looks like on screen: equal keys draw equal cells."""
    return text.plain, tuple(text.spans), text.style


def partial_style(widget: Widget, component: str, cache: dict[str, Style]) -> Style:
    """A component's own (partial) style, looked up once per ``cache``.

    ``get_component_rich_style(partial=True)`` gives the same Style, but forgets its answers at every
    refresh and works out the full style through the ancestors as well, which a partial one does not
    need: looked up for every cell run of every repaint, that was a tenth of the console's CPU.
    """
    style = cache.get(component)
    if style is None:
        style = cache[component] = widget.get_component_styles(component).partial_rich_style
    return style


class RedrawOnChange(Widget):
    """A widget whose ``render`` is ``content()``; ``redraw()`` repaints only where that changed.

    Declare its data reactives with ``repaint=False`` and call ``redraw()`` from their watchers.
    A skipped repaint is always safe: the screen shows the last text ``render`` returned, or a
    repaint is already pending (a resize, a style change, an earlier change of data) and will
    draw the newest data.
    """

    _shown: TextKey | None = None  # the text last rendered, None before the first render

    def content(self) -> Text:
        """The widget's text for its data now."""
        raise NotImplementedError

    def render(self) -> Text:
        text = self.content()
        self._shown = text_key(text)
        return text

    def redraw(self) -> None:
        """Repaint where the text differs from the one on screen (or none has been drawn yet)."""
        if not self.is_mounted or self._shown is None or text_key(self.content()) != self._shown:
            self.refresh()
