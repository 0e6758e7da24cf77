"""bench/moe_routing.py: the MoE presets' prediction with real routing, fitted to the one real-token series.

The MoE presets were fitted to windows where every request decoded SGLang's
simulated token id 100 (docs/benchmarks.md); the no-spec server's windows
decoded real tokens. Refitting the routing spread to those alone must spread
the routes wider than one token's, keep every other cost, and print the
prediction the next sweep is judged against.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench  # tests a bench/ script: the second tier

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

from moe_routing import real_routing  # noqa: E402

from specctl.runtime.sim.presets import get_preset  # noqa: E402


def test_real_tokens_spread_the_routes_and_change_nothing_else() -> None:
    preset = get_preset("h200-qwen3moe-fa3")
    real, _ = real_routing(preset)
    assert real.params.moe_spread > 1.0 > preset.params.moe_spread
    changed = {f.name for f in dataclasses.fields(real.params)
               if getattr(real.params, f.name) != getattr(preset.params, f.name)}
    assert changed == {"moe_spread"} and real.measured == preset.measured


def test_a_dense_preset_is_refused() -> None:
    with pytest.raises(ValueError, match="h200-llama8b is not a MoE preset"):
        real_routing(get_preset("h200-llama8b"))


def test_it_prints_the_fit_and_the_prediction() -> None:
    done = subprocess.run([sys.executable, str(BENCH / "moe_routing.py"), "--preset", "h200-qwen3moe-fa3"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "h200-qwen3moe-fa3: moe_spread 0.25 (fitted to token id 100) -> " in done.stdout
    assert "(fitted to the no-spec server, real tokens)" in done.stdout
    [ratios] = [line for line in done.stdout.splitlines() if line.startswith("| static / none |")]
    assert len(ratios.split("|")) == 2 + 1 + 7  # the seven concurrencies of the GPU sweep


def test_carrying_tritons_refit_to_fa3_moves_each_cost_by_tritons_ratio() -> None:
    from moe_routing import carried

    from specctl.runtime.sim.presets import QWEN3MOE_TOKEN100_FIT

    fa3, triton = get_preset("h200-qwen3moe-fa3"), get_preset("h200-qwen3moe")
    moved = carried(fa3, triton)
    for key, before in QWEN3MOE_TOKEN100_FIT.items():
        assert getattr(moved.params, key) == pytest.approx(getattr(fa3.params, key) * getattr(triton.params, key)
                                                           / before)
    assert moved.params.moe_spread == pytest.approx(triton.params.moe_spread)  # both were fitted at 0.25
    changed = {f.name for f in dataclasses.fields(moved.params)
               if getattr(moved.params, f.name) != getattr(fa3.params, f.name)}
    assert changed <= set(QWEN3MOE_TOKEN100_FIT)


def test_the_carried_prediction_is_printed_and_refuses_a_preset() -> None:
    done = subprocess.run([sys.executable, str(BENCH / "moe_routing.py"), "--carry-triton"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "h200-qwen3moe-fa3 with Triton's refit carried over" in done.stdout
    assert "| static / none |" in done.stdout and "fitted to them: moe_spread" in done.stdout
    bad = subprocess.run([sys.executable, str(BENCH / "moe_routing.py"), "--carry-triton", "--preset",
                          "h200-qwen3moe"], capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "--carry-triton predicts h200-qwen3moe-fa3" in bad.stderr
    assert "Traceback" not in bad.stderr
