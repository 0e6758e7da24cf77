"""The performance model: shapes that must hold, calibration, determinism."""

from __future__ import annotations

import pytest

from specctl.runtime.core.policy import SpecPolicy
from specctl.runtime.core.settings import PolicySettings
from specctl.runtime.sim.calibrate import points
from specctl.runtime.sim.costs import alpha_for, decode_s, draft_forward_s, mean_accept_len, off_s, spec_s
from specctl.runtime.sim.engine import SimEngine
from specctl.runtime.sim.offline import run_point
from specctl.runtime.sim.presets import PRESETS, get_preset

H200 = get_preset("h200-llama8b")


def test_step_costs_grow_with_batch_and_context() -> None:
    p = H200.params
    for bs in (1, 8, 64, 255):
        assert decode_s(p, bs + 1, 1000) >= decode_s(p, bs, 1000)
        assert decode_s(p, bs, 2000) > decode_s(p, bs, 1000)
        assert spec_s(p, bs, 1000, 3) > decode_s(p, bs, 1000)
        assert spec_s(p, bs, 1000, 4) > spec_s(p, bs, 1000, 3)


def test_off_state_costs_what_no_speculation_costs() -> None:
    assert off_s(H200.params, 200, 100_000) == decode_s(H200.params, 200, 100_000)
    off = run_point(H200, 128, "off", window_s=6.0)
    nospec = run_point(H200, 128, "nospec", window_s=6.0)
    assert off.tok_s == pytest.approx(nospec.tok_s, rel=0.01)
    assert off.on_fraction == 0.0


def test_a_warm_draft_costs_a_draft_extend_per_off_step_below_warm_below() -> None:
    p = H200.params
    assert off_s(p, 8, 10_000, warm=True) == pytest.approx(off_s(p, 8, 10_000) + draft_forward_s(p, 8, 10_000))
    cold = run_point(H200, 16, "off", window_s=6.0)
    warm = run_point(H200, 16, "off", settings={"warm_below": 17}, window_s=6.0)
    above = run_point(H200, 16, "off", settings={"warm_below": 16}, window_s=6.0)
    assert warm.tok_s < 0.98 * cold.tok_s
    # 16 requests are not below warm_below=16; only the first admission (batch 0) ran warm, its
    # prefill with the draft's share, which shifts the closed loop's phase a little
    assert above.tok_s == pytest.approx(cold.tok_s, rel=0.005)
    assert warm.tok_s < 0.98 * above.tok_s


def test_a_cold_draft_skips_the_prompts_admitted_while_off() -> None:
    def engine(warm_below: int, fast_off: bool = True) -> SimEngine:
        policy = SpecPolicy(PolicySettings(mode="off", warm_below=warm_below))
        sim = SimEngine(H200.params, H200.workload, policy=policy, accept_len=2.8, accept_steps=3,
                        max_running=256, kv_pool_tokens=800_000, fast_off=fast_off)
        sim.submit(512, 8)
        return sim

    cold, warm, steps0 = engine(0), engine(100), engine(0, fast_off=False)
    first = [e.step() for e in (cold, warm, steps0)]
    assert all(r is not None and r.prefill_tokens == 512 for r in first)
    cold_s, warm_s, steps0_s = (r.duration for r in first)  # type: ignore[union-attr]
    assert warm_s > cold_s  # the draft's share of the prompt, and its extend
    assert steps0_s > cold_s


@pytest.mark.parametrize("steps", [1, 3, 7])
def test_alpha_inverts_the_mean_accept_length(steps: int) -> None:
    target = 1 + 0.6 * steps
    assert mean_accept_len(alpha_for(target, steps), steps) == pytest.approx(target, abs=1e-9)
    with pytest.raises(ValueError):
        alpha_for(steps + 1.5, steps)


def test_sampled_acceptance_matches_the_preset() -> None:
    result = run_point(H200, 16, "on", window_s=6.0)
    assert result.accept_len == pytest.approx(H200.accept_len, abs=0.08)
    assert result.on_fraction == 1.0


