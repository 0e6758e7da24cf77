"""Calibration's fit: a bucket's readings of both states to a call, and the calls to thresholds.

Pure (no I/O, no clock), and no state of its own: :class:`Cell` and
:class:`Acceptance` hold faded readings, :func:`bucket_fit` calls a bucket,
:func:`load_pair` and :func:`floor_line` turn the calls into ``off_at`` /
``on_at`` and the acceptance floor. runtime/core/calibration.py's
:class:`Calibrator` keeps the readings, plans probes and decides when to
publish.

Per bucket b with readings of both states:
- ``r(b) = t_on(b) / t_off(b)``, the step time ratio. A request gains
  ``1 + a`` tokens a step on (a: accepted draft tokens a verify) and 1 off,
  so on pays iff ``(1 + a) / r > 1``: the break-even acceptance is
  ``r - 1``, in the unit of ``min_accept``.
- The verdict needs the ratio's confidence interval (Z standard errors of
  each mean, MIN_STEPS steps a state at least) and the acceptance's to
  clear 1: otherwise the bucket is ``close`` and keeps what the current
  thresholds say.
- ``off_at`` is the bucket edge that misclassifies the least measured
  gain (|log gain| summed), the current one kept on a tie; ``on_at`` is
  the edge below it; the floor is a line SLACK under the break-even's
  upper bound at the buckets auto runs on (the policy's acceptance window
  scatters; a dip under the floor costs probe_after steps off), see
  :func:`floor_line`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from specctl.runtime.core.settings import MAX_BATCH
from specctl.runtime.core.step_meter import BUCKET_EDGES, bucket_upper

NEVER = MAX_BATCH
# Standard errors a call needs on each side of break-even: 3, because consecutive steps are not
# independent (prefill lands on some, and a batch drifts within its bucket), so the plain standard
# error understates the scatter; 3 of them hold a call steady where 2 let one in 20 flip.
Z = 3.0
# Steps each state needs in a bucket before the bucket can be called: at the coefficient of variation
# of a decode step seen in the simulator and on the GPU (0.05-0.3, prefill steps included) a 24-step
# mean is within 1-6 % (one standard error); fewer and a single prefill-heavy step moves it. The
# confidence interval decides the call; this only keeps a handful of steps from pretending to one.
MIN_STEPS = 24
# Steps a cell weighs at most: older readings fade (each new step past this scales the old ones
# down), so the table follows a server whose costs drift (context lengths, traffic).
CELL_WEIGHT = 4096
# Verifies the acceptance estimate weighs at most, for the same reason.
ACCEPT_WEIGHT = 256
# Accepted draft tokens between the break-even and the floor: the policy's 64-verify window at one
# request scatters by about 0.1 (runtime/core/thresholds.py), and a dip under the floor costs
# probe_after steps off; 0.15 keeps such dips rare where drafting pays by little.
SLACK = 0.15
# The floor's line goes under the points that hold all but this share of the called buckets' steps: a
# bucket the batch passes through while a load ramps is timed on prefill-heavy steps (on the H200 buckets
# 3, 12 and 48 ran 75-100 ms steps between 4-21 ms neighbours, 3 % of the steps), whose ratio near 1 says
# nothing of decoding there and would pull a line under every point down to nothing.
FLOOR_TRIM = 0.05
# A bucket's break-even enters the floor by its upper bound (break-even + Z standard errors), and only
# where that bound is this close to it (accepted draft tokens): wider and one wild ratio would set the
# floor. A called bucket short of it is probed for precision where that floor matters (the Calibrator's
# probes): a server the floor has turned off in a bucket called on keeps few steps of drafting there.
FLOOR_PRECISION = 0.5
# Publish a floor change only where the floor moves this much at some measured bucket.
FLOOR_STEP = 0.05

@dataclass
class Cell:
    """Readings of one (bucket, depth), faded to CELL_WEIGHT steps."""

    steps: float = 0.0
    seconds: float = 0.0
    seconds_sq: float = 0.0
    verifies: float = 0.0
    accepted: float = 0.0
    accepted_sq: float = 0.0

    def add(self, delta: Iterable[float], weight: float = CELL_WEIGHT) -> None:
        d = list(delta)
        if d[0] > 0 and self.steps + d[0] > weight:
            self._scale(max(0.0, (weight - d[0]) / self.steps) if self.steps else 0.0)
        self.steps += d[0]
        self.seconds += d[1]
        self.seconds_sq += d[2]
        self.verifies += d[3]
        self.accepted += d[4]
        self.accepted_sq += d[5]

    def _scale(self, f: float) -> None:
        self.steps *= f
        self.seconds *= f
        self.seconds_sq *= f

    def mean_t(self) -> float:
        return self.seconds / self.steps if self.steps else 0.0

    def rel_var_mean(self) -> float:
        """Variance of the mean step time, relative to its square."""
        if self.steps < 2 or self.seconds <= 0:
            return math.inf
        mean = self.seconds / self.steps
        var = max(0.0, self.seconds_sq / self.steps - mean * mean)
        return var / (self.steps * mean * mean)


@dataclass
class Acceptance:
    """Mean accepted draft tokens a verify at the on depth, faded to ACCEPT_WEIGHT verifies."""

    verifies: float = 0.0
    total: float = 0.0
    total_sq: float = 0.0

    def add(self, verifies: float, total: float, total_sq: float) -> None:
        if verifies <= 0:
            return
        if self.verifies + verifies > ACCEPT_WEIGHT and self.verifies:
            f = max(0.0, (ACCEPT_WEIGHT - verifies) / self.verifies)
            self.verifies *= f
            self.total *= f
            self.total_sq *= f
        self.verifies += verifies
        self.total += total
        self.total_sq += total_sq

    def mean(self) -> float | None:
        return self.total / self.verifies if self.verifies >= 1 else None

    def sd_mean(self) -> float:
        if self.verifies < 2:
            return math.inf
        m = self.total / self.verifies
        return math.sqrt(max(0.0, self.total_sq / self.verifies - m * m) / self.verifies)


@dataclass(frozen=True)
class BucketFit:
    """One bucket's readings and what they say."""

    bucket: int
    steps_on: int
    steps_off: int
    t_on_ms: float | None
    t_off_ms: float | None
    ratio: float | None  # t_on / t_off
    ratio_sd: float | None
    breakeven: float | None  # accepted draft tokens a verify at which on and off serve the same tok/s
    gain: float | None  # on's tok/s over off's at the current acceptance
    verdict: str  # "on", "off", "close" (within the noise) or "unmeasured"
    gain_lo: float = 0.0  # the gain's interval, Z standard errors each side
    gain_hi: float = math.inf

    def as_dict(self) -> dict[str, Any]:
        return {"bucket": self.bucket, "steps_on": self.steps_on, "steps_off": self.steps_off,
                "t_on_ms": rounded(self.t_on_ms), "t_off_ms": rounded(self.t_off_ms), "ratio": rounded(self.ratio),
                "ratio_sd": rounded(self.ratio_sd), "breakeven": rounded(self.breakeven), "gain": rounded(self.gain),
                "verdict": self.verdict}


