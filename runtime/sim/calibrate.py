"""``python -m specctl.runtime.sim.calibrate``: how close each preset lands on its measurements.

Runs every measured point of a preset through the same closed loop the
measurement used (see offline.py) and prints simulated against measured
tokens/s. ``--fit`` searches the named cost parameters (coordinate descent on
the squared log error) and prints them, for re-calibrating a preset when new
measurements arrive; the preset file is then edited by hand, with the why.
A preset's ``checks`` (other runs it was not fitted to) are printed below its
table and never enter the fit.
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


def table(preset: Preset) -> str:
    """The fitted points with the worst error, then each check (data the preset was not fitted to)."""
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
    ns = ap.parse_args(argv)
    for name in ns.preset or sorted(PRESETS):
        preset = PRESETS[name]
        if ns.fit:
            preset = fit(preset, ns.fit.split(","))
            for key in ns.fit.split(","):
                print(f"{key}={getattr(preset.params, key):.4g}")
        print(table(preset))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
