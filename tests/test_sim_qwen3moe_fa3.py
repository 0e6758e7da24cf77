"""h200-qwen3moe-fa3: the MoE on FA3, calibrated to the seventh sitting, and the (FA3, MoE) row it chose.

On FA3 static EAGLE-3 beat specctl's off state at every load the GPU measured
(docs/benchmarks.md), where on Triton it lost from 8 requests: the preset
must be h200-qwen3moe with only FA3's attention terms and the fitted costs
changed, and auto with the row must run the better state where the policy's
defaults (off for load from 32) lose.
"""

from __future__ import annotations

import dataclasses

from specctl.runtime.core.thresholds import MOE_BY_BACKEND, for_backend
from specctl.runtime.sim.offline import run_point
from specctl.runtime.sim.presets import PRESETS, get_preset
from specctl.runtime.sim.rows import supervised_settings

MOE_FA3 = get_preset("h200-qwen3moe-fa3")
MOE_TRITON = get_preset("h200-qwen3moe")


def test_it_is_the_triton_moe_preset_with_fa3s_attention_and_the_fitted_costs() -> None:
    assert "h200-qwen3moe-fa3" in PRESETS and MOE_FA3.calibrated
    assert (MOE_FA3.attention_backend, MOE_FA3.steps, MOE_FA3.topk, MOE_FA3.accept_len) == ("fa3", 3, 1, 2.8)
    assert "fa3-sweep2.csv" in MOE_FA3.source and [c.label for c in MOE_FA3.checks] == ["no-spec server"]
    p, triton = MOE_FA3.params, MOE_TRITON.params
    changed = {f.name for f in dataclasses.fields(p) if getattr(p, f.name) != getattr(triton, f.name)}
    assert changed == {"verify_kv_s", "draft_overhead_s", "req_overhead_s", "step_overhead_s", "draft_kv_s",
                       "moe_spread", "prefill_overhead_s"}
    # its windows decoded token id 100, as the Triton preset's first fit: that fit's routing and prefill stay
    assert (p.moe_spread, p.prefill_overhead_s) == (0.25, 5.9e-3) != (triton.moe_spread, triton.prefill_overhead_s)
    dense_fa3 = get_preset("h200-llama8b-fa3").params
    assert p.draft_kv_s == dense_fa3.draft_kv_s
    # FA3's verify reads the cache far faster than Triton's extend kernel, but not at the HBM floor on a MoE
    assert p.verify_kv_s < triton.verify_kv_s / 2 and p.verify_kv_s > 5 * dense_fa3.verify_kv_s


def test_static_beats_off_at_every_load_as_measured() -> None:
    for c in (1, 16, 64, 256):
        on = run_point(MOE_FA3, c, "on", warmup_s=10, window_s=30).tok_s
        off = run_point(MOE_FA3, c, "off", warmup_s=10, window_s=30).tok_s
        assert on > 1.1 * off, (c, on, off)


def test_the_fa3_moe_row_keeps_static_where_the_defaults_turn_it_off() -> None:
    row = for_backend("fa3", MOE_FA3.params.moe_experts)
    assert row == MOE_BY_BACKEND["fa3"]
    on = run_point(MOE_FA3, 64, "on", warmup_s=10, window_s=30).tok_s
    auto = run_point(MOE_FA3, 64, "auto", settings=row, warmup_s=10, window_s=30)
    defaults = run_point(MOE_FA3, 64, "auto", warmup_s=10, window_s=30)
    assert auto.on_fraction == 1.0 and auto.tok_s >= 0.95 * on
    assert defaults.on_fraction == 0.0 and defaults.tok_s < 0.85 * on


def test_the_supervisors_rule_gives_the_preset_its_row() -> None:
    settings, said = supervised_settings(MOE_FA3, {})
    assert settings == MOE_BY_BACKEND["fa3"] and "the fa3 row for a MoE applies" in said
