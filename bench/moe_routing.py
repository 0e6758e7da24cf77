"""What a MoE preset predicts with real routing: the prediction for the sweeps with real tokens.

Why: every MoE sweep so far ran with SGLang's fixed simulated token (token id
100 for every token a speculative server emits, off state included), so the
MoE presets were fitted to batches that all route alike (docs/benchmarks.md).
Each preset's "no-spec server" check is the one series with real tokens (a
server without speculation decodes each request's own greedy tokens). This fits
the routing spread alone to that series, keeps every other cost, and prints
what the preset then predicts for no speculation and static EAGLE-3, written
down before the sweeps with real tokens measure it.

Triton's has been measured since (docs/benchmarks.md, "Eighth sitting": this
predicted a crossover near 50 requests, the GPU put it between 128 and 256), and
h200-qwen3moe is now fitted to those real-token windows, so for it this prints
the refit's view; FA3's preset is still the token-100 fit this was written for.

    python bench/moe_routing.py [--preset h200-qwen3moe --preset h200-qwen3moe-fa3]

``--carry-triton`` makes the second prediction for FA3, written after
Triton's real-token sweep and before FA3's: h200-qwen3moe-fa3 with each of the
six costs Triton's refit moved scaled as it moved on Triton (token 100 to real
tokens), then the three a forward without speculation pays (the routing
spread, a step's and a request's overhead) fitted to FA3's own real-token
series, the no-spec server: carried alone they land at half of it from 128
requests (a request's overhead carried 4x), so the carry is a guess for the
speculative costs only.

    python bench/moe_routing.py --carry-triton
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from specctl.runtime.sim.calibrate import fit, points, prediction_rows, render, worst
from specctl.runtime.sim.preset_model import Preset
from specctl.runtime.sim.presets import PRESETS, QWEN3MOE_TOKEN100_FIT

MOE_PRESETS = ("h200-qwen3moe", "h200-qwen3moe-fa3")
REAL_TOKENS = "no-spec server"  # the check measured with real tokens


def real_routing(preset: Preset) -> tuple[Preset, Preset]:
    """(the preset with its spread fitted to the real-token check, that fit's own view of the check)."""
    checks = [c for c in preset.checks if c.label == REAL_TOKENS]
    if preset.params.moe_experts <= 0 or not checks:
        raise ValueError(f"{preset.name} is not a MoE preset with a {REAL_TOKENS!r} check")
    fitted = fit(dataclasses.replace(preset, measured=checks[0].measured), ["moe_spread"], rounds=4)
    return dataclasses.replace(preset, params=fitted.params), fitted


def carried(preset: Preset, triton: Preset) -> Preset:
    """``preset`` (fitted to token 100) with each cost of the first Triton fit moved as the refit moved it."""
    moved = {key: getattr(preset.params, key) * getattr(triton.params, key) / before
             for key, before in QWEN3MOE_TOKEN100_FIT.items()}
    return dataclasses.replace(preset, params=dataclasses.replace(preset.params, **moved))


NO_SPEC_COSTS = ("moe_spread", "step_overhead_s", "req_overhead_s")  # what a forward without speculation pays


def carry_report(preset: Preset, triton: Preset) -> list[str]:
    moved = carried(preset, triton)
    check = next(c for c in preset.checks if c.label == REAL_TOKENS)
    on_check = dataclasses.replace(moved, measured=check.measured)
    landed = fit(on_check, NO_SPEC_COSTS, rounds=4)
    final = dataclasses.replace(moved, params=landed.params)
    rows = points(landed)
    return [f"{preset.name} with Triton's refit carried over (token 100 -> real tokens, cost by cost):",
            ", ".join(f"{key} {getattr(preset.params, key):.3g} -> {getattr(moved.params, key):.3g}"
                      for key in QWEN3MOE_TOKEN100_FIT),
            f"carried alone, the {REAL_TOKENS}'s windows land {worst(points(on_check)) * 100:.0f} % off at worst; "
            f"then {', '.join(NO_SPEC_COSTS)} fitted to them: "
            + ", ".join(f"{key} {getattr(final.params, key):.3g}" for key in NO_SPEC_COSTS),
            *render(rows),
            f"worst point: {worst(rows) * 100:.1f} % off",
            "",
            *prediction_rows(final, decimals=0)]


def report(preset: Preset) -> list[str]:
    real, on_check = real_routing(preset)
    fit_rows = points(on_check)
    return [f"{preset.name}: moe_spread {preset.params.moe_spread:g} (fitted to token id 100) -> "
            f"{real.params.moe_spread:.2f} (fitted to the {REAL_TOKENS}, real tokens)",
            *render(fit_rows),
            f"worst point: {worst(fit_rows) * 100:.1f} % off (the spread alone)",
            "",
            *prediction_rows(real, decimals=0)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(MOE_PRESETS), action="append",
                    help=f"preset (repeatable; default: {', '.join(MOE_PRESETS)})")
    ap.add_argument("--carry-triton", action="store_true",
                    help="predict h200-qwen3moe-fa3 with real tokens by moving its costs as Triton's refit moved")
    ns = ap.parse_args(argv)
    if ns.carry_triton:
        if ns.preset:
            ap.error("--carry-triton predicts h200-qwen3moe-fa3 from h200-qwen3moe: no --preset")
        print("\n".join(carry_report(PRESETS["h200-qwen3moe-fa3"], PRESETS["h200-qwen3moe"])))
        return 0
    for name in ns.preset or MOE_PRESETS:
        print("\n".join(report(PRESETS[name])))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