@dataclass(frozen=True)
class Fit:
    """Thresholds from the readings, for the groups the operator left alone."""

    settings: dict[str, float]
    buckets: tuple[BucketFit, ...]
    accept: float | None
    accept_sd: float | None


def rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def bucket_fit(b: int, on: Cell, off: Cell, a: float | None, a_sd: float) -> BucketFit:
    """Bucket ``b``'s call from its on and off cells and the acceptance ``a`` (its standard error ``a_sd``)."""
    t_on, t_off = on.mean_t() or None, off.mean_t() or None
    ratio = ratio_sd = breakeven = gain = None
    lo, hi = 0.0, math.inf
    verdict = "unmeasured"
    if t_on and t_off and on.steps >= MIN_STEPS and off.steps >= MIN_STEPS:
        ratio = t_on / t_off
        ratio_sd = ratio * math.sqrt(on.rel_var_mean() + off.rel_var_mean())
        breakeven = ratio - 1.0
        verdict = "close"
        if a is not None:
            gain = (1.0 + a) / ratio
            sd_a = a_sd if math.isfinite(a_sd) else 1.0
            lo = (1.0 + a - Z * sd_a) / (ratio + Z * ratio_sd)
            hi_den = ratio - Z * ratio_sd
            hi = (1.0 + a + Z * sd_a) / hi_den if hi_den > 0 else math.inf
            verdict = "on" if lo > 1.0 else "off" if hi < 1.0 else "close"
    return BucketFit(b, int(on.steps), int(off.steps), t_on and t_on * 1e3, t_off and t_off * 1e3,
                     ratio, ratio_sd, breakeven, gain, verdict, max(0.0, lo), hi)


