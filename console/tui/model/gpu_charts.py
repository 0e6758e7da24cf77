"""One GPU's screen, computed from the timeline as plain data: five charts, a head line and its processes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specctl.console.tui.model.charts import off_spans
from specctl.console.tui.model.timeline import GpuPoint, Timeline
from specctl.widgets.gpu_panel import GIB
from specctl.widgets.timechart import ChartData

Series = tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class GpuView:
    """What the GPU screen draws: its charts, the GPU as the latest sample has it (None: not in it)."""

    index: int
    gpu: dict[str, Any] | None
    charts: tuple[ChartData, ...]  # utilisation, memory, power, temperature, clocks
    sim: bool


def _series(points: list[GpuPoint], key: str, scale: float = 1.0) -> Series:
    return tuple((p.t, v / scale) for p in points if (v := p.gpu.get(key)) is not None)


def _now(series: Series, latest: float | None, fmt: str) -> str:
    """The newest sample's value, or "–" where it had none (a failed GPU's last watts are not its watts now)."""
    return format(series[-1][1], fmt) if series and series[-1][0] == latest else "–"


def _last(points: list[GpuPoint], key: str) -> float | None:
    return next((v for p in reversed(points) if (v := p.gpu.get(key)) is not None), None)


def gpu_view(timeline: Timeline, index: int, window_s: float, *, lost: bool = False) -> GpuView:
    """GPU ``index``'s charts over the last ``window_s`` of journal time, shaded where speculation was off.

    ``lost``: the link to the supervisor is gone, so no figure is the newest: every legend is `–`.
    """
    now = timeline.now or 0.0
    points = [p for p in timeline.gpu_points.get(index, ()) if p.t >= now - window_s]
    sample_t = None if lost or timeline.latest is None else float(timeline.latest["t"])
    latest = sample_t if points and points[-1].t == sample_t else None
    spans = off_spans([p for p in timeline.points if p.t >= now - window_s])
    note = "shaded: spec off" if spans else ""
    util = _series(points, "util")
    mem = _series(points, "mem_used", GIB)
    power = _series(points, "power_w")
    temp = _series(points, "temp_c")
    sm = _series(points, "sm_clock_mhz")
    mem_clock = _series(points, "mem_clock_mhz")
    total = _last(points, "mem_total")
    limit = _last(points, "power_limit_w")
    mem_top = None if total is None else total / GIB
    charts = (
        ChartData("Utilisation", now, window_s, (util,), spans, legend=f"{_now(util, latest, '.0f')}%",
                  note=note, y_top=100.0),
        ChartData("Memory", now, window_s, (mem,), spans,
                  legend=f"{_now(mem, latest, '.1f')}/{'–' if mem_top is None else format(mem_top, '.0f')} GiB",
                  y_top=mem_top),
        ChartData("Power", now, window_s, (power,), spans,
                  legend=f"{_now(power, latest, '.0f')}/{'–' if limit is None else format(limit, '.0f')} W",
                  y_top=limit),
        ChartData("Temperature", now, window_s, (temp,), spans, legend=f"{_now(temp, latest, '.0f')}°C",
                  y_min_top=90.0),
        ChartData("Clocks", now, window_s, (sm, mem_clock), spans,
                  legend=f"SM {_now(sm, latest, '.0f')} · memory {_now(mem_clock, latest, '.0f')} MHz",
                  legend_narrow=f"SM {_now(sm, latest, '.0f')} · mem {_now(mem_clock, latest, '.0f')}",
                  y_min_top=1000.0),
    )
    sample = timeline.latest
    gpu = None if sample is None else next((g for g in sample["gpus"] if g.get("index") == index), None)
    return GpuView(index, dict(gpu) if gpu is not None else None, charts,
                   sim=sample is not None and sample.get("sim") is True)
