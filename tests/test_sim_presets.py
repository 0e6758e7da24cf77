"""The FA3 and FlashInfer presets: where speculation pays, by backend, against the Triton one they derive from."""

from __future__ import annotations

import dataclasses

import pytest

from specctl.runtime.core.thresholds import for_backend
from specctl.runtime.sim.calibrate import points, table
from specctl.runtime.sim.offline import run_point
from specctl.runtime.sim.presets import DEFAULT_PRESET, PRESETS, get_preset
from specctl.runtime.sim.rows import supervised_settings

TRITON = get_preset("h200-llama8b")
FA3 = get_preset("h200-llama8b-fa3")
FLASHINFER = get_preset("h200-llama8b-flashinfer")
NEVER_OFF_FOR_LOAD = {"off_at": 1 << 20, "on_at": (1 << 20) - 1}


def test_fa3_is_known_and_names_its_backend() -> None:
    assert "h200-llama8b-fa3" in PRESETS and DEFAULT_PRESET == "h200-llama8b"
    assert (TRITON.attention_backend, FA3.attention_backend) == ("triton", "fa3")
    assert "Triton" in TRITON.description and "FA3" in FA3.description
    assert set(FA3.measured) == {"nospec", "eagle3"}


def test_fa3_differs_from_triton_only_in_what_the_attention_backend_changes() -> None:
    changed = {f.name for f in dataclasses.fields(FA3.params)
               if getattr(FA3.params, f.name) != getattr(TRITON.params, f.name)}
    assert changed == {"verify_kv_s", "draft_overhead_s", "draft_kv_s"}
    assert FA3.params.verify_kv_s < TRITON.params.verify_kv_s / 10  # Triton's verify runs its extend kernel
    kv_bytes = 32 * 8 * 128 * 2 * 2  # per context token: layers x KV heads x head dim x (K, V) x bf16
    assert FA3.params.verify_kv_s >= 0.999 * kv_bytes / FA3.params.mem_bw  # no faster than HBM allows


def test_fa3_lands_within_its_tolerance_at_every_measured_point() -> None:
    rows = points(FA3)
    assert len(rows) == 8
    for series, concurrency, measured, simulated in rows:
        assert simulated == pytest.approx(measured, rel=FA3.tolerance), (series, concurrency)


@pytest.mark.parametrize("concurrency", [1, 64, 256])
def test_speculation_beats_no_speculation_on_fa3(concurrency: int) -> None:
    on = run_point(FA3, concurrency, "on").tok_s
    assert on > 1.05 * run_point(FA3, concurrency, "nospec").tok_s
    assert on > run_point(TRITON, concurrency, "on").tok_s


def test_load_thresholds_from_triton_cost_fa3_and_never_off_for_load_does_not() -> None:
    on = run_point(FA3, 256, "on").tok_s
    default = run_point(FA3, 256, "auto")  # off_at 32: switched off for load
    never = run_point(FA3, 256, "auto", settings=NEVER_OFF_FOR_LOAD)
    assert default.on_fraction == 0.0 and default.tok_s < 0.95 * on
    assert never.on_fraction == 1.0 and never.tok_s >= 0.95 * on


def test_calibrate_shows_the_triton_sweep_as_an_unfitted_check() -> None:
    text = table(TRITON)
    assert "check (not fitted): Triton sweep" in text
    assert len(points(TRITON, TRITON.checks[0].measured)) == 8


def test_flashinfer_is_known_and_differs_from_triton_in_its_three_fitted_parameters() -> None:
    assert FLASHINFER.attention_backend == "flashinfer" and "FlashInfer" in FLASHINFER.description
    changed = {f.name for f in dataclasses.fields(FLASHINFER.params)
               if getattr(FLASHINFER.params, f.name) != getattr(TRITON.params, f.name)}
    assert changed == {"verify_kv_s", "draft_overhead_s", "prefill_overhead_s"}
    assert FA3.params.verify_kv_s < FLASHINFER.params.verify_kv_s < TRITON.params.verify_kv_s


def test_flashinfer_lands_within_its_tolerance_and_crosses_over_where_it_was_measured() -> None:
    rows = points(FLASHINFER)
    assert len(rows) == 14 and FLASHINFER.tolerance <= 0.08
    for series, concurrency, measured, simulated in rows:
        assert simulated == pytest.approx(measured, rel=FLASHINFER.tolerance), (series, concurrency)
    sim = {(series, c): value for series, c, _, value in rows}
    assert sim["eagle3", 32] > sim["nospec", 32] and sim["eagle3", 64] < sim["nospec", 64]  # measured: 1.04, 0.94


@pytest.mark.parametrize("concurrency", [1, 32, 64, 256])
def test_the_flashinfer_row_keeps_auto_at_the_better_state(concurrency: int) -> None:
    on, off = (run_point(FLASHINFER, concurrency, mode).tok_s for mode in ("on", "off"))
    auto = run_point(FLASHINFER, concurrency, "auto", settings=for_backend("flashinfer"))
    assert auto.tok_s >= 0.95 * max(on, off)
    assert auto.on_fraction == (1.0 if concurrency <= 32 else 0.0)


def test_the_h200_tree_differs_from_triton_only_in_the_draft_and_its_two_refitted_costs() -> None:
    tree = get_preset("h200-llama8b-tree")
    assert (tree.topk, tree.steps, tree.draft_tokens, tree.attention_backend) == (4, 2, 16, "triton")
    changed = {f.name for f in dataclasses.fields(tree.params)
               if getattr(tree.params, f.name) != getattr(TRITON.params, f.name)}
    assert changed == {"draft_overhead_s", "verify_kv_s"}
    assert max(abs(sim / measured - 1) for *_, measured, sim in points(tree)) <= tree.tolerance


@pytest.mark.parametrize("concurrency", [1, 4, 64, 256])
def test_the_h200_tree_under_the_switch_serves_the_better_of_the_tree_and_none(concurrency: int) -> None:
    # what the GPU measured (docs/sglang-plugin.md): the tree at 1-4 requests, off from 16 (off_at 16 / on_at 8),
    # the row the supervisor gives a tree it launches there (sim/rows.py asks as the supervisor does)
    tree = get_preset("h200-llama8b-tree")
    best = max(run_point(tree, concurrency, "on").tok_s, run_point(tree, concurrency, "nospec").tok_s)
    settings, said = supervised_settings(tree, {})
    assert settings == {"off_at": 16, "on_at": 8} and "the triton row for a tree applies" in said
    auto = run_point(tree, concurrency, "auto", settings=settings)
    assert auto.tok_s >= 0.97 * best
    assert auto.on_fraction == (1.0 if concurrency <= 4 else 0.0)


def test_the_reports_tree_keeps_the_defaults_and_says_why() -> None:
    # the report's topk-4 tree on Blackwell with FlashInfer: no tree row was measured there, and a chain's never fits
    settings, said = supervised_settings(get_preset("rtx-8gpu-report"), {})
    assert settings == {}
    assert "a tree's were measured on Triton with a dense target on an H200 only" in said
    assert "the policy's defaults stay" in said
