"""Calibrated auto beside forced on, forced off and default auto, per preset and load level, in one process.

Each preset runs one schedule of load levels (closed-loop clients, one engine across the schedule, so
calibration carries what it learned from level to level) four times: forced on, forced off, auto with
the policy's defaults (what a server with no thresholds row runs), and auto with the calibration loop
(runtime/sim/calibrated.py: the real Calibrator polled every 0.5 simulated seconds, as the supervisor
polls). Each level runs LEVEL_S simulated seconds and is counted over its last WINDOW_S. The presets are
ones no measured row covers: the report's RTX PRO 6000 system at topk 1, the MoE on FlashInfer (an
uncalibrated variant: h200-qwen3moe's costs with FlashInfer's verify term, accept length 2.4), and
h200-llama8b-flashinfer on a GPU name no row knows. With --rows, the presets a measured row covers
instead (dense Llama-8B shapes on Triton, FA3 and FlashInfer, the MoE on Triton): every server starts
from the row the supervisor would apply, "auto" is the row alone, and calibration must do no worse.

    python bench/calibrate.py [--preset rtx-topk1 ...] [--rows] [--level-s 60] [--window-s 30]
                              [--step-noise 0.3] [--seed N | --seeds K] [--csv FILE]

--seeds K runs seeds 0..K-1 and prints, per preset and seed, the worst first visit and the worst later
visit of calibrated auto / best and the steps in probes: how much a figure owes to one seed.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections.abc import Callable

from specctl.runtime.sim.calibrated import Level, Run, moe_flashinfer, run_schedule, unknown_gpu
from specctl.runtime.sim.preset_model import Preset
from specctl.runtime.sim.presets import get_preset
from specctl.runtime.sim.rows import supervised_settings

STEP_LOAD = (4, 192, 4, 192, 4, 192)
PRESETS: dict[str, tuple[Callable[[], Preset], tuple[int, ...]]] = {
    "rtx-topk1": (lambda: get_preset("rtx-8gpu-report-topk1"), STEP_LOAD),
    "moe-flashinfer": (moe_flashinfer, (1, 4, 16, 64, 192, 4, 192, 4, 192)),
    "unknown-gpu": (unknown_gpu, (1, 4, 16, 64, 192, 4, 192)),
}
ROW_LOAD = (1, 4, 16, 64, 192, 4, 192)
ROW_PRESETS = ("h200-llama8b", "h200-llama8b-fa3", "h200-llama8b-flashinfer", "h200-qwen3moe")
SERVERS = ("on", "off", "auto", "calibrated")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", action="append", choices=sorted(PRESETS), help="default: all")
    ap.add_argument("--rows", action="store_true", help="the presets a measured row covers, from that row")
    ap.add_argument("--level-s", type=float, default=60.0)
    ap.add_argument("--window-s", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--step-noise", type=float, default=0.0,
                    help="scatter of step times (lognormal sigma; a GPU's meter reads 0.05-0.3)")
    ap.add_argument("--seeds", type=int, default=0, help="a summary over seeds 0..K-1 instead of the tables")
    ap.add_argument("--csv", help="also write the rows here")
    args = ap.parse_args(argv)
    if not 0 < args.window_s <= args.level_s:
        print("bench/calibrate.py: --window-s must be above 0 and at most --level-s", file=sys.stderr)
        return 2
    if args.seeds < 0:
        print("bench/calibrate.py: --seeds must be 0 or more", file=sys.stderr)
        return 2
    rows = []
    t0 = time.monotonic()
    chosen = [(n, *PRESETS[n]) for n in args.preset or list(PRESETS)] if not args.rows else \
        [(n, (lambda n=n: get_preset(n)), ROW_LOAD) for n in ROW_PRESETS]
    auto = "row auto" if args.rows else "default auto"
    if args.seeds:
        return _seeds(args, chosen, t0)
    for name, build, levels in chosen:
        runs = _runs(args, build, levels, args.seed, SERVERS)
        cal = runs["calibrated"]
        print(f"\n{name}: {args.level_s:g} s a level, tok/s over its last {args.window_s:g} s; probes "
              f"{cal.probe_steps} of {cal.steps} steps ({100 * cal.probe_share:.2f} %), "
              f"{len(cal.publishes)} publishes")
        print(f"| level | c | forced on | forced off | {auto} | calibrated auto | {auto} / best | "
              f"calibrated / best | calibrated / {auto} |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for i, c in enumerate(levels):
            on, off, plain, calib = (runs[s].levels[i].tok_s for s in SERVERS)
            best = max(on, off)
            print(f"| {i + 1} | {c} | {on:.0f} | {off:.0f} | {plain:.0f} | {calib:.0f} | {plain / best:.3f} | "
                  f"{calib / best:.3f} | {calib / plain:.3f} |")
            rows.append({"preset": name, "level": i + 1, "concurrency": c, "on": round(on, 1), "off": round(off, 1),
                         "auto": round(plain, 1), "calibrated": round(calib, 1),
                         "auto_over_best": round(plain / best, 4), "calibrated_over_best": round(calib / best, 4),
                         "calibrated_over_auto": round(calib / plain, 4), "probe_share": round(cal.probe_share, 5)})
        print(f"learned: {cal.settings['off_at']=} {cal.settings['on_at']=} {cal.settings['min_accept']=} "
              f"{cal.settings['accept_slope']=}".replace("cal.settings[", "").replace("]", ""))
    if args.csv and rows:
        with open(args.csv, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    print(f"\n({time.monotonic() - t0:.1f} s)")
    return 0


def _runs(args: argparse.Namespace, build: Callable[[], Preset], levels: tuple[int, ...], seed: int,
          servers: tuple[str, ...]) -> dict[str, Run]:
    """One schedule of ``levels`` per server, every server from the row where --rows asks for it."""
    schedule = [Level(c, args.level_s, args.level_s - args.window_s) for c in levels]
    start = supervised_settings(build(), {})[0] if args.rows else None
    return {s: run_schedule(build(), schedule, s, seed=seed, step_noise=args.step_noise,  # type: ignore[arg-type]
                            settings=start) for s in servers}


def _seeds(args: argparse.Namespace, chosen: list[tuple[str, Callable[[], Preset], tuple[int, ...]]],
           t0: float) -> int:
    print(f"calibrated auto / best, {args.level_s:g} s a level, tok/s over its last {args.window_s:g} s, "
          f"step noise {args.step_noise:g}")
    print("| preset | seed | worst first visit | worst later visit | steps in probes |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, build, levels in chosen:
        for seed in range(args.seeds):
            runs = _runs(args, build, levels, seed, ("on", "off", "calibrated"))
            seen: set[int] = set()
            first, later = [], []
            for i, c in enumerate(levels):
                best = max(runs["on"].levels[i].tok_s, runs["off"].levels[i].tok_s)
                (later if c in seen else first).append(runs["calibrated"].levels[i].tok_s / best)
                seen.add(c)
            print(f"| {name} | {seed} | {min(first):.3f} | {min(later):.3f} | "
                  f"{100 * runs['calibrated'].probe_share:.2f} % |")
    print(f"\n({time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
