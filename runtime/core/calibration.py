"""Calibration: the server's own step costs in, load thresholds and an acceptance floor out.

Pure (no I/O, no clock): :class:`Calibrator` reads the policy state a server
publishes (its ``meter``: step time per batch-size bucket and depth, and
acceptance; runtime/core/step_meter.py) and answers with a :class:`Plan`:
settings to publish, and short probes of the state not in use. The
supervisor's loop (runtime/supervisor/calibrate.py) carries the plan out; the
offline simulator (runtime/sim/calibrated.py) runs the same class in
simulated time.

The fit, per bucket b with readings of both states:
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
  :meth:`Calibrator._floor`.
- Probes are charged by what they can lose (PROBE_SHARE), so a close
  bucket's come quickly and an unmeasured one's are few.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specctl.runtime.core.settings import MAX_BATCH
from specctl.runtime.core.step_meter import BUCKET_EDGES, CELL_FIELDS, bucket_upper
from specctl.runtime.core.thresholds import GROUPS

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
# Steps a probe buys in the other state: MIN_STEPS plus the switch's own step (the meter skips it)
# and room for the read that ends it (Plan.probe_s says when).
PROBE_STEPS = 32
# A probe lasts at most this long whatever the step time says (a stalled server must not hold it).
PROBE_MAX_S = 5.0
# A bucket still close after this many steps of the probed state is not probed again: either state
# serves it within the noise.
PROBE_UNTIL = 128
# Probes may cost this share of all steps' throughput, beyond a start-up credit of two full probes. A
# probe step is charged what it can lose at most: a whole step where the bucket has no call (nothing says
# the probed state is not useless there), and where the bucket is close the worst the gain's interval
# allows (a close bucket's probe costs a few per cent a step, so the several it needs come quickly: a
# 12 % gain at a step-time scatter of 0.3 needs about 100 steps of each state to call). Never below
# PROBE_COST_MIN a step: a switch is not free (a cold first verify, a graph change), and a lower charge
# let a load stepping between 4 and 192 requests spend over 2 % of its steps in probes in the simulator.
PROBE_SHARE = 0.01
PROBE_CREDIT = 2 * PROBE_STEPS
PROBE_COST_MIN = 0.4
# Steps a cell weighs at most: older readings fade (each new step past this scales the old ones
# down), so the table follows a server whose costs drift (context lengths, traffic).
CELL_WEIGHT = 4096
# Verifies the acceptance estimate weighs at most, for the same reason.
ACCEPT_WEIGHT = 256
# Steps off with no verify after which the acceptance is stale and worth an "on" probe.
ACCEPT_STALE_STEPS = 20_000
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
# floor. A called bucket short of it is probed for precision (see PROBE_UNTIL) where that floor matters:
# a server the floor has turned off in a bucket called on, which keeps few steps of drafting there.
FLOOR_PRECISION = 0.5
# Publish a floor change only where the floor moves this much at some measured bucket.
FLOOR_STEP = 0.05
# Steps between two publishes of learned thresholds: the calibration's own dwell.
DWELL_STEPS = 256


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

    def probe_cost(self, state: str) -> float:
        """The most a step of ``state`` can lose against the other state here (a share of a step)."""
        if self.verdict == "unmeasured":
            return 1.0
        worst = 1.0 - self.gain_lo if state == "on" else 1.0 - 1.0 / self.gain_hi
        return min(1.0, max(PROBE_COST_MIN, worst))

    def as_dict(self) -> dict[str, Any]:
        return {"bucket": self.bucket, "steps_on": self.steps_on, "steps_off": self.steps_off,
                "t_on_ms": _r(self.t_on_ms), "t_off_ms": _r(self.t_off_ms), "ratio": _r(self.ratio),
                "ratio_sd": _r(self.ratio_sd), "breakeven": _r(self.breakeven), "gain": _r(self.gain),
                "verdict": self.verdict}


@dataclass(frozen=True)
class Fit:
    """Thresholds from the readings, for the groups the operator left alone."""

    settings: dict[str, float]
    buckets: tuple[BucketFit, ...]
    accept: float | None
    accept_sd: float | None


@dataclass(frozen=True)
class Plan:
    """What the calibrator asks for after one reading."""

    publish: dict[str, float] = field(default_factory=dict)  # learned settings (empty: none)
    probe: str | None = None  # "on" / "off": force it for a probe; "auto": the probe is over
    probe_bucket: int | None = None
    probe_s: float | None = None  # how long the probe should take: read the state again then
    fit: Fit | None = None


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


class Calibrator:
    """Learns thresholds from a server's published policy state; see the module's docstring."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget every reading and what was learned."""
        self.cells: dict[tuple[int, int], Cell] = {}
        self.accept = Acceptance()
        self._last: dict[str, dict[str, list[float]]] | None = None
        self._first_step: int | None = None
        self._last_step = 0
        self._last_publish: int | None = None
        self._probe: tuple[str, int, int, float] | None = None  # (state, bucket, start step, cost a step)
        self.probe_steps = 0
        self.probe_cost = 0.0  # probe steps charged by what each could lose (PROBE_SHARE)
        self.probes = 0
        self._last_verify_step = 0
        self.learned: dict[str, float] = {}
        self._start_slope: float | None = None  # the floor's slope in force when calibration began (a row's)
        self.publishes = 0
        self.steps_seen = 0

    @property
    def probing(self) -> str | None:
        return self._probe[0] if self._probe else None

    # -- readings ----------------------------------------------------------
    def read(self, spec: Mapping[str, Any]) -> dict[int, float]:
        """Take the meter's growth since the last read into the table; steps added per bucket."""
        meter = spec.get("meter")
        step = spec.get("step")
        if not isinstance(meter, dict) or not isinstance(step, int):
            return {}
        last = self._last or {}
        if step < self._last_step:  # the server restarted: its counters began again
            last = {}
            self._first_step = None
            self._last_publish = None
            self._probe = None
        if self._first_step is None:
            self._first_step = step
        self.steps_seen += max(0, step - self._last_step) if last else 0
        self._last_step = step
        on_depth = _steps(spec)
        added: dict[int, float] = {}
        for b_text, depths in meter.items():
            if not isinstance(depths, dict) or not b_text.isdigit():
                continue
            b = int(b_text)
            for d_text, values in depths.items():
                if not d_text.isdigit() or not _counters(values):
                    continue
                before = last.get(b_text, {}).get(d_text, [0.0] * len(CELL_FIELDS))
                delta = [v - w for v, w in zip(values, before)]
                if any(x < 0 for x in delta):  # a counter that went back: a new server, take it whole
                    delta = list(values)
                if not any(delta):
                    continue
                d = int(d_text)
                self.cells.setdefault((b, d), Cell()).add(delta)
                added[b] = added.get(b, 0.0) + delta[0]
                if d == on_depth and delta[3] > 0:
                    self.accept.add(delta[3], delta[4], delta[5])
                    self._last_verify_step = step
        self._last = {b: {d: list(v) for d, v in ds.items()} for b, ds in meter.items() if isinstance(ds, dict)}
        return added

    # -- the fit -----------------------------------------------------------
    def fit(self, settings: Mapping[str, Any], owned: Iterable[str] = ()) -> Fit:
        """Thresholds for ``settings``' on depth from the table; only groups with no key in ``owned``."""
        steps = int(settings.get("steps", 3))
        a, a_sd = self.accept.mean(), self.accept.sd_mean()
        buckets = tuple(self._bucket_fit(b, steps, a, a_sd) for b in sorted({b for b, _ in self.cells}))
        owned_set = set(owned)
        out: dict[str, float] = {}
        load, floor = GROUPS
        if not owned_set & set(load):
            out.update(self._load_pair(buckets, settings))
        if not owned_set & set(floor):
            off_at = out.get("off_at", settings.get("off_at", NEVER))
            out.update(self._floor(buckets, float(off_at), steps, settings, self._start_slope or 0.0))
        return Fit(out, buckets, _r(a), _r(a_sd) if a is not None else None)

    def _bucket_fit(self, b: int, steps: int, a: float | None, a_sd: float) -> BucketFit:
        on, off = self.cells.get((b, steps), Cell()), self.cells.get((b, 0), Cell())
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

    @staticmethod
    def _load_pair(buckets: tuple[BucketFit, ...], settings: Mapping[str, Any]) -> dict[str, float]:
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
        return {"off_at": best, "on_at": _on_at(best)}

    @staticmethod
    def _floor(buckets: tuple[BucketFit, ...], off_at: float, steps: int,
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

    # -- one reading: what to do -----------------------------------------------
    def observe(self, spec: Mapping[str, Any], owned: Iterable[str] = (), frozen: bool = False) -> Plan:
        """Read ``spec`` (a policy state) and say what to publish or probe; see :class:`Plan`."""
        added = self.read(spec)
        step = spec.get("step") if isinstance(spec.get("step"), int) else 0
        assert isinstance(step, int)
        settings = spec.get("settings") if isinstance(spec.get("settings"), dict) else {}
        assert isinstance(settings, dict)
        if self._start_slope is None and isinstance(settings.get("accept_slope"), (int, float)):
            self._start_slope = float(settings["accept_slope"])
        if self._probe is not None:
            state, b, start, cost = self._probe
            if frozen or step - start >= PROBE_STEPS or step < start:
                self._probe = None
                self.probe_steps += max(0, step - start)
                self.probe_cost += cost * max(0, step - start)
                return Plan(probe="auto", probe_bucket=b)
            probed = self.cells.get((b, 0 if state == "off" else _steps(spec)), Cell()).mean_t() or 0.05
            return Plan(probe_s=round(min(PROBE_MAX_S, (PROBE_STEPS - (step - start)) * probed), 4))
        if frozen or spec.get("mode") != "auto" or len(_depths(settings)) > 2:
            return Plan()
        fit = self.fit(settings, owned)
        if fit.settings and (self._last_publish is None or step - self._last_publish >= DWELL_STEPS):
            self._last_publish = step
            self.learned.update(fit.settings)
            self.publishes += 1
            return Plan(publish=dict(fit.settings), fit=fit)
        return self._maybe_probe(spec, added, fit, step)

    def _maybe_probe(self, spec: Mapping[str, Any], added: Mapping[int, float], fit: Fit, step: int) -> Plan:
        if not added:
            return Plan()
        b = max(added, key=lambda k: added[k])  # the bucket the server ran in most since the last read
        raw = spec.get("depth")
        depth = raw if isinstance(raw, int) else 0
        on_depth = _steps(spec)
        want: str | None = None
        row = next((bf for bf in fit.buckets if bf.bucket == b), None)
        other = self.cells.get((b, 0 if depth else on_depth), Cell())
        if self.cells.get((b, depth), Cell()).steps < MIN_STEPS:
            return Plan()  # the state in use first: it gathers its readings by running, and prices the probe
        if row is None or row.verdict == "unmeasured":
            want = "off" if depth else "on"
        elif row.verdict == "close" and other.steps < PROBE_UNTIL:
            want = "off" if depth else "on"
        elif _loose(row) and not depth and spec.get("reason") == "low_accept" and other.steps < PROBE_UNTIL:
            want = "on"  # the floor turned drafting off where it pays: the break-even it needs, made precise
        elif not depth and step - self._last_verify_step >= ACCEPT_STALE_STEPS:
            want = "on"  # off for a long while: the traffic's acceptance may have moved
        if want is None:
            return Plan()
        cost = row.probe_cost(want) if row is not None else 1.0
        if self.probe_cost + cost * PROBE_STEPS > PROBE_SHARE * self.steps_seen + PROBE_CREDIT:
            return Plan()
        self._probe = (want, b, step, cost)
        self.probes += 1
        # the probed state's step time where known; else half the state in use's (off may be twice as fast as
        # on), and the read then asks for the rest: a probe that overran to the next read cost twice its steps
        guess = other.mean_t() or 0.5 * (self.cells.get((b, depth), Cell()).mean_t() or 0.05)
        return Plan(probe=want, probe_bucket=b, probe_s=round(min(PROBE_MAX_S, PROBE_STEPS * guess), 4))

    def show(self, settings: Mapping[str, Any] | None = None, owned: Iterable[str] = ()) -> dict[str, Any]:
        """The table, what was learned and from how many readings (``specctl calibration show``)."""
        fit = self.fit(settings or {}, owned) if settings is not None else None
        return {"learned": dict(self.learned), "publishes": self.publishes, "probes": self.probes,
                "probe_steps": self.probe_steps, "probe_cost": round(self.probe_cost, 1),
                "steps_seen": self.steps_seen,
                "probe_share": round(self.probe_steps / self.steps_seen, 5) if self.steps_seen else None,
                "accept": None if fit is None else fit.accept,
                "buckets": [] if fit is None else [bf.as_dict() for bf in fit.buckets],
                "would_publish": None if fit is None else fit.settings}


def _trimmed_min(values: list[tuple[float, float]], trim: float, bound: float) -> float:
    """The least value once the lowest ones holding at most ``trim`` steps together are left out; at most ``bound``."""
    dropped = 0.0
    ordered = sorted(values)
    for i, (value, steps) in enumerate(ordered):
        if i == len(ordered) - 1 or dropped + steps > trim:
            return min(value, bound)
        dropped += steps
    return bound


def _loose(row: BucketFit) -> bool:
    """A bucket called on whose break-even is too loose to set the floor by (FLOOR_PRECISION)."""
    return row.verdict == "on" and Z * (row.ratio_sd if row.ratio_sd is not None else math.inf) > FLOOR_PRECISION


def _on_at(off_at: int) -> int:
    """The bucket edge under ``off_at`` (hysteresis: off at off_at, back on at or below this)."""
    if off_at >= NEVER:
        return NEVER - 1
    below = [e for e in BUCKET_EDGES if e < off_at]
    return below[-1] if below else 0


def _steps(spec: Mapping[str, Any]) -> int:
    settings = spec.get("settings")
    steps = settings.get("steps") if isinstance(settings, dict) else None
    return steps if isinstance(steps, int) and not isinstance(steps, bool) else 3


def _depths(settings: Mapping[str, Any]) -> list[int]:
    c = settings.get("candidates")
    return list(c) if isinstance(c, list) and c else [0, 1]


def _counters(values: Any) -> bool:
    return (isinstance(values, list) and len(values) == len(CELL_FIELDS)
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values))

