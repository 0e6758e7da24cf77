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
  the most expected tokens per second of step time (docs/policy.md, "Depth").
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

from specctl.runtime.core.depth_model import MAX_DEPTH, AcceptStats, DepthCosts
from specctl.runtime.core.wire import WIRE_PREFIX

Mode = Literal["auto", "on", "off"]
MODES: tuple[Mode, ...] = ("auto", "on", "off")
# Reasons a switch happened; clients branch on these strings.
REASONS = ("load", "quiet", "low_accept", "probe", "forced", "depth")

# SGLang's /set_internal_state takes numbers only, so the mode travels as one.
MODE_CODES: dict[Mode, int] = {"auto": 0, "on": 1, "off": 2}
CODE_MODES: dict[int, Mode] = {v: k for k, v in MODE_CODES.items()}
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


class SettingsError(ValueError):
    """A settings change that was refused as a whole; ``field`` names the culprit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class PolicySettings:
    """Operator settings. Validated as a whole: a set is applied entirely or not at all."""

    mode: Mode = "auto"
    steps: int = 3  # draft steps when speculation is on
    # Defaults from the simulator's policy envelope (docs/simulator.md), calibrated to the
    # H200 sweep (static EAGLE-3 and no speculation level at 32 requests) and the 8-GPU
    # report (speculation that never pays, accept length 2.0, caught by min_accept).
    off_at: int = 32  # batch size at or above which auto turns speculation off
    on_at: int = 24  # batch size at or below which auto turns it back on
    min_accept: float = 1.3  # acceptance floor at batch size 0: mean accepted draft tokens a verify
    # Accepted draft tokens a verify that each request of the decode batch adds to the floor
    # (floor = min_accept + accept_slope * batch size): a larger batch makes a verify dearer
    # against plain decode, so drafting must hit more often to pay (bench/accept_breakeven.py).
    # With both 0 the acceptance rule is off.
    accept_slope: float = 0.0
    accept_window: int = 64  # verifies the acceptance mean is taken over
    probe_after: int = 4096  # steps after a low_accept switch before trying again
    dwell: int = 8  # minimum steps between two automatic switches
    # Batch size below which the draft model keeps its KV cache warm while speculation is
    # off (0: never), prompts admitted while off included. Not an input of decide(): the
    # plugin's fast off reads it each off step and prefill. A warm draft costs a draft extend
    # per off step and a draft prefill per prompt (docs/fast-off.md), so keep it where cheap.
    warm_below: int = 0
    # Depths auto chooses among (0 = off), each with a runtime state SGLang built at start
    # (the adaptive config lists exactly these). Empty: {0, steps}, the on/off policy. Auto
    # only uses candidates up to ``steps``, so ``steps`` caps the depth in auto and pins it
    # in forced on. Travels on the wire as a bit mask (bit d set: depth d is a candidate).
    candidates: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _validate(self)

    def with_changes(self, changes: Mapping[str, Any]) -> PolicySettings:
        """A new, validated settings object; raises SettingsError and changes nothing on bad input."""
        return replace(self, **check_fields(changes))

    def to_wire(self, keys: Iterable[str] | None = None) -> dict[str, int | float]:
        """The numeric ``server_args`` form that SGLang's /set_internal_state accepts."""
        values = self.as_dict()
        chosen = list(values) if keys is None else list(keys)
        wire: dict[str, int | float] = {}
        for key in chosen:
            value = values[key]
            if key == "mode":
                value = MODE_CODES[value]
            elif key == "candidates":
                value = candidates_mask(value)
            wire[WIRE_PREFIX + key] = value
        return wire

    def as_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["candidates"] = list(self.candidates)
        return values

    def depths(self) -> tuple[int, ...]:
        """The depths auto may choose now: the candidates up to ``steps`` ({0, steps} by default)."""
        if not self.candidates:
            return (0, self.steps)
        return tuple(d for d in self.candidates if d <= self.steps)


def check_fields(changes: Mapping[str, Any]) -> dict[str, Any]:
    """Each setting named known and of its type, coerced; raises SettingsError.

    What depends on the others (on_at below off_at) is checked against a whole
    set: the CLI checks this much before it asks, the server the rest.
    """
    known = {f.name for f in fields(PolicySettings)}
    for key in changes:
        if key not in known:
            raise SettingsError(str(key), f"unknown setting (known: {', '.join(sorted(known))})")
    return {key: _coerce(key, value) for key, value in changes.items()}


MAX_BATCH = 1 << 20  # far above any server's running requests ("never off for load"); more is a typo
_INT_FIELDS = ("steps", "off_at", "on_at", "accept_window", "probe_after", "dwell", "warm_below")
_FLOAT_FIELDS = ("min_accept", "accept_slope")


