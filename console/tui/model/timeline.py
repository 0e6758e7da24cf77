"""What the console knows, folded from records: pure data, no Textual.

The link's worker folds every record in as it arrives (cheap), and the screen
redraws from here at its own pace, so a burst of records (a replay seek, a
subscriber catching up) costs one redraw, not thousands.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from specctl.console.tui.links import RESET

HISTORY_S = 600.0  # how much chart history is kept; the charts show the last few minutes of it
LOG_LINES = 500


@dataclass(frozen=True)
class Point:
    """One sample's numbers for the charts; None where the sample had no value."""

    t: float
    gen_tps: float | None
    accept_len: float | None
    running: float | None
    queued: float | None
    spec_on: bool | None


@dataclass
class Timeline:
    """Latest sample, chart history, last switch and the log records not yet shown."""

    latest: dict[str, Any] | None = None
    points: deque[Point] = field(default_factory=deque)
    last_switch: dict[str, Any] | None = None
    pending_log: list[dict[str, Any]] = field(default_factory=list)
    reset_log: bool = False  # the log must be cleared before pending_log is shown
    now: float | None = None  # journal time of the newest record: "ago" is measured from it
    supervisor_stopped: bool = False  # its last word was supervisor_stop: the server it sampled is no longer watched
    last_ready: dict[str, Any] | None = None  # the newest sample of a ready server: "last seen" while it is not
    unreachable_since: float | None = None  # journal time of the first sample of the current UNREACHABLE spell

    def fold(self, record: dict[str, Any]) -> None:
        kind = record.get("kind")
        t = record.get("t")
        if kind == RESET:
            self._reset()
        elif kind == "sample":
            self._fold_sample(record)
        elif kind in ("event", "command"):
            if record.get("event") == "spec_switch" and isinstance(record.get("t"), (int, float)):
                self.last_switch = record
            if record.get("event") in ("supervisor_stop", "supervisor_start"):
                self.supervisor_stopped = record.get("event") == "supervisor_stop"
            self.pending_log.append(record)
            del self.pending_log[:-LOG_LINES]
        if isinstance(t, (int, float)):
            self.now = float(t) if self.now is None else max(self.now, float(t))

    def take_log(self) -> tuple[bool, list[dict[str, Any]]]:
        """Records for the event log since the last call, and whether to clear it first."""
        reset, lines = self.reset_log, self.pending_log
        self.reset_log, self.pending_log = False, []
        return reset, lines

    def _reset(self) -> None:
        self.latest = None
        self.points.clear()
        self.last_switch = None
        self.pending_log = []
        self.reset_log = True
        self.now = None
        self.supervisor_stopped = False
        self.last_ready = None
        self.unreachable_since = None

    def _fold_sample(self, record: dict[str, Any]) -> None:
        if not isinstance(record.get("t"), (int, float)):
            return
        self.latest = record
        self.supervisor_stopped = False
        server = obj(record.get("server"))
        state = server.get("state")
        if state == "ready":
            self.last_ready = record
        if state != "unreachable":
            self.unreachable_since = None
        elif self.unreachable_since is None:
            self.unreachable_since = float(record["t"])
        spec = record.get("spec")
        point = Point(float(record["t"]), num(server.get("gen_tps")), num(server.get("accept_len")),
                      num(server.get("running")), num(server.get("queued")),
                      bool(spec.get("on")) if isinstance(spec, dict) else None)
        self.points.append(point)
        while self.points and self.points[0].t < point.t - HISTORY_S:
            self.points.popleft()

    @property
    def view_only(self) -> bool:
        """The server answers but reports no specctl state: it runs without the plugin, nothing can steer it."""
        sample = obj(self.latest)
        return obj(sample.get("server")).get("state") == "ready" and sample.get("spec") is None

    def thresholds(self) -> tuple[float | None, float | None]:
        """(off_at, on_at) of the latest sample's settings, for the request chart."""
        settings = self.settings()
        return num(settings.get("off_at")), num(settings.get("on_at"))

    def settings(self) -> dict[str, Any]:
        """The policy settings of the latest sample, {} when it has none."""
        return obj(obj(obj(self.latest).get("spec")).get("settings"))


    def max_accept(self) -> float:
        """The accept-length chart's top: steps + 1 (every draft token plus the bonus one)."""
        steps = num(self.settings().get("steps"))
        return 1.0 + (steps if steps is not None and 0 < steps < 64 else 3.0)


# Records may come from any journal file: these read a field as the type the console
# needs, or as "missing", so one odd value cannot take the screen down.
def obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
