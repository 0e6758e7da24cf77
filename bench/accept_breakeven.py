"""Where speculation stops paying, by accept length and batch size, in the simulator.

For each H200 preset (Triton, FA3 and FlashInfer, each calibrated to a GPU
sweep) and each accept length, the closed-loop tok/s with speculation forced
on over forced off. A ratio above 1 means drafting pays at that load and
acceptance; the policy's acceptance floor is a line fitted under where it
crosses 1 (docs/policy.md, runtime/core/thresholds.py).

``--breakeven`` bisects that crossing instead, per batch size, and prints it
in accepted draft tokens a verify (accept length - 1): the curve a backend's
``min_accept + accept_slope * batch`` follows.

    python bench/accept_breakeven.py [--preset NAME ...] [--breakeven]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

from specctl.runtime.sim.offline import run_point
from specctl.runtime.sim.presets import PRESETS

ACCEPT = (1.3, 1.5, 1.8, 2.0, 2.3, 2.8)
CONCURRENCY = (1, 16, 64, 256)
H200_PRESETS = ("h200-llama8b-fa3", "h200-llama8b", "h200-llama8b-flashinfer")
BREAKEVEN_CONCURRENCY = (1, 2, 4, 8, 16, 24, 32, 48, 64, 128, 192, 256)
BISECT_ROUNDS = 10  # the accept length to within 3 / 2^10, far below a window's scatter


def ratio(preset_name: str, accept_len: float, c: int) -> float:
    preset = dataclasses.replace(PRESETS[preset_name], accept_len=accept_len)
    on = run_point(preset, c, "on", warmup_s=4, window_s=10).tok_s
    off = run_point(preset, c, "off", warmup_s=4, window_s=10).tok_s
    return on / off


def breakeven(preset_name: str, c: int) -> float | None:
    """Accepted draft tokens a verify at which on / off crosses 1 at ``c``; None where it never pays."""
    steps = PRESETS[preset_name].steps
    lo, hi = 1.0, float(steps + 1)  # accept lengths: nothing accepted, everything accepted
    if ratio(preset_name, hi, c) < 1.0:
        return None
    for _ in range(BISECT_ROUNDS):
        mid = (lo + hi) / 2
        if ratio(preset_name, mid, c) < 1.0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2 - 1.0


def ratio_table(name: str) -> list[str]:
    lines = [f"{name}: tok/s with speculation on / off (4 s warm-up + 10 s window, simulated)",
             "| accept length | " + " | ".join(f"c={c}" for c in CONCURRENCY) + " |",
             "| ---: |" + " ---: |" * len(CONCURRENCY)]
    for acc in ACCEPT:
        cells = " | ".join(f"{ratio(name, acc, c):.2f}" for c in CONCURRENCY)
        lines.append(f"| {acc} | {cells} |")
    return lines


def breakeven_table(name: str) -> list[str]:
    steps = PRESETS[name].steps
    cells = []
    for c in BREAKEVEN_CONCURRENCY:
        value = breakeven(name, c)
        cells.append(f"> {steps}" if value is None else f"{value:.2f}")
    return [f"{name}: break-even accepted draft tokens a verify (on / off = 1; 4 s warm-up + 10 s window, "
            "simulated)",
            "| requests | " + " | ".join(str(c) for c in BREAKEVEN_CONCURRENCY) + " |",
            "| --- |" + " ---: |" * len(BREAKEVEN_CONCURRENCY),
            "| break-even | " + " | ".join(cells) + " |"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), action="append",
                    help=f"preset (repeatable; default: {', '.join(H200_PRESETS)})")
    ap.add_argument("--breakeven", action="store_true",
                    help="bisect the accept length where on / off crosses 1, per batch size")
    ns = ap.parse_args(argv)
    for name in ns.preset or H200_PRESETS:
        print("\n".join(breakeven_table(name) if ns.breakeven else ratio_table(name)))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