def candidates_mask(depths: Iterable[int]) -> int:
    """{0, 1, 3} -> 0b1011: SGLang's /set_internal_state takes numbers only."""
    return sum(1 << d for d in depths)


def _coerce_candidates(value: Any) -> tuple[int, ...]:
    """"0,1,2,3", [0, 1, 2, 3] or "" (the default, {0, steps}) -> sorted depths; the rest is refused."""
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",")] if value.strip() else []
        if not all(re.fullmatch(r"[0-9]{1,2}", p) for p in parts):
            raise SettingsError("candidates", f"must be draft depths like 0,1,2,3, got {value[:40]!r}")
        value = [int(p) for p in parts]
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in value):
        raise SettingsError("candidates", f"must be a list of draft depths like 0,1,2,3, got {value!r}")
    return tuple(sorted(set(value)))


def _coerce(key: str, value: Any) -> Any:
    """Turn text or JSON numbers into the field's type, refusing anything lossy."""
    if key == "candidates":
        return _coerce_candidates(value)
    if key == "mode":
        if isinstance(value, str) and value.lower() in MODES:
            return value.lower()
        if isinstance(value, int) and not isinstance(value, bool) and value in CODE_MODES:
            return CODE_MODES[value]
        raise SettingsError(key, f"must be one of {', '.join(MODES)}, got {value!r}")
    if isinstance(value, bool):
        raise SettingsError(key, f"must be a number, got {value!r}")
    if isinstance(value, str):
        value = _parse_number(key, value)
    if key in _INT_FIELDS:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int):
            raise SettingsError(key, f"must be an integer, got {value!r}")
        return value
    if not isinstance(value, (int, float)):
        raise SettingsError(key, f"must be a number, got {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an integer past a float's range, from JSON
        raise SettingsError(key, "must be a finite number, got one too large to hold") from None
    if not math.isfinite(number):
        raise SettingsError(key, f"must be a finite number, got {value!r}")
    return number


_INT_TEXT = re.compile(r"[+-]?[0-9]{1,30}")  # longer is no setting, and int() refuses past 4300 digits
_FLOAT_TEXT = re.compile(
    r"[+-]?([0-9]{1,30}\.?[0-9]{0,30}|\.[0-9]{1,30})([eE][+-]?[0-9]{1,5})?|[+-]?(nan|inf|infinity)", re.IGNORECASE)


def _parse_number(key: str, text: str) -> int | float:
    """Plain ASCII decimals only: Python's int() and float() also take "1_000" and other scripts' digits,
    and float() rounds "1e-400" to 0, which for min_accept would switch the acceptance rule off unasked."""
    text = text.strip()
    shown = text if len(text) <= 40 else f"{text[:40]}..."
    if key in _INT_FIELDS and _INT_TEXT.fullmatch(text):
        return int(text)
    if not _FLOAT_TEXT.fullmatch(text):
        raise SettingsError(key, f"must be {'an integer' if key in _INT_FIELDS else 'a number'}, got {shown!r}")
    value = float(text)  # for an integer setting, "64.0" and "1e3" are whole numbers: _coerce takes them
    if value == 0 and re.search(r"[1-9]", text.lower().partition("e")[0]):
        raise SettingsError(key, f"is too small to hold, got {shown!r}; write 0 if 0 is meant")
    return value


def _validate(s: PolicySettings) -> None:
    if s.mode not in MODES:
        raise SettingsError("mode", f"must be one of {', '.join(MODES)}, got {s.mode!r}")
    for key in _INT_FIELDS:
        value = getattr(s, key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise SettingsError(key, f"must be an integer, got {value!r}")
    if not 1 <= s.steps <= 16:
        raise SettingsError("steps", f"must be between 1 and 16, got {s.steps}")
    if not 1 <= s.off_at <= MAX_BATCH:
        raise SettingsError("off_at", f"must be between 1 and {MAX_BATCH}, got {s.off_at}")
    if s.on_at < 0:
        raise SettingsError("on_at", f"must be at least 0, got {s.on_at}")
    if s.on_at >= s.off_at:
        raise SettingsError("on_at", f"must be below off_at ({s.off_at}), got {s.on_at}")
    for key in _FLOAT_FIELDS:
        value = getattr(s, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SettingsError(key, f"must be a finite number, got {value!r}")
    if not 0.0 <= s.min_accept <= s.steps:
        raise SettingsError("min_accept", f"must be between 0 and steps ({s.steps}), got {s.min_accept}")
    if not 0.0 <= s.accept_slope <= 1.0:
        raise SettingsError("accept_slope", f"must be between 0 and 1, got {s.accept_slope}")
    if not 1 <= s.accept_window <= 100_000:
        raise SettingsError("accept_window", f"must be between 1 and 100000, got {s.accept_window}")
    if not 1 <= s.probe_after <= 10_000_000:
        raise SettingsError("probe_after", f"must be between 1 and 10000000, got {s.probe_after}")
    if not 0 <= s.dwell <= 1_000_000:
        raise SettingsError("dwell", f"must be between 0 and 1000000, got {s.dwell}")
    if not 0 <= s.warm_below <= 1_000_000:
        raise SettingsError("warm_below", f"must be between 0 and 1000000, got {s.warm_below}")
    _validate_candidates(s)


def _validate_candidates(s: PolicySettings) -> None:
    c = s.candidates
    if not isinstance(c, tuple) or list(c) != sorted(set(c)) or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in c):
        raise SettingsError("candidates", f"must be ascending distinct draft depths, got {c!r}")
    if not c:
        return
    if any(not 0 <= d <= MAX_DEPTH for d in c):
        raise SettingsError("candidates", f"depths must be between 0 and {MAX_DEPTH}, got {list(c)}")
    if 0 not in c or len(c) < 2:
        raise SettingsError("candidates", f"must hold 0 (off) and at least one depth, got {list(c)}")
    if s.steps not in c:
        raise SettingsError("steps", f"must be one of the candidates {[d for d in c if d]}, got {s.steps}")


def settings_from_wire(current: PolicySettings, wire: Mapping[str, Any]) -> PolicySettings:
    """Apply the ``specctl_*`` keys of a /set_internal_state body; other keys are ignored."""
    changes = {k[len(WIRE_PREFIX):]: v for k, v in wire.items() if k.startswith(WIRE_PREFIX)}
    if "candidates" in changes:
        changes["candidates"] = _candidates_from_mask(changes["candidates"])
    return current.with_changes(changes)


def _candidates_from_mask(mask: Any) -> list[int]:
    if isinstance(mask, float) and mask.is_integer():
        mask = int(mask)
    if isinstance(mask, bool) or not isinstance(mask, int) or not 0 <= mask < 1 << (MAX_DEPTH + 1):
        raise SettingsError("candidates", f"must be a bit mask of depths 0..{MAX_DEPTH} on the wire, got {mask!r}")
    return [d for d in range(MAX_DEPTH + 1) if mask >> d & 1]


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
        self._accepts: deque[float] = deque(maxlen=self._settings.accept_window)
        self._accept_sum = 0.0
        self._stats = AcceptStats(self._settings.accept_window)
        self._switches: deque[Switch] = deque(maxlen=RECENT_SWITCHES)
        self._switch_count = 0
        self._verifies = 0
        self._steps_on = 0
        self._steps_off = 0
        self._last_batch = 0
        self._depths = self._settings.depths()
        self._steps_at: dict[int, int] = {}

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
            self._stats.set_window(new.accept_window)
        self._settings = new
        self._depths = new.depths()

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
        if not values:
            return
        self._record_mean(sum(values) / len(values))
        if len(self._depths) > 2:  # only a choice among depths reads acceptance per position
            self._stats.add(values, self._depth if depth is None else depth)

    def on_verify_mean(self, mean: float) -> None:
        """Same as :meth:`on_verify` for a caller that already holds the batch mean.

        A mean says nothing of how acceptance falls along the draft, so it
        feeds the on/off rules only, not the depth choice.
        """
        self._record_mean(float(mean))

    def _record_mean(self, mean: float) -> None:
        self._verifies += 1
        if len(self._accepts) == self._accepts.maxlen:
            self._accept_sum -= self._accepts[0]
        self._accepts.append(mean)
        self._accept_sum += mean

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
            return
        if self._depth == 0 and self._low_accept_since is not None:
            if self._step - self._low_accept_since >= s.probe_after:
                self._stats.reset()  # measure afresh: the on/off rules run at steps until evidence is in
                self._accepts.clear()
                self._accept_sum = 0.0
                self._to(s.steps, "probe", bs)
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
        return len(self._accepts) == self._accepts.maxlen

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
        on = depth > 0
        if on or reason != "low_accept":
            self._low_accept_since = None
        if on and not before:  # a fresh window after every resume, so old acceptance cannot switch it off again
            self._accepts.clear()
            self._accept_sum = 0.0
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
        }

    def _accept_by_depth(self, depths: tuple[int, ...]) -> dict[str, float] | None:
        """E[min(L, d)] per positive candidate, as the depth choice sees it; None before any evidence."""
        if self._stats.evidence() <= 0:
            return None
        expected = self._stats.expected(depths[-1])
        return {str(d): round(expected[d], 4) for d in depths if d}