def test_throughput_rises_with_concurrency_without_speculation() -> None:
    rates = [run_point(H200, c, "nospec", warmup_s=2.0, window_s=4.0).tok_s for c in (1, 4, 16, 64, 256)]
    assert rates == sorted(rates)


def test_speculation_wins_alone_and_loses_under_load() -> None:
    assert run_point(H200, 1, "on").tok_s > 1.5 * run_point(H200, 1, "nospec").tok_s
    assert run_point(H200, 256, "nospec").tok_s > 1.5 * run_point(H200, 256, "on").tok_s


def test_auto_switches_off_under_load_and_stays_on_when_quiet() -> None:
    loaded = run_point(H200, 200, "auto")
    quiet = run_point(H200, 4, "auto")
    assert loaded.on_fraction is not None and loaded.on_fraction < 0.05
    assert quiet.on_fraction == 1.0
    # and so it delivers the better of the two (bench/policy_envelope.py sweeps every load)
    assert loaded.tok_s >= 0.95 * run_point(H200, 200, "off").tok_s
    assert quiet.tok_s >= 0.95 * run_point(H200, 4, "on").tok_s


@pytest.mark.parametrize("name", sorted(name for name, preset in PRESETS.items() if preset.calibrated))
def test_presets_land_near_their_measurements(name: str) -> None:
    preset = PRESETS[name]  # each states its tolerance; docs/simulator.md has the tables
    # wider only for the MoE, whose single 6 s windows of one state scatter by 15-20 % on Triton and by
    # 2175-3515 tok/s (+-23 %) at 128 requests on FA3 (docs/benchmarks.md)
    wider = {"h200-qwen3moe": 0.16, "h200-qwen3moe-fa3": 0.2}
    assert preset.tolerance <= wider.get(name, 0.12) and points(preset)
    for series, concurrency, measured, simulated in points(preset):
        assert simulated == pytest.approx(measured, rel=preset.tolerance), (series, concurrency)


def test_a_seed_gives_the_same_run_and_another_seed_a_different_one() -> None:
    def trace(seed: int) -> list[tuple[float, int, int]]:
        engine = H200.engine(SpecPolicy(H200.default_settings()), seed=seed)
        for _ in range(40):
            engine.submit_random()
        return [(r.duration, r.tokens, r.steps) for r in (engine.step() for _ in range(300)) if r]

    assert trace(7) == trace(7)
    assert trace(7) != trace(8)


@pytest.mark.parametrize(("max_running", "pool", "fits"), [(8, 10**6, 8), (256, 5000, 3)])
def test_admission_respects_max_running_and_the_kv_pool(max_running: int, pool: int, fits: int) -> None:
    engine = SimEngine(H200.params, H200.workload, policy=None, accept_len=2.8, accept_steps=3,
                       max_running=max_running, kv_pool_tokens=pool)
    for _ in range(30):
        engine.submit(1000, 500)
    for _ in range(600):
        engine.step()
        assert len(engine.running) <= fits
        assert engine.token_usage() <= 1.0
    assert engine.in_flight("load") < 30  # requests finished and queued ones moved up


def test_without_fast_off_the_off_state_is_sglangs_steps_0_state() -> None:
    """--slow-off: "off" runs a 1-token verify in target-verify mode and the draft extend."""
    p = H200.params
    assert spec_s(p, 200, 100_000, 0) > 2 * off_s(p, 200, 100_000)  # Triton's verify-mode attention
    tokens = []
    for fast in (True, False):
        engine = H200.engine(SpecPolicy(H200.default_settings().with_changes({"mode": "off"})), fast_off=fast)
        for _ in range(128):
            engine.submit_random()
        engine.on_finish = lambda req, engine=engine: engine.submit_random()
        while engine.now < 8.0:
            engine.step()
        tokens.append(engine.decode_tokens_total)
    assert tokens[1] < 0.6 * tokens[0]
