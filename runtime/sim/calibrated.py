"""The calibration loop in simulated time: the engine, the real policy and the real Calibrator, in process.

The supervisor's loop (runtime/supervisor/calibrate.py) reads the server's
policy state every poll, hands it to :class:`Calibrator` and sends what it
asks for as settings. Here the same happens every ``poll_s`` simulated
seconds against the engine's own policy, with no HTTP in between, so a run
over minutes of simulated load takes seconds and, given a seed, is the same
every time. Forced on, forced off and plain auto run the same schedule for
the side-by-side (bench/calibrate.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from specctl.runtime.core.calibration import Calibrator
from specctl.runtime.core.policy import SpecPolicy
from specctl.runtime.core.settings import SettingsError
from specctl.runtime.sim.depth import policy_costs
from specctl.runtime.sim.preset_model import Preset
from specctl.runtime.sim.presets import get_preset

Server = Literal["on", "off", "auto", "calibrated"]
POLL_S = 0.5  # the supervisor's default interval


@dataclass(frozen=True)
class Level:
    """One stretch of the schedule: ``concurrency`` clients for ``seconds``; tok/s counted after ``settle_s``."""

    concurrency: int
    seconds: float
    settle_s: float = 0.0


@dataclass(frozen=True)
class LevelResult:
    concurrency: int
    tok_s: float
    on_fraction: float


@dataclass
class Run:
    """A schedule's outcome: tok/s per level and what calibration did."""

    levels: list[LevelResult] = field(default_factory=list)
    steps: int = 0
    probe_steps: int = 0
    probe_cost: float = 0.0
    probes: int = 0
    publishes: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def probe_share(self) -> float:
        return self.probe_steps / self.steps if self.steps else 0.0


def run_schedule(preset: Preset, schedule: Sequence[Level], server: Server, *, seed: int = 0,
                 settings: Mapping[str, Any] | None = None, poll_s: float = POLL_S,
                 owned: Sequence[str] = (), step_noise: float = 0.0) -> Run:
    """Closed-loop clients at each level's concurrency, one engine across the schedule.

    ``settings``: the policy's starting settings over the preset's (a measured row, an
    operator's); ``owned``: the keys an operator set, which calibration leaves alone;
    ``step_noise``: the scatter of step times (SimEngine's), as a GPU's meter reads them.
    """
    changes = dict(settings or {})
    if server in ("on", "off"):
        changes["mode"] = server
    policy = SpecPolicy(preset.default_settings().with_changes(changes),
                        policy_costs(preset.params, preset.workload, ()))
    engine = preset.engine(policy, seed=seed, step_noise=step_noise)
    target = [0]

    def refill(_: Any = None) -> None:
        while engine.in_flight("load") < target[0]:
            engine.submit_random()

    engine.on_finish = refill
    calibrator = Calibrator() if server == "calibrated" else None
    run = Run()
    next_poll = poll_s
    for level in schedule:
        target[0] = level.concurrency
        refill()
        start = engine.now
        end = start + level.seconds
        t0 = tokens0 = None
        state0: dict[str, Any] | None = None
        while engine.now < end:
            if t0 is None and engine.now >= start + level.settle_s:
                t0, tokens0, state0 = engine.now, engine.decode_tokens_total, policy.state()
            if engine.step() is None:
                engine.idle_until(end)
            if calibrator is not None and engine.now >= next_poll:
                probe_s = _poll(calibrator, policy, owned, run, engine.now)
                next_poll = engine.now + (min(probe_s, poll_s) if probe_s is not None else poll_s)
        assert t0 is not None and tokens0 is not None and state0 is not None
        after = policy.state()
        steps = after["step"] - state0["step"]
        on = (after["steps_on"] - state0["steps_on"]) / steps if steps else 0.0
        tok_s = (engine.decode_tokens_total - tokens0) / (engine.now - t0)
        run.levels.append(LevelResult(level.concurrency, tok_s, on))
    run.steps = policy.step
    run.settings = policy.settings.as_dict()
    if calibrator is not None:
        run.probe_steps, run.probe_cost, run.probes = calibrator.probe_steps, calibrator.probe_cost, calibrator.probes
    return run


def _poll(calibrator: Calibrator, policy: SpecPolicy, owned: Sequence[str], run: Run, now: float) -> float | None:
    """One supervisor poll: the policy's state to the calibrator, its plan back as settings.

    Returns how soon to read again where a probe began (the supervisor wakes a poll then).
    """
    plan = calibrator.observe(policy.state(), owned)
    try:
        if plan.publish:
            policy.apply(plan.publish)
            run.publishes.append((round(now, 3), dict(plan.publish)))
        if plan.probe is not None:
            policy.apply({"mode": plan.probe})
    except SettingsError:  # the server refuses what does not fit its settings, as SGLang's plugin does
        pass
    return plan.probe_s


# -- presets no thresholds row covers (the calibration's tests and bench/calibrate.py) ----------------


def moe_flashinfer() -> Preset:
    """Qwen3-30B-A3B's shapes on FlashInfer (no MoE row for it), at accept length 2.4.

    Not a calibrated preset: h200-qwen3moe's costs with the verify's KV term scaled as FlashInfer's is to
    Triton's on Llama (227 / 493 ns), enough to put the break-even where neither default state is right.
    """
    p = get_preset("h200-qwen3moe")
    return replace(p, name="h200-qwen3moe-flashinfer-uncalibrated", attention_backend="flashinfer", accept_len=2.4,
                   params=replace(p.params, verify_kv_s=p.params.verify_kv_s * 227 / 493))


def unknown_gpu() -> Preset:
    """h200-llama8b-flashinfer's costs on a GPU name no row knows: the supervisor would keep the defaults."""
    p = get_preset("h200-llama8b-flashinfer")
    return replace(p, name="unknown-gpu-flashinfer", gpu=replace(p.gpu, name="NVIDIA B200"))
