"""One GPU's screen: its history (utilisation, memory, power, temperature, clocks) and its processes.

Opened with Enter on a GPU of the dashboard (or a click, or the palette); Esc
returns. The app hands it a :class:`GpuView` each redraw, computed from the
timeline it already keeps, so the charts span the console's whole window the
moment the screen opens.
"""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.containers import Grid
from textual.content import Content
from textual.screen import Screen
from textual.widgets import Footer, Static

from specctl.console.tui.model.gpu_charts import GpuView
from specctl.widgets.gpu_panel import short_name
from specctl.widgets.gpu_processes import GpuProcesses
from specctl.widgets.timechart import TimeChart

CHARTS = ("gpu-util", "gpu-mem", "gpu-power", "gpu-temp", "gpu-clocks")
WIDE = 120  # from this many columns: three charts a row, else two


class GpuScreen(Screen):
    """GPU ``index`` of the server the console shows."""

    DEFAULT_CSS = """
    GpuScreen {
        layout: vertical;
        background: $background;
        #gpu-head { height: auto; padding: 0 1; background: $surface; }
        #gpu-charts {
            grid-size: 2;
            grid-gutter: 0 1;
            height: 1fr;
            min-height: 8;
            padding: 0 1;
        }
        #gpu-charts TimeChart { height: 100%; min-height: 4; }
        #gpu-clocks { column-span: 2; }
        #gpu-procs { border-top: hkey $panel; }
    }
    """

    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index

    def compose(self) -> ComposeResult:
        yield Static(id="gpu-head")
        with Grid(id="gpu-charts"):
            for ident in CHARTS:
                yield TimeChart(id=ident)
        yield GpuProcesses(id="gpu-procs")
        yield Footer()

    def on_resize(self, event: events.Resize) -> None:
        self.query_one("#gpu-charts", Grid).styles.grid_size_columns = 3 if event.size.width >= WIDE else 2

    def show(self, view: GpuView, lost: bool = False) -> None:
        self.query_one("#gpu-head", Static).update(head(view, lost))
        for ident, data in zip(CHARTS, view.charts):
            self.query_one(f"#{ident}", TimeChart).data = data
        gpu = view.gpu or {}
        self.query_one(GpuProcesses).show(gpu.get("processes") if view.gpu is not None else None,
                                          stale=lost)


def head(view: GpuView, lost: bool) -> Content:
    """Which GPU, what state, and where the numbers come from, in one or two lines."""
    gpu = view.gpu or {}
    name = gpu.get("name")
    parts = [Content.styled(f"GPU {view.index}", "bold"), Content(f" · {short_name(name)}")]
    if gpu.get("uuid"):
        parts.append(Content.styled(f" · {gpu['uuid']}", "$foreground-muted"))
    if view.sim:
        parts.append(Content.styled(" SIM ", "bold $background on $warning"))
    if lost:
        parts.append(Content.styled(" old: the supervisor is lost ", "bold $background on $error"))
    state = gpu.get("state")
    line = Content.assemble(*parts)
    if view.gpu is None:
        return Content.assemble(line, "\n", Content.styled("not in the latest sample", "$warning"))
    if state not in (None, "ok"):
        why = f"{str(state).upper()}: {gpu.get('error') or 'no readings'}"
        return Content.assemble(line, "\n", Content.styled(why, "bold $error"))
    return line
