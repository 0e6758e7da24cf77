"""The policy's settings: what an operator may set, checked whole, and their wire form.

Kept apart from the policy's decisions (policy.py) because this is the
operator's contract: every value a CLI flag, a config file, the control
socket or SGLang's /set_internal_state carries is parsed and validated here,
all or nothing, with an error that names the field (``SettingsError``); the
policy only ever sees settings that passed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

from specctl.runtime.core.depth_model import MAX_DEPTH
from specctl.runtime.core.wire import HAND_BACK, WIRE_PREFIX

Mode = Literal["auto", "on", "off"]
MODES: tuple[Mode, ...] = ("auto", "on", "off")
# SGLang's /set_internal_state takes numbers only, so the mode travels as one.
MODE_CODES: dict[Mode, int] = {"auto": 0, "on": 1, "off": 2}
CODE_MODES: dict[int, Mode] = {v: k for k, v in MODE_CODES.items()}


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
    # per off step and a draft prefill per prompt (docs/sglang-plugin.md, "Fast off"), so keep it where cheap.
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


# The depth the default acceptance floor (PolicySettings.min_accept) was set for: the default steps.
FLOOR_STEPS = 3


def floor_for_steps(steps: int) -> float:
    """The default acceptance floor scaled to ``steps`` draft steps: round(1.3 * steps / 3, 1).

    Why: min_accept counts accepted draft tokens a verify, and the default 1.3 was set for 3
    draft steps. A verify of fewer steps can accept proportionally fewer (at most ``steps``),
    so at 1 step the default is more than any verify can reach, and scaled to the depth the
    same bar asks as much of each drafted token: 0.4 at 1 step, 0.9 at 2. Every hint that
    names a floor for a shallow depth takes its number from here, so all of them agree.
    """
    return round(PolicySettings.min_accept * steps / FLOOR_STEPS, 1)


def unasked_floor(steps: int, floor: float, source: str, fix: str) -> str:
    """The refusal of an acceptance floor the operator did not give that ``steps`` cannot reach, with its fix.

    ``source`` says whose floor it is ("the default", "the triton thresholds'"); ``fix`` is how
    this command takes a setting ("--set " for run, sglang-args and the simulator's own CLI).
    The operator never typed the floor, so the words say so and give the exact value to pass.
    """
    step_s = f"{steps} draft step{'s' if steps != 1 else ''}"
    return (f"at {step_s} {source} acceptance floor min_accept {floor:g} (accepted draft tokens a verify) is "
            f"more than a verify can accept; give {fix}min_accept={floor_for_steps(steps):g} (the default "
            f"scaled to {step_s}; docs/policy.md)")


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


def check_ranges(changes: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`check_fields`, and each value within its own bounds, whatever the other settings are.

    A value outside them is wrong on any server (``off_at=-1``, ``steps=99``): the CLI refuses it
    as a usage error before it asks, and the supervisor with an error of its own kind, not with
    the pair rule that a whole set is checked against.
    """
    checked = check_fields(changes)
    for key, value in checked.items():
        if key == "candidates":
            _validate_candidates(value)
            continue
        if key not in _BOUNDS:
            continue
        low, high = _BOUNDS[key]
        if not low <= value <= high:
            raise SettingsError(key, f"must be between {_plain(low)} and {_plain(high)}, got {_plain(value)}")
    return checked


def _plain(number: float) -> str:
    """1048576 rather than 1.04858e+06, 0.5 as 0.5: as an operator types it."""
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


MAX_BATCH = 1 << 20  # far above any server's running requests ("never off for load"); more is a typo
MAX_STEPS = 16
_BOUNDS: dict[str, tuple[float, float]] = {
    "steps": (1, MAX_STEPS), "off_at": (1, MAX_BATCH), "on_at": (0, MAX_BATCH - 1), "min_accept": (0, MAX_STEPS),
    "accept_slope": (0, 1), "accept_window": (1, 100_000), "probe_after": (1, 10_000_000), "dwell": (0, 1_000_000),
    "warm_below": (0, 1_000_000)}
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
    _validate_candidates(s.candidates)
    if s.candidates and s.steps not in s.candidates:
        raise SettingsError("steps", f"must be one of the candidates {[d for d in s.candidates if d]}, got {s.steps}")


def _validate_candidates(c: Any) -> None:
    if not isinstance(c, tuple) or list(c) != sorted(set(c)) or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in c):
        raise SettingsError("candidates", f"must be ascending distinct draft depths, got {c!r}")
    if not c:
        return
    if any(not 0 <= d <= MAX_DEPTH for d in c):
        raise SettingsError("candidates", f"depths must be between 0 and {MAX_DEPTH}, got {list(c)}")
    if 0 not in c or len(c) < 2:
        raise SettingsError("candidates", f"must hold 0 (off) and at least one depth, got {list(c)}")


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


def warmup_hold(value: Any, built: Iterable[int]) -> int | None:
    """The depth a ``specctl_warmup`` value holds (None: hand back); SettingsError for anything else.

    One rule for the plugin and the simulator: a built depth, or HAND_BACK.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise SettingsError("warmup", f"must be a depth or {HAND_BACK}, got {value!r}")
    depth, depths = int(value), sorted(built)
    if depth != HAND_BACK and depth not in depths:
        raise SettingsError("warmup", f"must be one of {depths} (the built depths) or {HAND_BACK}, got {depth}")
    return None if depth == HAND_BACK else depth
