"""Where speculation stops paying, by accept length and batch size, in the simulator.

For each H200 preset (Triton and FA3, calibrated to the GPU sweeps) and each
accept length, the closed-loop tok/s with speculation forced on over forced
off. A ratio above 1 means drafting pays at that load and acceptance; the
policy's thresholds are a staircase fitted under where it crosses 1
(docs/policy.md).

    python bench/accept_breakeven.py
"""

from __future__ import annotations

import dataclasses

from specctl.runtime.sim.offline import run_point
from specctl.runtime.sim.presets import PRESETS

ACCEPT = (1.3, 1.5, 1.8, 2.0, 2.3, 2.8)
CONCURRENCY = (1, 16, 64, 256)


def ratio(preset_name: str, accept_len: float, c: int) -> float:
    preset = dataclasses.replace(PRESETS[preset_name], accept_len=accept_len)
    on = run_point(preset, c, "on", warmup_s=4, window_s=10).tok_s
    off = run_point(preset, c, "off", warmup_s=4, window_s=10).tok_s
    return on / off


def main() -> None:
    for name in ("h200-llama8b-fa3", "h200-llama8b"):
        print(f"{name}: tok/s with speculation on / off (4 s warm-up + 10 s window, simulated)")
        print("| accept length | " + " | ".join(f"c={c}" for c in CONCURRENCY) + " |")
        print("| ---: |" + " ---: |" * len(CONCURRENCY))
        for acc in ACCEPT:
            cells = " | ".join(f"{ratio(name, acc, c):.2f}" for c in CONCURRENCY)
            print(f"| {acc} | {cells} |")
        print()


if __name__ == "__main__":
    main()
