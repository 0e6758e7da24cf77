"""What a MoE preset predicts with real routing: the prediction for the sweeps with real tokens.

Why: every MoE sweep so far ran with SGLang's fixed simulated token (token id
100 for every token a speculative server emits, off state included), so the
MoE presets were fitted to batches that all route alike (docs/results/moe-fa3.md).
Each preset's "no-spec server" check is the one series with real tokens (a
server without speculation decodes each request's own greedy tokens). This fits
the routing spread alone to that series, keeps every other cost, and prints
what the preset then predicts for no speculation and static EAGLE-3, written
down before the sweeps with real tokens measure it.

Triton's has been measured since (docs/results/moe.md, "Eighth sitting": this
predicted a crossover near 50 requests, the GPU put it between 128 and 256), and
h200-qwen3moe is now fitted to those real-token windows, so for it this prints
the refit's view; FA3's preset is still the token-100 fit this was written for.

    python bench/moe_routing.py [--preset h200-qwen3moe --preset h200-qwen3moe-fa3]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from specctl.runtime.sim.calibrate import fit, points, predicted, render, worst
from specctl.runtime.sim.preset_model import Preset
from specctl.runtime.sim.presets import PRESETS

MOE_PRESETS = ("h200-qwen3moe", "h200-qwen3moe-fa3")
REAL_TOKENS = "no-spec server"  # the check measured with real tokens


def real_routing(preset: Preset) -> tuple[Preset, Preset]:
    """(the preset with its spread fitted to the real-token check, that fit's own view of the check)."""
    checks = [c for c in preset.checks if c.label == REAL_TOKENS]
    if preset.params.moe_experts <= 0 or not checks:
        raise ValueError(f"{preset.name} is not a MoE preset with a {REAL_TOKENS!r} check")
    fitted = fit(dataclasses.replace(preset, measured=checks[0].measured), ["moe_spread"], rounds=4)
    return dataclasses.replace(preset, params=fitted.params), fitted


def report(preset: Preset) -> list[str]:
    real, on_check = real_routing(preset)
    rows, fit_rows = predicted(real), points(on_check)
    return [f"{preset.name}: moe_spread {preset.params.moe_spread:g} (fitted to token id 100) -> "
            f"{real.params.moe_spread:.2f} (fitted to the {REAL_TOKENS}, real tokens)",
            *render(fit_rows),
            f"worst point: {worst(fit_rows) * 100:.1f} % off (the spread alone)",
            "",
            "| c | " + " | ".join(str(c) for c, _, _ in rows) + " |",
            "| --- |" + " ---: |" * len(rows),
            "| no spec tok/s | " + " | ".join(f"{none:.0f}" for _, none, _ in rows) + " |",
            "| static tok/s | " + " | ".join(f"{static:.0f}" for _, _, static in rows) + " |",
            "| static / none | " + " | ".join(f"{static / none:.2f}" for _, none, static in rows) + " |"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(MOE_PRESETS), action="append",
                    help=f"preset (repeatable; default: {', '.join(MOE_PRESETS)})")
    ns = ap.parse_args(argv)
    for name in ns.preset or MOE_PRESETS:
        print("\n".join(report(PRESETS[name])))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
