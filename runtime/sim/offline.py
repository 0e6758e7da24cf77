"""Offline closed-loop runs of the engine, the way the H200 anchor was measured.

The measurement kept ``c`` clients each with one request in flight, warmed up
for 6 s and counted decode tokens over an 18 s window; doing the same here
makes the simulated numbers comparable with the measured ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from specctl.runtime.core.policy import SpecPolicy
from specctl.runtime.sim.depth import AcceptLaw, policy_costs
from specctl.runtime.sim.preset_model import Preset

Server = Literal["nospec", "on", "off", "auto"]
WARMUP_S = 6.0
WINDOW_S = 18.0


def static_settings(depth: int, depths: Sequence[int]) -> dict[str, Any]:
    """Forced on at one depth, with every depth built (as a server with those candidates).

    No acceptance floor or slope: the GPU's depth sweep pins a depth with
    ``min_accept=0`` (bench/gpu/run_fast_off.sh, depth_switch), or the policy
    would refuse a shallow depth whose accepted drafts fall under the floor.
    """
    return {"candidates": ",".join(map(str, depths)), "steps": depth, "mode": "on", "min_accept": 0.0,
            "accept_slope": 0.0}


@dataclass(frozen=True)
class PointResult:
    """One concurrency point of one server configuration."""

    concurrency: int
    tok_s: float
    accept_len: float  # tokens per decode step over the window
    on_fraction: float | None  # share of decode steps with drafting; None without a policy
    switches: int | None


def run_point(preset: Preset, concurrency: int, server: Server, *, settings: Mapping[str, Any] | None = None,
              seed: int = 0, warmup_s: float = WARMUP_S, window_s: float = WINDOW_S,
              accept_law: AcceptLaw | None = None) -> PointResult:
    """Closed loop of ``concurrency`` clients against a fresh engine; tokens/s over the window.

    ``accept_law``: acceptance per draft position (sim/depth.py); None keeps the
    preset's geometric law. With a ``candidates`` setting the policy gets the
    preset's cost table and chooses among depths.
    """
    policy = None
    if server != "nospec":
        changes = dict(settings or {})
        if server != "auto":
            changes.setdefault("mode", server)
        settings = preset.default_settings().with_changes(changes)
        policy = SpecPolicy(settings, policy_costs(preset.params, preset.workload, settings.candidates))
    engine = preset.engine(policy, seed=seed)
    engine.accept_law = accept_law
    for _ in range(concurrency):
        engine.submit_random()
    engine.on_finish = lambda req: engine.submit_random()
    while engine.now < warmup_s:
        engine.step()
    before = policy.state() if policy is not None else None
    t0, tokens0 = engine.now, engine.decode_tokens_total
    request_steps = 0  # sum of batch sizes: each running request takes part in each step
    while engine.now < t0 + window_s:
        report = engine.step()
        assert report is not None  # a closed loop always has work
        request_steps += report.batch_size
    tokens = engine.decode_tokens_total - tokens0
    on_fraction = switches = None
    if policy is not None and before is not None:
        after = policy.state()
        steps = after["step"] - before["step"]
        on_fraction = (after["steps_on"] - before["steps_on"]) / steps if steps else None
        switches = after["switches"] - before["switches"]
    accept = tokens / request_steps if request_steps else 1.0
    return PointResult(concurrency, tokens / (engine.now - t0), accept, on_fraction, switches)
