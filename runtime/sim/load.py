"""The built-in closed-loop load generator: concurrency as a function of simulated time.

Specs (text, as on the command line and in ``POST /sim/load``):

- ``idle``: no load.
- ``steady:c=N``: N requests in flight at all times.
- ``ramp:from=A,to=B,period=S``: a triangle wave, A up to B over S/2 seconds and back
  down over S/2, repeating (so the policy sees the load rise and fall).
- ``bursts:low=A,high=B,period=S,duty=F``: B for the first F*S seconds of every
  period, A for the rest. Bare ``bursts`` is low=4, high=160, period=40,
  duty=0.4, so a fresh simulator visibly switches off and on.

Keys left out take the defaults below. Closed loop: whenever a request of the
generator finishes, a new one is queued while fewer than c(t) are in flight;
when c(t) falls, requests already running finish normally.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from specctl.runtime.sim.engine import SimEngine

MAX_CONCURRENCY = 100_000
MAX_PERIOD_S = 1_000_000.0

# kind -> key -> (default, type); insertion order is the canonical order of str().
_KINDS: dict[str, dict[str, tuple[float, type]]] = {
    "idle": {},
    "steady": {"c": (16, int)},
    "ramp": {"from": (1, int), "to": (128, int), "period": (60.0, float)},
    "bursts": {"low": (4, int), "high": (160, int), "period": (40.0, float), "duty": (0.4, float)},
}


@dataclass(frozen=True)
class LoadSpec:
    """A parsed load spec; ``params`` holds every key of its kind."""

    kind: str
    params: tuple[tuple[str, float], ...]

    def __str__(self) -> str:
        if not self.params:
            return self.kind
        return self.kind + ":" + ",".join(f"{k}={_fmt(v)}" for k, v in self.params)

    def concurrency(self, t: float) -> int:
        """Requests the generator keeps in flight ``t`` simulated seconds after the spec was set."""
        p = dict(self.params)
        if self.kind == "steady":
            return int(p["c"])
        if self.kind == "ramp":
            phase = (t % p["period"]) / p["period"]
            frac = 2 * phase if phase < 0.5 else 2 * (1 - phase)
            return round(p["from"] + (p["to"] - p["from"]) * frac)
        if self.kind == "bursts":
            phase = (t % p["period"]) / p["period"]
            return int(p["high"] if phase < p["duty"] else p["low"])
        return 0


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def parse_load(text: str) -> LoadSpec:
    """Parse a spec; the ValueError names the part that is wrong."""
    if not isinstance(text, str):
        raise ValueError(f"load spec must be text, got {type(text).__name__}")
    kind, sep, rest = text.strip().partition(":")
    kind = kind.strip().lower()
    if kind not in _KINDS:
        raise ValueError(f"unknown load kind {kind!r} (known: {', '.join(_KINDS)})")
    keys = _KINDS[kind]
    given = _parse_pairs(kind, rest) if sep else {}
    values = {key: given.get(key, default) for key, (default, _) in keys.items()}
    _check(kind, values)
    return LoadSpec(kind, tuple(values.items()))


def _parse_pairs(kind: str, rest: str) -> dict[str, float]:
    """``k=v,k=v`` into numbers of the key's type; unknown or repeated keys are errors."""
    keys = _KINDS[kind]
    out: dict[str, float] = {}
    for part in rest.split(","):
        key, eq, raw = part.partition("=")
        key, raw = key.strip().lower(), raw.strip()
        if not eq or not key:
            raise ValueError(f"{kind}: expected key=value, got {part.strip()!r}")
        if key not in keys:
            known = ", ".join(keys) or "none"
            raise ValueError(f"{kind}: unknown key {key!r} (known: {known})")
        if key in out:
            raise ValueError(f"{kind}: {key} given twice")
        out[key] = _number(kind, key, raw, keys[key][1])
    return out


def _number(kind: str, key: str, raw: str, typ: type) -> float:
    try:
        value = int(raw, 10) if typ is int else float(raw)
    except ValueError:
        what = "an integer" if typ is int else "a number"
        raise ValueError(f"{kind}: {key} must be {what}, got {raw!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{kind}: {key} must be finite, got {raw!r}")
    return value


def _check(kind: str, values: Mapping[str, float]) -> None:
    """Range checks, naming the key."""
    for key, value in values.items():
        if key == "period" and not 0 < value <= MAX_PERIOD_S:
            raise ValueError(f"{kind}: period must be in (0, {MAX_PERIOD_S:g}] seconds, got {value:g}")
        elif key == "duty" and not 0.0 <= value <= 1.0:
            raise ValueError(f"{kind}: duty must be between 0 and 1, got {value:g}")
        elif key not in ("period", "duty") and not 0 <= value <= MAX_CONCURRENCY:
            raise ValueError(f"{kind}: {key} must be between 0 and {MAX_CONCURRENCY}, got {value:g}")


class LoadDriver:
    """Keeps the engine's generator requests at the spec's concurrency (closed loop)."""

    TAG = "load"

    def __init__(self, spec: LoadSpec, start: float = 0.0) -> None:
        self.spec = spec
        self.origin = start

    def set(self, spec: LoadSpec, now: float) -> None:
        """Switch to ``spec``; its time starts now, so a new burst begins with its high phase."""
        self.spec = spec
        self.origin = now

    def target(self, now: float) -> int:
        return self.spec.concurrency(now - self.origin)

    def top_up(self, engine: SimEngine) -> None:
        """Queue requests until the generator has c(t) in flight."""
        missing = self.target(engine.now) - engine.in_flight(self.TAG)
        for _ in range(missing):
            engine.submit_random(self.TAG)