def load_pair(buckets: tuple[BucketFit, ...], settings: Mapping[str, Any]) -> dict[str, float]:
    """off_at where the measured calls are best kept; the current off_at wins a tie."""
    called = [bf for bf in buckets if bf.verdict in ("on", "off") and bf.gain]
    current = int(settings.get("off_at", NEVER))

    def loss(off_at: int) -> float:
        return sum(abs(math.log(bf.gain)) for bf in called if bf.gain
                   and (bf.bucket < off_at) != (bf.verdict == "on"))

    losses = {edge: loss(edge) for edge in (*BUCKET_EDGES, NEVER)}
    least = min(losses.values())
    if loss(current) <= least + 1e-9:
        return {}
    # of the edges that keep the calls best, the nearest to the current one: unmeasured buckets keep theirs
    best = min((e for e, lo in losses.items() if lo <= least + 1e-9),
               key=lambda e: abs(math.log(e) - math.log(max(1, current))))
    if best == current:
        return {}
    return {"off_at": best, "on_at": on_at(best)}


def floor_line(buckets: tuple[BucketFit, ...], off_at: float, steps: int,
               settings: Mapping[str, Any], least_slope: float = 0.0) -> dict[str, float]:
    """A line SLACK under the break-even's upper bound at the buckets below off_at where drafting pays.

    Only those: a close bucket keeps the state it has (a floor moved under its acceptance would
    turn drafting on there). The upper bound, not the estimate: a call of "on" puts the acceptance
    above it, so the floor never stands over what the readings say drafting needs, and it comes
    down as they firm up; a loose break-even (beyond FLOOR_PRECISION) gives no point at all. The
    slope is fitted by steps and the line goes under all points but those few-step ones FLOOR_TRIM
    leaves out, and nowhere the server has run under off_at above the highest point: a slope fitted
    over small buckets and carried to larger ones would put the floor over their acceptance. Nor
    under ``least_slope``, the slope in force when calibration began: a measured row's slope says
    where drafting stops paying at batches this server may not have run yet.
    """
    points = [(float(min(bucket_upper(bf.bucket), off_at)), bf.breakeven + Z * bf.ratio_sd - SLACK,
               float(bf.steps_on + bf.steps_off))
              for bf in buckets if bf.breakeven is not None and bf.ratio_sd is not None
              and bf.bucket < off_at and bf.verdict == "on" and Z * bf.ratio_sd <= FLOOR_PRECISION]
    if not points:
        return {}
    trim = FLOOR_TRIM * sum(bf.steps_on + bf.steps_off for bf in buckets if bf.verdict in ("on", "off"))
    weight = sum(n for _, _, n in points)
    mx = sum(x * n for x, _, n in points) / weight
    my = sum(y * n for _, y, n in points) / weight
    sxx = sum(n * (x - mx) ** 2 for x, _, n in points)
    slope = sum(n * (x - mx) * (y - my) for x, y, n in points) / sxx if sxx else 0.0
    slope = max(least_slope, min(1.0, max(0.0, slope)))
    reach = min(off_at, float(bucket_upper(max(bf.bucket for bf in buckets))))
    top = max(y for _, y, _ in points)
    base = _trimmed_min([(y - slope * x, n) for x, y, n in points], trim, top - slope * reach)
    if base < 0:
        slope = least_slope
        base = _trimmed_min([(y - slope * x, n) for x, y, n in points], trim, top - slope * reach)
    base = min(float(steps), max(0.0, base))
    new = {"min_accept": round(base, 2), "accept_slope": round(slope, 4)}
    old_m = float(settings.get("min_accept", 0.0))
    old_s = float(settings.get("accept_slope", 0.0))
    moved = max(abs((new["min_accept"] + new["accept_slope"] * x) - (old_m + old_s * x)) for x, _, _ in points)
    return new if moved >= FLOOR_STEP else {}


def _trimmed_min(values: list[tuple[float, float]], trim: float, bound: float) -> float:
    """The least value once the lowest ones holding at most ``trim`` steps together are left out; at most ``bound``."""
    dropped = 0.0
    ordered = sorted(values)
    for i, (value, steps) in enumerate(ordered):
        if i == len(ordered) - 1 or dropped + steps > trim:
            return min(value, bound)
        dropped += steps
    return bound


def loose(row: BucketFit) -> bool:
    """A bucket called on whose break-even is too loose to set the floor by (FLOOR_PRECISION)."""
    return row.verdict == "on" and Z * (row.ratio_sd if row.ratio_sd is not None else math.inf) > FLOOR_PRECISION


def on_at(off_at: int) -> int:
    """The bucket edge under ``off_at`` (hysteresis: off at off_at, back on at or below this)."""
    if off_at >= NEVER:
        return NEVER - 1
    below = [e for e in BUCKET_EDGES if e < off_at]
    return below[-1] if below else 0
