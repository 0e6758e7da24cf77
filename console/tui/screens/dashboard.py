"""The dashboard: banner, start-up progress, controls, GPU panels, charts and event log.

The app hands it the timeline and a few words of status (``show``); it picks
plain data out for each widget and sets it as attributes. It adapts to the
terminal: bordered panels in a grid where they all fit in half the height,
one line per GPU otherwise (see ``gpu_layout``).
"""

from __future__ import annotations

from typing import Any

from textual import events
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from specctl.console.tui.actions import buttons
from specctl.console.tui.model.charts import build_charts
from specctl.console.tui.model.timeline import Timeline
from specctl.runtime.core import view_only
from specctl.runtime.core.records import Gpu, Sample
from specctl.widgets.banner import BannerState, SpecBanner
from specctl.widgets.controls import ControlBar
from specctl.widgets.event_log import EventLog
from specctl.widgets.gpu_panel import GpuPanel
from specctl.widgets.startup import StartupProgress
from specctl.widgets.timechart import TimeChart

COMPACT_WIDTH = 100  # below this many columns: one line per GPU
PANEL_WIDTH, PANEL_HEIGHT, MAX_COLUMNS = 40, 7, 4
WINDOW_S = 300.0
#: Above the footer while the view is not live: what an operator can still do (80 columns each).
LOST_NOTE = "still works: ? help, c theme, q quit; controls return when the supervisor does"
UNREACHABLE_NOTE = "server not answering · controls still work: ctrl+p Restart the model server"


class Dashboard(Screen):
    """The one screen operators live in."""

    def __init__(self, source: str, can_control: bool) -> None:
        super().__init__()
        self._source = source
        self._can_control = can_control
        self._gpu_count = 0
        self._note = ""  # the note above the footer now ("" while hidden)

    def compose(self) -> ComposeResult:
        yield SpecBanner()
        yield StartupProgress()
        yield ControlBar(buttons())
        yield VerticalScroll(id="gpus")
        with Horizontal(id="charts"):
            yield TimeChart(id="chart-tps")
            yield TimeChart(id="chart-accept")
            yield TimeChart(id="chart-requests")
        yield EventLog(id="log")
        yield Static(id="stale-note")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(ControlBar).can_control = self._can_control
        self.query_one(SpecBanner).state = BannerState(source=self._source, status="connecting…")

    def set_can_control(self, can_control: bool) -> None:
        """Grey the control buttons while nothing can be steered (a lost connection), and back."""
        self.query_one(ControlBar).can_control = can_control

    def on_resize(self, event: events.Resize) -> None:
        self._lay_out_gpus()

    # -- attributes down --------------------------------------------------
    def show(self, timeline: Timeline, status: str, paused: bool,
             lost: tuple[float, float] | None = None) -> None:
        """Draw the timeline; ``status`` is the banner's extra words (PAUSED, replay position...).

        ``lost`` is (since, now) in wall time while the link to the supervisor is gone: then the banner
        says SUPERVISOR LOST, every figure is grey or `–`, and the note above the footer says what works.
        """
        sample = timeline.latest
        self.query_one(SpecBanner).state = banner_state(timeline, self._source, status, lost)
        self._show_note(timeline, lost)
        server = {} if sample is None else sample["server"]
        self.query_one(StartupProgress).progress = server.get("progress") if server.get("state") == "starting" else None
        self.query_one(ControlBar).paused = paused
        self._show_gpus(gpu_list(sample), stale=lost is not None)
        tps, accept, requests = build_charts(timeline, WINDOW_S, lost=lost is not None)
        self.query_one("#chart-tps", TimeChart).data = tps
        self.query_one("#chart-accept", TimeChart).data = accept
        self.query_one("#chart-requests", TimeChart).data = requests
        clear, records = timeline.take_log()
        if clear or records:
            self.query_one(EventLog).show(records, clear=clear)

    def show_status(self, timeline: Timeline, status: str, lost: tuple[float, float] | None = None) -> None:
        """Only the banner and the note: while the view is paused the rest stays as it was."""
        self.query_one(SpecBanner).state = banner_state(timeline, self._source, status, lost)
        self._show_note(timeline, lost)

    def _show_note(self, timeline: Timeline, lost: tuple[float, float] | None) -> None:
        unreachable = timeline.unreachable_since is not None and self._can_control  # a replay has no controls
        note = (LOST_NOTE if lost else UNREACHABLE_NOTE if unreachable
                else view_only_note(timeline) if timeline.view_only and self._can_control
                else "")
        if note != self._note:  # Static.update lays the whole screen out again: only when the words change
            self._note = note
            widget = self.query_one("#stale-note", Static)
            widget.update(note)
            widget.display = bool(note)

    def _show_gpus(self, gpus: list[dict[str, Any]], stale: bool = False) -> None:
        box = self.query_one("#gpus", VerticalScroll)
        panels = list(box.query(GpuPanel))
        if len(panels) != len(gpus):
            for panel in panels[len(gpus):]:
                panel.remove()
            new = [GpuPanel() for _ in range(len(gpus) - len(panels))]
            if new:
                box.mount_all(new)
            panels = (panels + new)[:len(gpus)]
            self._gpu_count = len(gpus)
            self._lay_out_gpus(panels)
        for panel, gpu in zip(panels, gpus):
            panel.gpu = gpu
            panel.stale = stale

    def _lay_out_gpus(self, panels: list[GpuPanel] | None = None) -> None:
        compact, columns = gpu_layout(self.size.width, self.size.height, self._gpu_count)
        self.set_class(compact, "-compact")
        box = self.query_one("#gpus", VerticalScroll)
        for panel in panels if panels is not None else box.query(GpuPanel):
            panel.compact = compact
        box.styles.grid_size_columns = columns


