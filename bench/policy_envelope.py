"""Does the policy's auto mode track the better of speculation on and off at every load?

Offline, in one process, on the simulator's performance model: for each
concurrency, a closed loop against the same preset with the policy forced on,
forced off, and in auto with the given settings; prints tokens/s and the ratio
auto / max(on, off). The goal is >= 0.95 everywhere.

Presets are calibrated at one accept length (the GPU sweeps simulated 2.8);
--accept-lens runs the envelope again at others, since where speculation pays
depends on the acceptance as much as on the load (bench/accept_breakeven.py),
and ends with one auto / max(on, off) grid per preset.

    python bench/policy_envelope.py [--preset h200-llama8b-fa3 | --all-presets] [--set off_at=48 ...]
                                    [--accept-lens 1.5,2.0,2.8]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Any

from specctl.runtime.core.policy import SettingsError
from specctl.runtime.core.thresholds import for_backend, unset_groups
from specctl.runtime.sim.offline import PointResult, Server, run_point
from specctl.runtime.sim.presets import DEFAULT_PRESET, PRESETS, Preset

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
    chosen = preset.default_settings().with_changes(settings).as_dict()
    lines = [f"preset {preset.name}, accept length {preset.accept_len:g}; auto settings: {chosen}",
             f"closed loop, {max(WARMUP_S, preset.warmup_s):g} s warm-up + {max(WINDOW_S, preset.window_s):g} s "
             "window of simulated time per point",
             "| c | on tok/s | off tok/s | auto tok/s | auto / max(on, off) | auto on-share | switches |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    misses = []
    for c, on, off, auto in rows:
        ratio = envelope_ratio(on, off, auto)
        if ratio < GOAL:
            misses.append(c)
        lines.append(f"| {c} | {on.tok_s:.1f} | {off.tok_s:.1f} | {auto.tok_s:.1f} | {ratio:.3f} | "
                     f"{auto.on_fraction:.2f} | {auto.switches} |")
    lines.append(f"goal >= {GOAL}: " + ("met at every point" if not misses else
                                         f"missed at c = {', '.join(map(str, misses))}"))
    return "\n".join(lines)


def envelope_ratio(on: PointResult, off: PointResult, auto: PointResult) -> float:
    return auto.tok_s / max(on.tok_s, off.tok_s)


def render_grid(name: str, grid: dict[float, list[Row]]) -> str:
    """auto / max(on, off) by accept length (rows) and concurrency (columns); * marks a miss."""
    concurrencies = [c for c, *_ in next(iter(grid.values()))]
    lines = [f"{name}: auto / max(on, off) by accept length (* below {GOAL})",
             "| accept length | " + " | ".join(f"c={c}" for c in concurrencies) + " |",
             "| ---: |" + " ---: |" * len(concurrencies)]
    for accept_len, rows in grid.items():
        cells = [envelope_ratio(on, off, auto) for _, on, off, auto in rows]
        lines.append(f"| {accept_len:g} | " + " | ".join(f"{r:.2f}{'*' if r < GOAL else ''}" for r in cells) + " |")
    return "\n".join(lines)


def accept_lens(text: str) -> list[float]:
    """'1.5,2.0,2.8' -> [1.5, 2.0, 2.8]; argparse reports a ValueError as a usage error."""
    return [float(part) for part in text.split(",") if part.strip()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    chosen = ap.add_mutually_exclusive_group()
    chosen.add_argument("--preset", choices=sorted(PRESETS), action="append",
                        help=f"preset (repeatable; default {DEFAULT_PRESET})")
    chosen.add_argument("--all-presets", action="store_true", help="one table per known preset")
    ap.add_argument("--set", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                    help="auto-mode policy setting")
    ap.add_argument("--accept-lens", type=accept_lens, metavar="A,B,...",
                    help="run each preset at these accept lengths (bonus token included) instead of its own")
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
    grids: dict[str, dict[float, list[Row]]] = {}
    for name in names:
        preset = PRESETS[name]
        chosen_settings = dict(settings)
        if not ns.no_backend_thresholds:
            backend = for_backend(preset.attention_backend) or {}
            chosen_settings = {**unset_groups(backend, settings), **settings}  # as the supervisor does
        try:
            preset.default_settings().with_changes(chosen_settings)
        except SettingsError as exc:
            ap.error(str(exc))
        for accept_len in ns.accept_lens or [preset.accept_len]:
            try:
                variant = dataclasses.replace(preset, accept_len=accept_len)
                rows = sweep(variant, chosen_settings)
            except ValueError as exc:  # an accept length the preset's draft steps cannot reach
                ap.error(str(exc))
            grids.setdefault(name, {})[accept_len] = rows
            print(render(variant, chosen_settings, rows))
            print()
    if ns.accept_lens:
        for name, grid in grids.items():
            print(render_grid(name, grid))
            print()
    print(f"({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
