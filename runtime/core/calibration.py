"""Calibration: the server's own step costs in, load thresholds and an acceptance floor out.

Pure (no I/O, no clock): :class:`Calibrator` reads the policy state a server
publishes (its ``meter``: step time per batch-size bucket and depth, and
acceptance; runtime/core/step_meter.py), keeps the readings, and answers with
a :class:`Plan`: settings to publish, and short probes of the state not in
use. The fit itself (a bucket's call, the thresholds from the calls) is
runtime/core/calibration_fit.py. The supervisor's loop
(runtime/supervisor/calibrate.py) carries the plan out; the offline simulator
(runtime/sim/calibrated.py) runs the same class in simulated time.

Probes are charged by what they can lose (PROBE_SHARE), so a close bucket's
come quickly and an unmeasured one's are few; publishes wait DWELL_STEPS.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specctl.runtime.core.calibration_fit import (
    MIN_STEPS,
    NEVER,
    Acceptance,
    BucketFit,
    Cell,
    Fit,
    bucket_fit,
    floor_line,
    load_pair,
    loose,
    rounded,
)
from specctl.runtime.core.step_meter import CELL_FIELDS
from specctl.runtime.core.thresholds import GROUPS

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
# Steps off with no verify after which the acceptance is stale and worth an "on" probe.
ACCEPT_STALE_STEPS = 20_000
# Steps between two publishes of learned thresholds: the calibration's own dwell.
DWELL_STEPS = 256


@dataclass(frozen=True)
class Plan:
    """What the calibrator asks for after one reading."""

    publish: dict[str, float] = field(default_factory=dict)  # learned settings (empty: none)
    probe: str | None = None  # "on" / "off": force it for a probe; "auto": the probe is over
    probe_bucket: int | None = None
    probe_s: float | None = None  # how long the probe should take: read the state again then
    fit: Fit | None = None


class Calibrator:
    """Learns thresholds from a server's published policy state; see the module's docstring."""

    def __init__(self) -> None:
        # the least slope the floor may take: a measured row's, set by whoever knows it (the supervisor, at a
        # server's start); None: the slope in force at the first reading
        self.least_slope: float | None = None
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
        self._start_slope: float | None = None  # the floor's slope in force at the first reading
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
        buckets = tuple(bucket_fit(b, self.cells.get((b, steps), Cell()), self.cells.get((b, 0), Cell()), a, a_sd)
                        for b in sorted({b for b, _ in self.cells}))
        owned_set = set(owned)
        out: dict[str, float] = {}
        load, floor = GROUPS
        if not owned_set & set(load):
            out.update(load_pair(buckets, settings))
        if not owned_set & set(floor):
            off_at = out.get("off_at", settings.get("off_at", NEVER))
            least = self.least_slope if self.least_slope is not None else self._start_slope or 0.0
            out.update(floor_line(buckets, float(off_at), steps, settings, least))
        return Fit(out, buckets, rounded(a), rounded(a_sd) if a is not None else None)

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
        elif loose(row) and not depth and spec.get("reason") == "low_accept" and other.steps < PROBE_UNTIL:
            want = "on"  # the floor turned drafting off where it pays: the break-even it needs, made precise
        elif not depth and step - self._last_verify_step >= ACCEPT_STALE_STEPS:
            want = "on"  # off for a long while: the traffic's acceptance may have moved
        if want is None:
            return Plan()
        cost = probe_cost(row, want) if row is not None else 1.0
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
                "least_slope": self.least_slope if self.least_slope is not None else self._start_slope,
                "probe_steps": self.probe_steps, "probe_cost": round(self.probe_cost, 1),
                "steps_seen": self.steps_seen,
                "probe_share": round(self.probe_steps / self.steps_seen, 5) if self.steps_seen else None,
                "accept": None if fit is None else fit.accept,
                "buckets": [] if fit is None else [bf.as_dict() for bf in fit.buckets],
                "would_publish": None if fit is None else fit.settings}


def probe_cost(row: BucketFit, state: str) -> float:
    """The most a step of ``state`` can lose against the other state in ``row``'s bucket (a share of a step)."""
    if row.verdict == "unmeasured":
            return 1.0
    worst = 1.0 - row.gain_lo if state == "on" else 1.0 - 1.0 / row.gain_hi
    return min(1.0, max(PROBE_COST_MIN, worst))


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