def gpu_layout(width: int, height: int, gpus: int) -> tuple[bool, int]:
    """(compact, columns): bordered panels only where all of them fit in half the height.

    Otherwise one line per GPU, so 8 GPUs fit 80x24 and charts keep their room.
    """
    columns = max(1, min(gpus, width // PANEL_WIDTH, MAX_COLUMNS))
    rows = -(-gpus // columns)
    compact = width < COMPACT_WIDTH or rows * PANEL_HEIGHT > height // 2
    return compact, 1 if compact else columns


def gpu_list(sample: Sample | None) -> list[Gpu]:
    """The sample's GPUs (none before the first sample)."""
    return [] if sample is None else sample["gpus"]


WATCH_BADGES = {view_only.NO_SPECULATION: "NO SPEC", view_only.NO_PLUGIN: "NO PLUGIN", view_only.TREE: "TREE"}


def view_only_note(timeline: Timeline) -> str:
    """The fix under a view-only banner, in 80 columns: the refusal's own command, with the server's TP size.

    view_only.note words it (a draft model for a server without speculation, a chain for a tree), so a
    TP-8 server's note says ``--tp 8``, as the refusal a key press shows does.
    """
    sample = timeline.latest
    tp = None if sample is None else sample["server"].get("tp")
    return view_only.note(timeline.view_only_reason or view_only.NO_PLUGIN, tp)


def banner_state(timeline: Timeline, source: str, status: str,
                 lost: tuple[float, float] | None = None) -> BannerState:
    """Pick the banner's fields out of the latest sample and the last switch event."""
    sample = timeline.latest
    spec = None if sample is None else sample["spec"]
    server = {} if sample is None else sample["server"]
    switch = timeline.last_switch or {}
    steps, steps_on = (spec or {}).get("steps"), timeline.settings().get("steps")
    batch = switch.get("batch_size")
    return BannerState(
        spec_on=None if spec is None else bool(spec.get("on")),
        mode=(spec or {}).get("mode"),
        steps=None if steps is None else int(steps),
        steps_on=None if steps_on is None else int(steps_on),
        reason=switch.get("reason") or (spec or {}).get("reason"),
        switch_t=switch.get("t"),
        switch_batch=None if batch is None else int(batch),
        now=timeline.now,
        # a journal that ends with its supervisor stopping must not end on "READY"
        server_state="unwatched" if timeline.supervisor_stopped else server.get("state"),
        server_error=("(the supervisor stopped)" if timeline.supervisor_stopped
                      else None if server.get("error") is None else str(server.get("error"))),
        sim=sample is not None and sample.get("sim") is True,
        slow_off=((spec or {}).get("off_state") or {}).get("fast") is False,
        failed_gpus=tuple(int(g["index"]) for g in gpu_list(sample)
                          if g.get("state") == "failed" and isinstance(g.get("index"), int)),
        source=source,
        status=status,
        lost_since=None if lost is None else lost[0],
        lost_now=None if lost is None else lost[1],
        last_seen_on=(None if timeline.unreachable_since is None
                      else _spec_on(None if timeline.last_ready is None else timeline.last_ready["spec"])),
        unreachable_since=timeline.unreachable_since,
        depths=timeline.auto_depths() if timeline.built_depths() else (),
        watch_only=WATCH_BADGES.get(timeline.view_only_reason or "", ""),
        version=server.get("version") if isinstance(server.get("version"), str) else None,
    )


def _spec_on(spec: Any) -> bool | None:
    return bool(spec.get("on")) if isinstance(spec, dict) else None
