"""One GPU's NVML numbers as coloured bars: a bordered panel, or one line when room is short.

Takes the plain GPU dict of a ``sample`` record (``index``, ``name``,
``state``, ``util``, ``mem_used``, ...); a field that could not be read is
None and shows as a dash and an empty bar, never as a made-up number.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.style import Style
from rich.text import Text
from textual import events
from textual.message import Message
from textual.reactive import reactive

from specctl.runtime.core.records import Gpu
from specctl.widgets.redraw import LineRedraw, partial_style

GIB = 1024**3
BAR_FULL, BAR_EMPTY = "█", "░"
DEAD_STATES = ("failed", "unsupported")
NO_READING_STATES = (*DEAD_STATES, "unread")  # "unread": the simulator is down, the GPU is not known to be


def short_name(name: str | None) -> str:
    """"NVIDIA H200" -> "H200": the vendor is the same on every line."""
    if not name:
        return "GPU"
    return name.removeprefix("NVIDIA ").strip() or name


def fraction(value: float | None, total: float | None) -> float | None:
    if value is None or not total:
        return None
    return min(max(value / total, 0.0), 1.0)


def _fmt(value: float | None, spec: str = ".0f") -> str:
    return "–" if value is None else format(value, spec)


class GpuPanel(LineRedraw):
    """A GPU's utilisation, memory, power, temperature and SM clock.

    It takes focus (tab reaches it) and a click: either way the app may open the GPU's own
    screen; a click says so with :class:`GpuPanel.Chosen`, sent up to whoever listens.
    """

    @dataclass
    class Chosen(Message):
        """The operator clicked this GPU: ``index`` is its NVML index."""

        index: int

    can_focus = True
    DEFAULT_CSS = """
    GpuPanel {
        height: 7;
        padding: 0 1;
        border: round $panel-lighten-2;
        border-title-color: $foreground;
        border-title-style: bold;
        &.-dead { border: round $error; }
        &.-stale { border: round $panel; border-title-color: $foreground-muted; }
        &:focus { border: round $accent; }
        &.-compact { height: 1; border: none; padding: 0; }
        &.-compact:focus { background: $accent 30%; }
        & > .gpu-panel--label { color: $foreground-muted; }
        & > .gpu-panel--util { color: $accent; }
        & > .gpu-panel--low { color: $success; }
        & > .gpu-panel--mid { color: $warning; }
        & > .gpu-panel--high { color: $error; }
        & > .gpu-panel--empty { color: $panel-lighten-2; }
        & > .gpu-panel--dead { color: $error; text-style: bold; }
        & > .gpu-panel--stale { color: $foreground-muted; text-style: dim; }
    }
    """
    COMPONENT_CLASSES = {"gpu-panel--label", "gpu-panel--util", "gpu-panel--low", "gpu-panel--mid",
                         "gpu-panel--high", "gpu-panel--empty", "gpu-panel--dead", "gpu-panel--stale"}

    #: A new reading repaints only the panel's lines that read differently (widgets/redraw.py).
    gpu: reactive[Gpu | None] = reactive(None, repaint=False)
    compact: reactive[bool] = reactive(False, toggle_class="-compact")
    #: The readings are old (the link to the supervisor is lost): drawn grey, the title says "old".
    stale: reactive[bool] = reactive(False, toggle_class="-stale")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._styles: dict[str, Style] = {}  # component styles of one render
        self._title_text = ""

    def on_click(self, event: events.Click) -> None:
        index = (self.gpu or {}).get("index")
        if isinstance(index, int):
            self.post_message(self.Chosen(index))

    def watch_gpu(self, gpu: Gpu | None) -> None:
        self._title()
        self.redraw()

    def watch_stale(self, stale: bool) -> None:
        self._title()

    def _title(self) -> None:
        gpu = self.gpu or {}
        old = " · old" if self.stale else ""
        title = f"GPU {gpu.get('index', '?')} · {short_name(gpu.get('name'))}{old}"
        if title != self._title_text:  # setting a border title repaints, even the same one
            self._title_text = self.border_title = title
        self.set_class(gpu.get("state") in DEAD_STATES, "-dead")

    def content_lines(self) -> list[Text]:
        return self.content().split("\n", allow_blank=True)

    def content(self) -> Text:
        self._styles = {}
        gpu = self.gpu or {}
        if gpu.get("state") in NO_READING_STATES:
            text = self._render_dead(gpu)
        else:
            text = self._render_line(gpu) if self.compact else self._render_full(gpu)
        if self.stale:  # one colour for all of it: a coloured bar reads as a live one
            text = Text(text.plain, style=self._style("stale"))
        return text

    # -- pieces -------------------------------------------------------------
    def _style(self, name: str) -> Style:
        return partial_style(self, f"gpu-panel--{name}", self._styles)

    def _level(self, frac: float | None, warn: float = 0.8, high: float = 0.92) -> Style:
        if frac is None or frac < warn:
            return self._style("low")
        return self._style("mid" if frac < high else "high")

    def _bar(self, frac: float | None, width: int, style: Style) -> Text:
        filled = 0 if frac is None else round(frac * width)
        return Text.assemble((BAR_FULL * filled, style), (BAR_EMPTY * (width - filled), self._style("empty")))

    def _metrics(self, gpu: Gpu) -> list[tuple[str, float | None, Style, str]]:
        """(label, fraction, bar style, numbers) for each barred metric, in display order."""
        util, temp = gpu.get("util"), gpu.get("temp_c")
        used, total = gpu.get("mem_used"), gpu.get("mem_total")
        watts, limit = gpu.get("power_w"), gpu.get("power_limit_w")
        mem, power = fraction(used, total), fraction(watts, limit)
        util_frac = None if util is None else min(max(util / 100.0, 0.0), 1.0)
        temp_frac = None if temp is None else min(max(temp / 100.0, 0.0), 1.0)
        mem_used = None if used is None else used / GIB
        mem_total = None if total is None else total / GIB
        return [
            ("util", util_frac, self._style("util"), f"{_fmt(util)}%"),
            ("mem", mem, self._level(mem, 0.9, 0.97), f"{_fmt(mem_used)}/{_fmt(mem_total)}G"),
            ("power", power, self._level(power), f"{_fmt(watts)}/{_fmt(limit)}W"),
            ("temp", temp_frac, self._level(temp_frac, 0.8, 0.88), f"{_fmt(temp)}°C"),
        ]

    def _render_full(self, gpu: Gpu) -> Text:
        width = max(self.content_region.width, 20)
        bar_width = max(width - 6 - 12, 4)
        label = self._style("label")
        lines = [Text.assemble((f"{name:<6}", label), self._bar(frac, bar_width, style), f" {numbers:>11}")
                 for name, frac, style, numbers in self._metrics(gpu)]
        lines.append(Text.assemble(("SM    ", label), f"{_fmt(gpu.get('sm_clock_mhz'))} MHz"))
        return Text("\n").join(lines)

    def _render_line(self, gpu: Gpu) -> Text:
        width = max(self.content_region.width, 40)
        util, mem, power, temp = self._metrics(gpu)
        head = f"{gpu.get('index', '?')} {short_name(gpu.get('name'))[:6]:<6} "
        tail = f" {temp[3]:>5} {_fmt(gpu.get('sm_clock_mhz'))}MHz"
        texts = [f" {util[3]:>4} ", f" {mem[3]:>8} ", f" {power[3]:>9}"]
        bar_width = max((width - len(head) - len(tail) - sum(len(t) for t in texts)) // 3, 2)
        line = Text(head, style=self._style("label"))
        for (_, frac, style, _), text in zip((util, mem, power), texts):
            line.append_text(self._bar(frac, bar_width, style))
            line.append(text)
        line.append(tail)
        return line

    def _render_dead(self, gpu: Gpu) -> Text:
        state = str(gpu.get("state")).upper()
        style = self._style("dead" if gpu.get("state") in DEAD_STATES else "empty")
        error = gpu.get("error") or ""
        if self.compact:
            label = f"{gpu.get('index', '?')} {short_name(gpu.get('name'))[:6]:<6} "
            return Text.assemble((label, self._style("label")), (state, style), f"  {error}")
        return Text.assemble((state, style), "\n", error, "\nno readings from this GPU")
