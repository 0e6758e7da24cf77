"""The dashboard's three charts, computed from the timeline as plain ChartData."""

from __future__ import annotations

from collections.abc import Callable

from specctl.console.tui.model.timeline import Point, Timeline
from specctl.runtime.core.settings import MAX_BATCH
from specctl.widgets.timechart import ChartData, si


def _series(points: list[Point], pick: Callable[[Point], float | None]) -> tuple[tuple[float, float], ...]:
    return tuple((p.t, v) for p in points if (v := pick(p)) is not None)


def off_spans(points: list[Point]) -> tuple[tuple[float, float], ...]:
    """Where speculation was off: from the first sample that says off to the next that does not."""
    spans: list[tuple[float, float]] = []
    start: float | None = None
    for point in points:
        if point.spec_on is False and start is None:
            start = point.t
        elif point.spec_on is not False and start is not None:
            spans.append((start, point.t))
            start = None
    if start is not None:
        spans.append((start, points[-1].t))
    return tuple(spans)


def _last(series: tuple[tuple[float, float], ...], fmt: str, latest: float | None) -> str:
    """The newest sample's value, or "–" where it had none: a stopped server's last tok/s is not its tok/s now."""
    return si(series[-1][1], fmt) if series and series[-1][0] == latest else "–"


def _old(timeline: Timeline, key: str, fmt: str) -> str:
    """" (was 1.2k)" from the last sample of a ready server, while it does not answer: marked old, not live."""
    if timeline.unreachable_since is None:
        return ""
    value = None if timeline.last_ready is None else timeline.last_ready["server"].get(key)
    return "" if value is None else f" (was {si(value, fmt)})"


def depth_strip(points: list[Point]) -> tuple[tuple[float, int], ...]:
    """(t, depth) for every point that has one: the accept-length chart's digit row."""
    return tuple((p.t, p.depth) for p in points if p.depth is not None)


def threshold_marks(off_at: float | None, on_at: float | None) -> tuple[tuple[tuple[float, str], ...], str]:
    """The request chart's threshold rules and their note.

    An ``off_at`` of MAX_BATCH means never off for load (FA3's rows and a MoE's on
    Triton): a rule a million requests up would squash the running line flat at
    the bottom, so the note says "never" and no rule is drawn (``on_at`` only
    matters after a switch for load, which cannot happen then).
    """
    if off_at is not None and off_at >= MAX_BATCH:
        return (), "┈off_at never"
    marks = tuple((v, name) for v, name in ((off_at, "off_at"), (on_at, "on_at")) if v is not None)
    return marks, "  ".join(f"┈{name} {v:.0f}" for v, name in marks)


def build_charts(timeline: Timeline, window_s: float, *, lost: bool = False) -> tuple[ChartData, ChartData, ChartData]:
    """(tok/s, accepted length, requests) over the last ``window_s`` of journal time.

    ``lost``: the link to the supervisor is gone, so no figure is the newest any more: every legend is `–`.
    The accepted length is `–` while speculation is off (there is nothing to accept). A server built for
    several depths gets a digit row under the accepted length, the depth at each time: accepted length
    and the depth that drafted it read together, in one row (a two-state server's charts are as before).
    """
    now = timeline.now or 0.0
    points = [p for p in timeline.points if p.t >= now - window_s]
    latest = None if lost or not points else points[-1].t
    spans = off_spans(points)
    tps = _series(points, lambda p: p.gen_tps)
    accept = _series(points, lambda p: p.accept_len)
    accept_latest = None if points and points[-1].spec_on is False else latest
    running = _series(points, lambda p: p.running)
    queued = _series(points, lambda p: p.queued)
    marks, rules = threshold_marks(*timeline.thresholds())
    run, queue = _last(running, ".0f", latest), _last(queued, ".0f", latest)
    return (
        ChartData("Output tok/s", now, window_s, (tps,), spans,
                  legend=_last(tps, ".0f", latest) + _old(timeline, "gen_tps", ".0f"),
                  legend_narrow=_last(tps, ".0f", latest), note="shaded: spec off" if spans else ""),
        ChartData("Accept length", now, window_s, (accept,), spans,
                  legend=_last(accept, ".2f", accept_latest) + _old(timeline, "accept_len", ".2f"),
                  legend_narrow=_last(accept, ".2f", accept_latest),
                  y_min_top=timeline.max_accept(), unit_fmt=".1f",
                  strip=depth_strip(points) if timeline.built_depths() else (), strip_label="depth"),
        ChartData("Requests", now, window_s, (running, queued), spans, marks,
                  legend=f"run {run} · queue {queue}", legend_narrow=f"run {run} · q {queue}", note=rules),
    )
