"""``python -m specctl.runtime.sim.calibrate``: how close each preset lands on its measurements.

Runs every measured point of a preset through the same closed loop the
measurement used (see offline.py) and prints simulated against measured
tokens/s. ``--fit`` searches the named cost parameters (coordinate descent on
the squared log error) and prints them, for re-calibrating a preset when new
measurements arrive; the preset file is then edited by hand, with the why.
A preset's ``checks`` (other runs it was not fitted to) are printed below its
table and never enter the fit.

A preset with no measurement (a prediction written before its GPU run, as
``h200-qwen3moe`` was until its first sitting) prints what the GPU sweep would
measure instead: no speculation and static EAGLE-3 (specctl forced on) at the
sweep's concurrencies, their ratio, and where they cross. ``--predict`` prints
that table for any preset.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Iterable

from specctl.runtime.sim.offline import Server, run_point
from specctl.runtime.sim.presets import PRESETS, Preset

SERIES_SERVER: dict[str, Server] = {"nospec": "nospec", "eagle3": "on"}
FIT_FACTORS = (1.4, 1 / 1.4, 1.1, 1 / 1.1, 1.03, 1 / 1.03)


Measured = dict[str, dict[int, float]]
Row = tuple[str, int, float, float]  # series, concurrency, measured, simulated


def points(preset: Preset, measured: Measured | None = None) -> list[Row]:
    """(series, concurrency, measured, simulated) for every point of ``measured`` (default: the fitted ones)."""
    rows = []
    for series, values in (preset.measured if measured is None else measured).items():
        for concurrency, value in values.items():
            result = run_point(preset, concurrency, SERIES_SERVER[series], warmup_s=preset.warmup_s,
                               window_s=preset.window_s)
            rows.append((series, concurrency, value, result.tok_s))
    return rows


def worst(rows: list[Row]) -> float:
    """The largest relative miss, the figure a preset's ``tolerance`` bounds."""
    return max(abs(sim / meas - 1) for _, _, meas, sim in rows)


def render(rows: list[Row]) -> list[str]:
    """Markdown rows of simulated against measured."""
    lines = ["| series | concurrency | measured tok/s | simulated tok/s | sim / measured |",
             "| --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {series} | {c} | {meas:.1f} | {sim:.1f} | {sim / meas:.3f} |" for series, c, meas, sim in rows]
    return lines


PREDICT_CONCURRENCY = (1, 4, 16, 32, 64, 128, 256)  # the GPU sweep's (bench/gpu/run_fast_off.sh)


def predicted(preset: Preset, concurrencies: Iterable[int] = PREDICT_CONCURRENCY) -> list[tuple[int, float, float]]:
    """(concurrency, no speculation tok/s, static tok/s) in the preset's own windows."""
    def tok_s(c: int, server: Server) -> float:
        return run_point(preset, c, server, warmup_s=preset.warmup_s, window_s=preset.window_s).tok_s

    return [(c, tok_s(c, "nospec"), tok_s(c, "on")) for c in concurrencies]


def crossover(preset: Preset, rows: list[tuple[int, float, float]]) -> int | None:
    """The first concurrency at which static falls under no speculation (bisected between the rows).

    None when static stays ahead at every row; the first row's concurrency when it never leads.
    """
    ahead = [static >= none for _, none, static in rows]
    if all(ahead):
        return None
    first = ahead.index(False)
    if first == 0:
        return rows[0][0]
    lo, hi = rows[first - 1][0], rows[first][0]  # static ahead at lo, behind at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        (_, none, static), = predicted(preset, (mid,))
        lo, hi = (mid, hi) if static >= none else (lo, mid)
    return hi


def prediction(preset: Preset) -> str:
    """What a none / static sweep would measure, as the simulator predicts it."""
    rows = predicted(preset)
    cross = crossover(preset, rows)
    state = "calibrated" if preset.calibrated else "UNCALIBRATED (no GPU measurement): a prediction"
    lines = [f"preset {preset.name}: {preset.description}",
             f"{state}; closed loop, {preset.warmup_s:g} s warm-up + {preset.window_s:g} s window (simulated), "
             f"accept length {preset.accept_len:g}",
             "| c | " + " | ".join(str(c) for c, _, _ in rows) + " |",
             "| --- |" + " ---: |" * len(rows),
             "| no spec tok/s | " + " | ".join(f"{none:.1f}" for _, none, _ in rows) + " |",
             "| static tok/s | " + " | ".join(f"{static:.1f}" for _, _, static in rows) + " |",
             "| static / none | " + " | ".join(f"{static / none:.2f}" for _, none, static in rows) + " |",
             ("static ahead at every concurrency" if cross is None else
              f"static falls under no speculation from c = {cross}")]
    return "\n".join(lines)


def table(preset: Preset) -> str:
    """The fitted points with the worst error, then each check (data the preset was not fitted to).

    A preset without measurements has nothing to compare: its prediction instead.
    """
    if not preset.calibrated:
        return prediction(preset)
    rows = points(preset)
    lines = [f"preset {preset.name}: {preset.description}",
             f"closed loop, {preset.warmup_s:g} s warm-up + {preset.window_s:g} s window (simulated)",
             *render(rows),
             f"worst point: {worst(rows) * 100:.1f} % off (tolerance {preset.tolerance * 100:g} %)"]
    for check in preset.checks:
        rows = points(preset, check.measured)
        lines += ["", f"check (not fitted): {check.label}, {check.source}", *render(rows),
                  f"worst point: {worst(rows) * 100:.1f} % off"]
    return "\n".join(lines)


def loss(preset: Preset) -> float:
    """Sum of squared log errors: a 10 % miss costs the same above as below."""
    return sum(math.log(sim / meas) ** 2 for _, _, meas, sim in points(preset))


def fit(preset: Preset, keys: Iterable[str], rounds: int = 6) -> Preset:
    """Coordinate descent over ``keys`` of the preset's PerfParams, multiplicative steps."""
    keys = list(keys)
    known = {f.name for f in dataclasses.fields(preset.params)}
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise ValueError(f"unknown parameter {unknown[0]!r} (known: {', '.join(sorted(known))})")
    best, best_loss = preset, loss(preset)
    for _ in range(rounds):
        for key in keys:
            for factor in FIT_FACTORS:
                params = dataclasses.replace(best.params, **{key: getattr(best.params, key) * factor})
                candidate = dataclasses.replace(best, params=params)
                candidate_loss = loss(candidate)
                if candidate_loss < best_loss:
                    best, best_loss = candidate, candidate_loss
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specctl.runtime.sim.calibrate", description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), action="append",
                    help="preset to check (repeatable; default: all)")
    ap.add_argument("--fit", metavar="KEY,KEY", help="fit these PerfParams fields and print them")
    ap.add_argument("--predict", action="store_true",
                    help="print no speculation and static EAGLE-3 at c = 1-256 and where they cross, not the fit")
    ns = ap.parse_args(argv)
    if ns.fit and ns.predict:
        ap.error("--fit and --predict do not go together")
    for name in ns.preset or sorted(PRESETS):
        preset = PRESETS[name]
        if ns.predict:
            print(prediction(preset))
            print()
            continue
        if ns.fit and not preset.calibrated:
            ap.error(f"preset {name} has no measurements to fit to")
        if ns.fit:
            preset = fit(preset, ns.fit.split(","))
            for key in ns.fit.split(","):
                print(f"{key}={getattr(preset.params, key):.4g}")
        print(table(preset))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
