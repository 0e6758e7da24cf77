"""SpecPolicy: decides, once per decode step, how many draft steps to run.

The same class runs inside SGLang's scheduler (one copy per tensor-parallel
rank, through the specctl plugin) and inside the simulator. Every input is
counted in scheduler steps, never read from a clock or a random source: with
tensor parallelism each rank runs its own copy, and all copies must reach the
same decision at the same step or the collectives hang.

Vocabulary:
- *step*: one call of :meth:`SpecPolicy.decide`, i.e. one decode batch.
- *accepted*: accepted draft tokens of one request in one verify, not
  counting the bonus token (so 0..steps).
- *depth*: the draft steps a decode batch runs (0 = off). With the default
  candidate set {0, steps} the policy is the on/off machine it always was;
  with more positive candidates and a cost table it chooses the depth with
  the most expected tokens per second of step time (docs/policy.md, "Draft depth").

What an operator may set, and how it is checked, is settings.py.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from specctl.runtime.core.depth_model import AcceptStats, DepthCosts
from specctl.runtime.core.settings import PolicySettings
from specctl.runtime.core.step_meter import StepMeter

# Reasons a switch happened; clients branch on these strings.
REASONS = ("load", "quiet", "low_accept", "probe", "forced", "depth")

RECENT_SWITCHES = 64
# Off for low acceptance, auto comes back ("quiet") once the batch is small enough
# that the floor sits this far under the acceptance that switched it off: the
# 20 % gap is the hysteresis, so acceptance near the floor cannot flap the state.
QUIET_SHARE = 0.8
# A depth change needs the new depth's expected tokens per second of step time this much
# above the current one's: the hysteresis of the depth choice, so that two depths whose
# scores are within the estimate's noise do not alternate every dwell.
DEPTH_MARGIN = 0.03
# Verifies the depth choice waits for after a start or a probe before it takes over from the
# on/off rules: two verifies of a large batch hold enough requests, but their mean scatters by
# more than the margin, and one unlucky read that switches off for load would never be revised.
DEPTH_MIN_VERIFIES = 8
# The acceptance window is full at ``accept_window`` verifies, or sooner once its verifies hold
# ACCEPT_REQUESTS_PER_SLOT x ``accept_window`` requests, ACCEPT_MIN_VERIFIES verifies at least: a
# verify of 192 requests is 192 samples, and on a slow target 64 of them took 12 s after every resume
# (a MoE at 192 requests on one H200: docs/benchmarks.md). Up to 8 requests a
# batch the window is the 64 verifies it always was; from 64 requests it is 8 verifies.
ACCEPT_REQUESTS_PER_SLOT = 8
ACCEPT_MIN_VERIFIES = 8


@dataclass(frozen=True)
class Switch:
    """One change of the depth (on/off included), and why."""

    seq: int
    step: int
    on: bool
    reason: str
    batch_size: int
    depth_from: int = 0
    depth_to: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "step": self.step, "on": self.on, "reason": self.reason,
                "batch_size": self.batch_size, "from": self.depth_from, "to": self.depth_to}


class SpecPolicy:
    """Deterministic depth chooser over scheduler steps (the on/off machine by default).

    ``costs``: the step-time table per (batch, depth) the depth choice prices
    candidates with; without one, or with a single positive candidate, the
    policy is the on/off machine and drafts ``steps`` whenever it is on.
    """

    def __init__(self, settings: PolicySettings | None = None, costs: DepthCosts | None = None) -> None:
        self._settings = settings or PolicySettings()
        self._pending: PolicySettings | None = None
        self._costs = costs
        self._step = 0
        self._depth = self._settings.steps if self._settings.mode != "off" else 0
        self._reason: str | None = None
        self._last_switch_step: int | None = None
        self._low_accept_since: int | None = None  # step of the low_accept switch, while off for it
        self._low_accept_mean = 0.0  # the acceptance mean that made that switch
        self._held_off = False  # off at the ceiling off_at, until the batch falls to on_at (the depth choice)
        self._accepts: deque[float] = deque(maxlen=self._settings.accept_window)
        self._accept_sum = 0.0
        self._accept_reqs: deque[int] = deque(maxlen=self._settings.accept_window)  # requests of each verify
        self._accept_req_sum = 0
        self._cold_verify = False  # the next verify is the first after a resume from off: not recorded
        self._stats = AcceptStats(self._settings.accept_window)
        self._switches: deque[Switch] = deque(maxlen=RECENT_SWITCHES)
        self._switch_count = 0
        self._verifies = 0
        self._steps_on = 0
        self._steps_off = 0
        self._last_batch = 0
        self._depths = self._settings.depths()
        self._steps_at: dict[int, int] = {}
        self.meter = StepMeter()  # what each step cost, for calibration (read, never decided on)

    # -- settings -------------------------------------------------------
    @property
    def settings(self) -> PolicySettings:
        return self._pending or self._settings

    @property
    def costs(self) -> DepthCosts | None:
        return self._costs

    def apply(self, changes: Mapping[str, Any]) -> PolicySettings:
        """Validate ``changes`` as a whole; they take effect at the next :meth:`decide`."""
        new = self.settings.with_changes(changes)
        self._pending = new
        return new

    def _take_pending(self) -> None:
        if self._pending is None:
            return
        new, self._pending = self._pending, None
        if new.accept_window != self._settings.accept_window:
            self._accepts = deque(self._accepts, maxlen=new.accept_window)
            self._accept_sum = float(sum(self._accepts))
            self._accept_reqs = deque(self._accept_reqs, maxlen=new.accept_window)
            self._accept_req_sum = sum(self._accept_reqs)
            self._stats.set_window(new.accept_window)
        old, self._settings = self._settings, new
        self._depths = new.depths()
        if (self._low_accept_since is not None and not self._depth
                and (new.min_accept, new.accept_slope) != (old.min_accept, old.accept_slope)
                and self._floor(self._last_batch) <= self._low_accept_mean):
            self._low_accept_since = None  # a new floor the mean that switched it off clears: judged again

    # -- per-step inputs ------------------------------------------------
    def decide(self, batch_size: int) -> int:
        """Called once per decode batch, before drafting: the draft steps to run (0 = off)."""
        self._take_pending()
        self._step += 1
        self._last_batch = batch_size
        s = self._settings
        if s.mode == "on":
            self._to(s.steps, "forced", batch_size)
        elif s.mode == "off":
            self._to(0, "forced", batch_size)
        else:
            if self._depth and self._depth not in self._depths:  # steps or the candidates changed under it
                self._to(s.steps, "forced", batch_size)
            if self._choosing_depth():
                self._auto_depth(batch_size)
            else:
                self._auto(batch_size)
        depth = self._depth
        if depth:
            self._steps_on += 1
            self._steps_at[depth] = self._steps_at.get(depth, 0) + 1
        else:
            self._steps_off += 1
        return depth

    def on_verify(self, accepted: Iterable[int | float], depth: int | None = None) -> None:
        """Accepted draft tokens per request after one verify (bonus token not counted).

        ``depth``: the draft steps that verify ran (the plugin's overlap
        scheduler verifies a batch decided one step earlier); the current
        depth when not given.
        """
        values = accepted if isinstance(accepted, (list, tuple)) else list(accepted)
        if not values or self._skip_cold_verify():
            return
        self._record_mean(sum(values) / len(values), len(values))
        self.meter.verify(len(values), self._depth if depth is None else depth, sum(values) / len(values))
        if len(self._depths) > 2:  # only a choice among depths reads acceptance per position
            self._stats.add(values, self._depth if depth is None else depth)

    def on_verify_mean(self, mean: float) -> None:
        """Same as :meth:`on_verify` for a caller that already holds the batch mean.

        A mean says nothing of how acceptance falls along the draft, so it
        feeds the on/off rules only, not the depth choice; it counts as a
        verify of the last decision's batch.
        """
        if not self._skip_cold_verify():
            self._record_mean(float(mean), max(1, self._last_batch))
            self.meter.verify(max(1, self._last_batch), self._depth, float(mean))

    def step_time(self, seconds: float) -> None:
        """How long the step of the last decision took, for the meter; no decision reads it."""
        self.meter.step(self._last_batch, self._depth, seconds)

    def _skip_cold_verify(self) -> bool:
        """Count a verify heard; True where it is the first after a resume from off, left out of the window.

        While off the draft model does not follow the requests (``warm_below`` aside), so the
        first verify after a resume accepts about nothing but its bonus token: a sample of the
        switch, not of the traffic, and in a window of 8 verifies it would weigh an eighth.
        """
        self._verifies += 1
        cold, self._cold_verify = self._cold_verify, False
        return cold

    def _record_mean(self, mean: float, requests: int) -> None:
        if len(self._accepts) == self._accepts.maxlen:
            self._accept_sum -= self._accepts[0]
            self._accept_req_sum -= self._accept_reqs[0]
        self._accepts.append(mean)
        self._accept_sum += mean
        self._accept_reqs.append(requests)
        self._accept_req_sum += requests

    # -- the automatic rules --------------------------------------------
    def _auto(self, bs: int) -> None:
        s = self._settings
        if not self._dwelt():
            return
        if self._depth:
            if bs >= s.off_at:
                self._set(False, "load", bs)
            elif self._window_full() and (mean := self._accept_sum / len(self._accepts)) < self._floor(bs):
                self._set(False, "low_accept", bs)
                self._low_accept_since, self._low_accept_mean = self._step, mean
        elif self._low_accept_since is not None:
            self._after_low_accept(bs, self._low_accept_since)
        elif bs <= s.on_at:
            self._set(True, "quiet", bs)

    def _floor(self, bs: int) -> float:
        """Mean accepted draft tokens a verify must reach at batch size ``bs`` to keep drafting."""
        s = self._settings
        return s.min_accept + s.accept_slope * bs

    def _after_low_accept(self, bs: int, since: int) -> None:
        """Off for low acceptance: probe after a while, or come back at once when the batch shrank.

        The probe measures afresh, in case the traffic changed. The quiet return
        needs no measurement: the acceptance that was too low for a large batch
        clears the floor of a small enough one by the QUIET_SHARE margin.
        """
        s = self._settings
        if bs >= s.off_at:
            return
        if self._step - since >= s.probe_after:
            self._set(True, "probe", bs)
        elif s.accept_slope > 0 and self._floor(bs) <= QUIET_SHARE * self._low_accept_mean:
            self._set(True, "quiet", bs)

    # -- the depth choice -----------------------------------------------
    def _choosing_depth(self) -> bool:
        """Whether auto chooses among depths: a cost table, two positive candidates, evidence.

        Until the first position has ``accept_window / 2`` requests of
        evidence (at start, after a probe) the on/off rules run at ``steps``,
        the deepest allowed depth, whose verifies inform every shallower one.
        """
        return (self._costs is not None and len(self._depths) > 2
                and self._stats.verifies >= DEPTH_MIN_VERIFIES
                and self._stats.evidence() >= self._settings.accept_window / 2)

    def _auto_depth(self, bs: int) -> None:
        s = self._settings
        if not self._dwelt():
            return
        if bs >= s.off_at:  # the operator's ceiling holds whatever the table says
            self._to(0, "load", bs)
            self._held_off = True
            return
        if self._held_off:  # and so does the band under it: off at the ceiling stays off down to on_at
            if self._depth == 0 and bs > s.on_at:
                return
            self._held_off = False
        if self._depth == 0 and self._low_accept_since is not None:
            if self._step - self._low_accept_since >= s.probe_after:
                self._stats.reset()  # measure afresh: the on/off rules run at steps until evidence is in
                self._to(s.steps, "probe", bs)  # a resume from off: _to clears the window
            return
        if self._depth == 0 and self._last_switch_step is not None \
                and self._step - self._last_switch_step >= s.probe_after:
            # off for load on an estimate no verify has revised since: look again at the deepest depth,
            # whose verifies refresh every shallower estimate; dwell steps later the model decides anew
            self._to(s.steps, "probe", bs)
            return
        best, best_score, current_score = self._best(bs)
        if best == self._depth or best_score <= current_score * (1.0 + DEPTH_MARGIN):
            return
        if best == 0:
            low = self._best(1)[0] == 0  # drafting would not pay even alone: acceptance, not load
            self._to(0, "low_accept" if low else "load", bs)
            if low:
                self._low_accept_since, self._low_accept_mean = self._step, self._stats.expected(1)[1]
        else:
            self._to(best, "quiet" if self._depth == 0 else "depth", bs)

    def _best(self, bs: int) -> tuple[int, float, float]:
        """(best depth, its score, the current depth's score); score = tokens a request per second."""
        assert self._costs is not None
        row = self._costs.row(bs)
        depths = self._depths
        expected = self._stats.expected(depths[-1])
        best, best_score, current_score = self._depth, -1.0, 0.0
        for d in depths:
            score = (1.0 + expected[d]) / row[d] if d < len(row) else 0.0
            if score > best_score:
                best, best_score = d, score
            if d == self._depth:
                current_score = score
        return best, best_score, current_score

    def _dwelt(self) -> bool:
        last = self._last_switch_step
        return last is None or self._step - last >= self._settings.dwell

    def _window_full(self) -> bool:
        """``accept_window`` verifies, or enough requests in fewer (ACCEPT_REQUESTS_PER_SLOT)."""
        n, most = len(self._accepts), self._accepts.maxlen or 0
        return n == most or (n >= ACCEPT_MIN_VERIFIES
                             and self._accept_req_sum >= ACCEPT_REQUESTS_PER_SLOT * most)

    def _clear_window(self) -> None:
        self._accepts.clear()
        self._accept_sum = 0.0
        self._accept_reqs.clear()
        self._accept_req_sum = 0

    def _set(self, on: bool, reason: str, bs: int) -> None:
        """The on/off machine's switch: on is ``steps``."""
        self._to(self._settings.steps if on else 0, reason, bs)

    def _to(self, depth: int, reason: str, bs: int) -> None:
        before = self._depth
        if depth == before:
            return
        self._depth = depth
        self._reason = reason
        self._last_switch_step = self._step
        self._switch_count += 1
        self.meter.skip_next()
        on = depth > 0
        if on:
            self._held_off = False
        if on or reason != "low_accept":
            self._low_accept_since = None
        if on and not before:  # a fresh window after every resume, so old acceptance cannot switch it off again
            self._clear_window()
            self._cold_verify = True
        self._switches.append(Switch(self._switch_count, self._step, on, reason, bs, before, depth))

    # -- read-out -------------------------------------------------------
    @property
    def on(self) -> bool:
        return self._depth > 0

    @property
    def depth(self) -> int:
        """The draft steps of the last decision (0 = off)."""
        return self._depth

    @property
    def step(self) -> int:
        return self._step

    @property
    def last_batch(self) -> int:
        """The batch size of the last decision: the running batch, as prefill steps see it."""
        return self._last_batch

    def accept_mean(self) -> float | None:
        if not self._accepts:
            return None
        return self._accept_sum / len(self._accepts)

    def recent_switches(self) -> list[Switch]:
        return list(self._switches)

    def state(self) -> dict[str, Any]:
        """Plain JSON-able state, reported by /get_internal_state and the journal's ``spec``."""
        s = self.settings
        mean = self.accept_mean()
        depths = s.depths()
        return {
            "mode": s.mode,
            "on": self._depth > 0,
            "steps": self._depth,
            "depth": self._depth,
            "candidates": list(depths),
            "depth_model": self._costs is not None and len(depths) > 2,
            "accept_by_depth": self._accept_by_depth(depths),
            "steps_at": {str(d): n for d, n in sorted(self._steps_at.items())},
            "reason": self._reason,
            "switches": self._switch_count,
            "step": self._step,
            "last_switch_step": self._last_switch_step,
            "batch_size": self._last_batch,
            "accept_mean": None if mean is None else round(mean, 4),
            "verifies": self._verifies,
            "steps_on": self._steps_on,
            "steps_off": self._steps_off,
            "settings": s.as_dict(),
            "recent_switches": [sw.as_dict() for sw in self._switches],
            "meter": self.meter.as_dict(),
        }

    def _accept_by_depth(self, depths: tuple[int, ...]) -> dict[str, float] | None:
        """E[min(L, d)] per positive candidate, as the depth choice sees it; None before any evidence."""
        if self._stats.evidence() <= 0:
            return None
        expected = self._stats.expected(depths[-1])
        return {str(d): round(expected[d], 4) for d in depths if d}
