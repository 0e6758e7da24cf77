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
from specctl.runtime.core import records, view_only
from specctl.runtime.core.records import Record, Sample, Settings

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
    depth: int | None = None  # draft steps running at this sample (0 = off); None where it had no spec


@dataclass(frozen=True)
class GpuPoint:
    """One sample's reading of one GPU, the record as the sample has it, for its screen's charts."""

    t: float
    gpu: records.Gpu


@dataclass
class Timeline:
    """Latest sample, chart history, last switch and the log records not yet shown."""

    latest: Sample | None = None
    points: deque[Point] = field(default_factory=deque)
    gpu_points: dict[int, deque[GpuPoint]] = field(default_factory=dict)  # by GPU index
    last_switch: records.Event | None = None
    pending_log: list[Record] = field(default_factory=list)
    reset_log: bool = False  # the log must be cleared before pending_log is shown
    now: float | None = None  # journal time of the newest record: "ago" is measured from it
    supervisor_stopped: bool = False  # its last word was supervisor_stop: the server it sampled is no longer watched
    last_ready: Sample | None = None  # the newest sample of a ready server: "last seen" while it is not
    unreachable_since: float | None = None  # journal time of the first sample of the current UNREACHABLE spell
    router: records.Event | None = None  # the supervisor found a router where a server was expected

    def fold(self, record: Record | dict[str, Any]) -> None:
        """One record in: a typed :data:`Record` (records.parse checked any from outside), or a link's RESET."""
        if record["kind"] == RESET:
            self._reset()
        elif record["kind"] == "sample":
            self._fold_sample(record)  # type: ignore[arg-type]  # kind says which record it is
        else:
            name = record.get("event")
            if name == records.SPEC_SWITCH:
                self.last_switch = record  # type: ignore[assignment]
            elif name == records.ATTACHED_ROUTER:
                self.router = record  # type: ignore[assignment]
            elif name in (records.SUPERVISOR_STOP, records.SUPERVISOR_START):
                self.supervisor_stopped = name == records.SUPERVISOR_STOP
            self.pending_log.append(record)  # type: ignore[arg-type]
            del self.pending_log[:-LOG_LINES]
        t = float(record["t"])
        self.now = t if self.now is None else max(self.now, t)

    def take_log(self) -> tuple[bool, list[Record]]:
        """Records for the event log since the last call, and whether to clear it first."""
        reset, lines = self.reset_log, self.pending_log
        self.reset_log, self.pending_log = False, []
        return reset, lines

    def _reset(self) -> None:
        self.latest = None
        self.points.clear()
        self.gpu_points.clear()
        self.last_switch = None
        self.pending_log = []
        self.reset_log = True
        self.now = None
        self.supervisor_stopped = False
        self.last_ready = None
        self.unreachable_since = None
        self.router = None

    def _fold_sample(self, record: Sample) -> None:
        self.latest = record
        self.supervisor_stopped = False
        server, spec = record["server"], record["spec"]
        state = server.get("state")
        if state == "ready":
            self.last_ready = record
        if state != "unreachable":
            self.unreachable_since = None
        elif self.unreachable_since is None:
            self.unreachable_since = float(record["t"])
        point = Point(float(record["t"]), server.get("gen_tps"), server.get("accept_len"),
                      server.get("running"), server.get("queued"),
                      None if spec is None else bool(spec.get("on")), _depth(spec))
        self.points.append(point)
        while self.points and self.points[0].t < point.t - HISTORY_S:
            self.points.popleft()
        for gpu in record["gpus"]:
            index = records.whole(gpu.get("index"))
            if index is None:
                continue
            history = self.gpu_points.setdefault(index, deque())
            history.append(GpuPoint(point.t, gpu))
            while history[0].t < point.t - HISTORY_S:
                history.popleft()

    def built_depths(self) -> tuple[int, ...]:
        """The positive depths the server was built for (``settings.candidates``), where it has several.

        Empty for a two-state server ({0, steps}, or candidates with one positive depth): there the
        console shows exactly what it always did, and there is no depth to pin but ``steps``.
        """
        candidates = self.settings().get("candidates") or []
        positive = tuple(d for d in candidates if isinstance(d, int) and not isinstance(d, bool) and d > 0)
        return positive if len(positive) > 1 else ()

    def auto_depths(self) -> tuple[int, ...]:
        """The depths auto may choose now (the sample's ``candidates``: the built ones up to ``steps``)."""
        spec = None if self.latest is None else self.latest["spec"]
        candidates = (spec or {}).get("candidates") or []
        return tuple(d for d in candidates if isinstance(d, int) and not isinstance(d, bool))

    @property
    def view_only(self) -> bool:
        """The server answers but reports no specctl state (no plugin, or no speculation): nothing can steer it."""
        return self.view_only_reason is not None

    @property
    def view_only_reason(self) -> str | None:
        """Why the server is view only (runtime/core/view_only.py: no_plugin, no_speculation), or None."""
        return view_only.reason(self.latest)

    def view_only_refusal(self) -> str:
        """The line a control gets on a view-only server: the supervisor's own words for it."""
        tp = None if self.latest is None else self.latest["server"].get("tp")
        return view_only.refusal(self.view_only_reason or view_only.NO_PLUGIN, tp)

    def thresholds(self) -> tuple[float | None, float | None]:
        """(off_at, on_at) of the latest sample's settings, for the request chart."""
        settings = self.settings()
        return settings.get("off_at"), settings.get("on_at")

    def settings(self) -> Settings:
        """The policy settings of the latest sample, {} when it has none."""
        spec = None if self.latest is None else self.latest["spec"]
        return (spec or {}).get("settings") or {}

    def max_accept(self) -> float:
        """The accept-length chart's top: steps + 1 (every draft token plus the bonus one)."""
        steps = self.settings().get("steps")
        return 1.0 + (steps if steps is not None and 0 < steps < 64 else 3.0)


def _depth(spec: Any) -> int | None:
    """The depth a spec reports (``depth``, or ``steps`` from a server before depths), None without one."""
    if not isinstance(spec, dict):
        return None
    value = spec.get("depth", spec.get("steps"))
    return value if isinstance(value, int) and not isinstance(value, bool) else None
