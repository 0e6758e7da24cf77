"""Does the policy's auto mode track the better of speculation on and off at every load?

Offline, in one process, on the simulator's performance model: for each
concurrency, a closed loop against the same preset with the policy forced on,
forced off, and in auto with the given settings; prints tokens/s and the ratio
auto / max(on, off). The goal is >= 0.95 everywhere.

    python bench/policy_envelope.py [--preset h200-llama8b-fa3 | --all-presets] [--set off_at=48 ...]
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from specctl.runtime.policy import SettingsError
from specctl.runtime.sim.offline import PointResult, Server, run_point
from specctl.runtime.sim.presets import DEFAULT_PRESET, PRESETS, Preset
from specctl.runtime.thresholds import for_backend

CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
GOAL = 0.95
Row = tuple[int, PointResult, PointResult, PointResult]  # c, on, off, auto
WARMUP_S = 10.0  # at least; a preset calibrated at steady state asks for longer (its warmup_s/window_s)
WINDOW_S = 30.0


def sweep(preset: Preset, settings: dict[str, Any], concurrencies: tuple[int, ...] = CONCURRENCIES,
          seed: int = 0) -> list[Row]:
    """(c, on, off, auto) per concurrency; the same seed for all three, so they see the same requests."""
    warmup_s, window_s = max(WARMUP_S, preset.warmup_s), max(WINDOW_S, preset.window_s)

    def point(c: int, server: Server) -> PointResult:
        return run_point(preset, c, server, settings=settings, seed=seed, warmup_s=warmup_s, window_s=window_s)

    return [(c, point(c, "on"), point(c, "off"), point(c, "auto")) for c in concurrencies]


def render(preset: Preset, settings: dict[str, Any], rows: list[Row]) -> str:
    """The table, and which points miss the goal."""
    lines = [f"preset {preset.name}; auto settings: {preset.default_settings().with_changes(settings).as_dict()}",
             f"closed loop, {max(WARMUP_S, preset.warmup_s):g} s warm-up + {max(WINDOW_S, preset.window_s):g} s "
             "window of simulated time per point",
             "| c | on tok/s | off tok/s | auto tok/s | auto / max(on, off) | auto on-share | switches |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    misses = []
    for c, on, off, auto in rows:
        ratio = auto.tok_s / max(on.tok_s, off.tok_s)
        if ratio < GOAL:
            misses.append(c)
        lines.append(f"| {c} | {on.tok_s:.1f} | {off.tok_s:.1f} | {auto.tok_s:.1f} | {ratio:.3f} | "
                     f"{auto.on_fraction:.2f} | {auto.switches} |")
    lines.append(f"goal >= {GOAL}: " + ("met at every point" if not misses else
                                         f"missed at c = {', '.join(map(str, misses))}"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    chosen = ap.add_mutually_exclusive_group()
    chosen.add_argument("--preset", choices=sorted(PRESETS), action="append",
                        help=f"preset (repeatable; default {DEFAULT_PRESET})")
    chosen.add_argument("--all-presets", action="store_true", help="one table per known preset")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="auto-mode policy setting")
    ap.add_argument("--no-backend-thresholds", action="store_true",
                    help="use the policy's defaults only, not the thresholds specctl picks for the preset's "
                         "attention backend (runtime/thresholds.py) as it does for a server it launches")
    ns = ap.parse_args(argv)
    settings: dict[str, Any] = {}
    for item in ns.set:
        key, _, value = item.partition("=")
        settings[key.strip()] = value.strip()
    started = time.monotonic()
    names = sorted(PRESETS) if ns.all_presets else ns.preset or [DEFAULT_PRESET]
    for name in names:
        preset = PRESETS[name]
        chosen_settings = dict(settings)
        if not ns.no_backend_thresholds:
            backend = for_backend(preset.attention_backend) or {}
            chosen_settings = {**{k: v for k, v in backend.items() if k not in settings}, **settings}
        try:
            preset.default_settings().with_changes(chosen_settings)
        except SettingsError as exc:
            ap.error(str(exc))
        print(render(preset, chosen_settings, sweep(preset, chosen_settings)))
        print()
    print(f"({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
