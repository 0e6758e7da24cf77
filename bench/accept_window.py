"""The acceptance window counted in requests against counted in verifies, side by side.

The policy's window is full at ``accept_window`` verifies, or sooner once its
verifies hold ``ACCEPT_REQUESTS_PER_SLOT`` x ``accept_window`` requests (never
under ``ACCEPT_MIN_VERIFIES``; runtime/core/policy.py). This runs auto on the
simulator's presets both ways in one process, the verify-counted rule being the
same policy with the request count out of reach, and prints auto's tok/s under
each, their ratio, and each against max(on, off):

- a start window (10 s warm-up, 30 s measured): auto starts on, so at a load where
  drafting does not pay it runs on until the window is full;
- a steady window (10 s + 900 s) at 64-256 requests, long enough for the probes
  that re-measure acceptance every ``probe_after`` off steps.

Modelled, not measured: the simulator does not model the cold first verify after
a resume, which the window now leaves out (tests/test_policy.py covers that rule).

    python bench/accept_window.py [--preset h200-qwen3moe ...] [--accept-lens 1.6,2.0,2.8]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time

from specctl.runtime.core import policy as policy_module
from specctl.runtime.sim.offline import run_point
from specctl.runtime.sim.preset_model import Preset
from specctl.runtime.sim.presets import PRESETS, get_preset
from specctl.runtime.sim.rows import supervised_settings

START = (10.0, 30.0, (1, 4, 16, 32, 64, 128, 192, 256))
STEADY = (10.0, 900.0, (64, 128, 192, 256))
DEFAULT_PRESETS = ("h200-llama8b", "h200-llama8b-fa3", "h200-llama8b-flashinfer", "h200-qwen3moe",
                   "h200-qwen3moe-fa3")
VERIFIES_ONLY = 10**12  # a request count no window reaches: full at accept_window verifies, as before


def auto_tok_s(preset: Preset, c: int, warmup_s: float, window_s: float, per_slot: int) -> float:
    """Auto's tok/s with the supervisor's settings for the preset and the window rule ``per_slot``."""
    saved = policy_module.ACCEPT_REQUESTS_PER_SLOT
    policy_module.ACCEPT_REQUESTS_PER_SLOT = per_slot
    try:
        settings = supervised_settings(preset, {})[0]
        return run_point(preset, c, "auto", settings=settings, warmup_s=warmup_s, window_s=window_s).tok_s
    finally:
        policy_module.ACCEPT_REQUESTS_PER_SLOT = saved


def table(preset: Preset, window: tuple[float, float, tuple[int, ...]], label: str) -> tuple[str, list[float]]:
    """One preset and window: a row per concurrency; the ratios requests / verifies."""
    warmup_s, window_s, concs = window
    lines = [f"{preset.name}, accept length {preset.accept_len:g}, {label} ({warmup_s:g} s + {window_s:g} s)",
             "| c | max(on, off) | auto, verifies | auto, requests | requests / verifies "
             "| verifies / best | requests / best |", "|" + " ---: |" * 7]
    ratios = []
    for c in concs:
        best = max(run_point(preset, c, mode, warmup_s=warmup_s, window_s=window_s).tok_s for mode in ("on", "off"))
        old = auto_tok_s(preset, c, warmup_s, window_s, VERIFIES_ONLY)
        new = auto_tok_s(preset, c, warmup_s, window_s, policy_module.ACCEPT_REQUESTS_PER_SLOT)
        ratios.append(new / old)
        lines.append(f"| {c} | {best:.0f} | {old:.0f} | {new:.0f} | {new / old:.3f} | {old / best:.3f} "
                     f"| {new / best:.3f} |")
    return "\n".join(lines), ratios


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", action="append", choices=sorted(PRESETS), help="repeatable; default: five H200 presets")
    ap.add_argument("--accept-lens", default="", help="run each preset at these accept lengths too, e.g. 1.6,2.0")
    ns = ap.parse_args(argv)
    try:
        extra = [float(a) for a in ns.accept_lens.split(",") if a]
    except ValueError:
        ap.error(f"--accept-lens takes numbers separated by commas, got {ns.accept_lens!r}")
    t0, every = time.perf_counter(), []
    for name in ns.preset or DEFAULT_PRESETS:
        base = get_preset(name)
        for accept_len in [base.accept_len, *extra]:
            preset = dataclasses.replace(base, accept_len=accept_len)
            for window, label in ((START, "start window"), (STEADY, "steady window")):
                text, ratios = table(preset, window, label)
                every += ratios
                print(text, end="\n\n", flush=True)
    print(f"requests / verifies over every point: min {min(every):.3f}, median {statistics.median(every):.3f}, "
          f"max {max(every):.3f} ({len(every)} points, {time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
