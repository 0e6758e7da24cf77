"""The spec banner: is speculation on, who decided, and is this data real.

Operators glance at this line first, so the state is spelled out in words
(SPEC ON / SPEC OFF, FORCED OFF, SLOW OFF, SIM), never carried by colour alone: it
stays readable with NO_COLOR and on a monochrome terminal.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from rich.style import Style
from rich.text import Text
from textual.reactive import reactive

from specctl.widgets.redraw import LineRedraw, partial_style

MODE_WORDS = {"auto": "AUTO", "on": "FORCED ON", "off": "FORCED OFF"}
GOOD_SERVER_STATES = ("ready",)


@dataclass(frozen=True)
class BannerState:
    """Everything the banner shows, already picked out of records."""

    spec_on: bool | None = None  # None: the server could not be asked
    mode: str | None = None
    steps: int | None = None  # draft steps running now (0 while off)
    steps_on: int | None = None  # draft steps configured for when it is on
    reason: str | None = None
    switch_t: float | None = None  # journal time of the last switch
    switch_batch: int | None = None
    now: float | None = None  # journal time of the newest record, for "ago"
    server_state: str | None = None
    server_error: str | None = None
    sim: bool = False
    slow_off: bool = False  # the server's "off" is SGLang's slow steps-0 state, not fast off
    failed_gpus: tuple[int, ...] = ()  # said here too: with many GPUs their panels may be scrolled away
    source: str = ""
    status: str = ""  # "PAUSED", "replay 0:42 / 5:00 ▶ x1", a lost connection...
    lost_since: float | None = None  # wall time the link to the supervisor was lost: nothing below is live
    lost_now: float | None = None  # wall time now, for how long ago
    last_seen_on: bool | None = None  # speculation in the last sample of a ready server (while it is unreachable)
    unreachable_since: float | None = None  # journal time the server stopped answering
    # A server built for several depths: the depths auto may choose now (the sample's candidates, 0
    # included). Empty for a two-state server, which reads exactly as before depths existed.
    depths: tuple[int, ...] = ()
    # A server specctl can only watch: the badge's words in place of "SPEC ?" ("NO SPEC", "NO PLUGIN");
    # empty for a server it steers. The status line says why and the note under the banner what to change.
    watch_only: str = ""
    version: str | None = None  # the SGLang release the server runs, beside where it is


def clock(t: float) -> str:
    """A record's time as local HH:MM:SS (from the record's own t, never the wall clock)."""
    return time.strftime("%H:%M:%S", time.localtime(t))


def ago(seconds: float) -> str:
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.0f}s ago"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m{seconds % 60:02.0f}s ago"
    return f"{seconds // 3600:.0f}h{seconds % 3600 // 60:02.0f}m ago"


class SpecBanner(LineRedraw):
    """Two lines: the speculation state and server on the first, the last switch on the second."""

    DEFAULT_CSS = """
    SpecBanner {
        height: 2;
        padding: 0 1;
        background: $panel;
        & > .spec-banner--on { background: $success; color: $background; text-style: bold; }
        & > .spec-banner--off { background: $error; color: $background; text-style: bold; }
        & > .spec-banner--unknown { background: $foreground-muted; color: $background; text-style: bold; }
        & > .spec-banner--mode { text-style: bold; }
        & > .spec-banner--forced { color: $warning; text-style: bold; }
        & > .spec-banner--sim { background: $warning; color: $background; text-style: bold; }
        & > .spec-banner--bad { color: $error; text-style: bold; }
        & > .spec-banner--muted { color: $foreground-muted; }
        & > .spec-banner--status { color: $warning; text-style: bold; }
    }
    """
    COMPONENT_CLASSES = {"spec-banner--on", "spec-banner--off", "spec-banner--unknown", "spec-banner--mode",
                         "spec-banner--forced", "spec-banner--sim", "spec-banner--bad", "spec-banner--muted",
                         "spec-banner--status"}

    #: A new state (every sample: ``now`` moves on) repaints only the lines whose words differ (widgets/redraw.py).
    state: reactive[BannerState] = reactive(BannerState, repaint=False)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._styles: dict[str, Style] = {}  # component styles of one render

    def watch_state(self, state: BannerState) -> None:
        self.redraw()

    def _style(self, name: str) -> Style:
        return partial_style(self, f"spec-banner--{name}", self._styles)

    def content_lines(self) -> list[Text]:
        return self.content().split("\n", allow_blank=True)

    def content(self) -> Text:
        """Two lines that never wrap: narrow, the least needed parts go first, so the status line stays."""
        self._styles = {}
        width = self.content_region.width or 10_000
        first = self._first_line()
        if first.cell_len > width:
            first = self._first_line(steps=False)
        second = self._second_line()
        if second.cell_len > width and self.state.status:
            second = self._second_line(status_first=True)
        for line in (first, second):
            line.no_wrap = True
            line.truncate(width, overflow="ellipsis")
        return Text("\n").join([first, second])

    def _lost_line(self) -> Text:
        """The link is gone: say so first, and that every figure below is from before it went."""
        s = self.state
        assert s.lost_since is not None
        line = Text.assemble((" SUPERVISOR LOST ", self._style("off")), f" since {clock(s.lost_since)}")
        if s.lost_now is not None:
            line.append(f" ({ago(s.lost_now - s.lost_since)})")
        line.append("  figures below are old, not live", self._style("muted"))
        if s.sim:
            line.append("  ")
            line.append(" SIM ", self._style("sim"))
        return line

    def _first_line(self, steps: bool = True) -> Text:
        s = self.state
        if s.lost_since is not None:
            return self._lost_line()
        badge = {True: (" SPEC ON ", "on"), False: (" SPEC OFF ", "off"), None: (" SPEC ? ", "unknown")}
        word, style = badge[s.spec_on]
        if s.watch_only and s.spec_on is None:  # nothing to switch: what it is, not a question mark
            return self._watch_line(s.watch_only)
        if s.spec_on is None and s.last_seen_on is not None:  # an unreachable server: what it did last, marked old
            word = f" SPEC ? (was {'ON' if s.last_seen_on else 'OFF'}) "
        mode = MODE_WORDS.get(s.mode or "", "mode ?")
        pinned = s.steps_on if s.depths and s.mode == "on" else None  # forced on at one of several depths
        if pinned is not None:
            mode = f"{mode} at {pinned}"
        line = Text.assemble((word, self._style(style)), " ",
                             (mode, self._style("mode" if s.mode in (None, "auto") else "forced")))
        switching = (s.mode, s.spec_on) in (("off", True), ("on", False))  # forced, the next step will switch
        if switching or (pinned is not None and s.steps is not None and s.steps != pinned):
            line.append(" (switching)", self._style("muted"))
        if steps and s.depths:
            if s.steps is not None and s.steps != pinned:  # pinned and there: "at 2" said it already
                line.append(f"  depth {s.steps} of {','.join(map(str, s.depths))}")
        elif steps and s.steps is not None:
            line.append(f"  draft steps {s.steps}")
            if s.steps_on is not None and s.steps_on != s.steps:
                line.append(f" ({s.steps_on} when on)", self._style("muted"))
        return self._server_part(line)

    def _watch_line(self, words: str) -> Text:
        """A server specctl watches but cannot steer: no mode, no draft steps, only what is there."""
        line = Text.assemble((f" {words} ", self._style("unknown")), " ", ("view only", self._style("mode")))
        return self._server_part(line)

    def _server_part(self, line: Text) -> Text:
        """The server's state, failed GPUs, slow off and the simulator mark, after the speculation part."""
        s = self.state
        line.append("  server ", self._style("muted"))
        server = (s.server_state or "?").upper()
        line.append(server, self._style("mode" if s.server_state in GOOD_SERVER_STATES else "bad"))
        if s.unreachable_since is not None:
            line.append(f" since {clock(s.unreachable_since)}", self._style("bad"))
        if s.server_error and s.server_state not in GOOD_SERVER_STATES:
            line.append(f" {s.server_error}", self._style("bad"))
        if s.failed_gpus:
            line.append("  ")
            word = "GPU" if len(s.failed_gpus) == 1 else "GPUs"
            line.append(f"{word} {','.join(map(str, s.failed_gpus))} FAILED", self._style("bad"))
        if s.slow_off:
            line.append("  ")
            line.append("SLOW OFF", self._style("bad"))
        if s.sim:
            line.append("  ")
            line.append(" SIM ", self._style("sim"))
        return line

    def _second_line(self, status_first: bool = False) -> Text:
        s = self.state
        line = Text(style=self._style("muted"))
        if status_first:  # what the view is (paused, replaying, link lost) before what happened
            line.append(s.status, self._style("status"))
            line.append("  ")
        if s.switch_t is not None:
            line.append("last switch ")
            line.append(s.reason or "?", Style(bold=True))
            if s.switch_batch is not None:
                line.append(f" (batch {s.switch_batch})")
            line.append(f" at {clock(s.switch_t)}")
            if s.now is not None:
                line.append(f", {ago(s.now - s.switch_t)}")
        elif s.reason:
            line.append("last switch ")
            line.append(s.reason, Style(bold=True))
        elif not s.watch_only:  # a server it only watches has nothing to switch: the status says why
            line.append("no switch yet")
        else:
            line.rstrip()
        if status_first:
            return line
        line.append(f"  · {s.source}")
        if s.version:
            line.append(f" · SGLang {s.version}")
        if s.status:
            line.append("  ")
            line.append(s.status, self._style("status"))
        return line
