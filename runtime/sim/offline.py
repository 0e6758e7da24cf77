"""Offline closed-loop runs of the engine, the way the H200 anchor was measured.

The measurement kept ``c`` clients each with one request in flight, warmed up
for 6 s and counted decode tokens over an 18 s window; doing the same here
makes the simulated numbers comparable with the measured ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

from ..policy import SpecPolicy
from .presets import Preset

Server = Literal["nospec", "on", "off", "auto"]
WARMUP_S = 6.0
WINDOW_S = 18.0


@dataclass(frozen=True)
class PointResult:
    """One concurrency point of one server configuration."""

    concurrency: int
    tok_s: float
    accept_len: float  # tokens per decode step over the window
    on_fraction: float | None  # share of decode steps with drafting; None without a policy
    switches: int | None


def run_point(preset: Preset, concurrency: int, server: Server, *, settings: Mapping[str, Any] | None = None,
              seed: int = 0, warmup_s: float = WARMUP_S, window_s: float = WINDOW_S) -> PointResult:
    """Closed loop of ``concurrency`` clients against a fresh engine; tokens/s over the window."""
    policy = None
    if server != "nospec":
        changes = dict(settings or {})
        if server != "auto":
            changes.setdefault("mode", server)
        policy = SpecPolicy(preset.default_settings().with_changes(changes))
    engine = preset.engine(policy, seed=seed)
    for _ in range(concurrency):
        engine.submit_random()
    engine.on_finish = lambda req: engine.submit_random()
    while engine.now < warmup_s:
        engine.step()
    tokens0, steps0 = engine.decode_tokens_total, _decode_steps(policy)
    on0 = policy.state()["steps_on"] if policy else 0
    switches0 = policy.state()["switches"] if policy else 0
    t0 = engine.now
    spec_tokens = 0
    decode_steps = 0
    while engine.now < t0 + window_s:
        report = engine.step()
        assert report is not None  # a closed loop always has work
        spec_tokens += report.tokens
        decode_steps += report.batch_size
    elapsed = engine.now - t0
    tok_s = (engine.decode_tokens_total - tokens0) / elapsed
    on_fraction = None
    switches = None
    if policy is not None:
        state = policy.state()
        steps = _decode_steps(policy) - steps0
        on_fraction = (state["steps_on"] - on0) / steps if steps else None
        switches = state["switches"] - switches0
    return PointResult(concurrency, tok_s, spec_tokens / decode_steps if decode_steps else 1.0,
                       on_fraction, switches)


def _decode_steps(policy: SpecPolicy | None) -> int:
    return policy.step if policy is not None else 0
