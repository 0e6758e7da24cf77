"""``python -m specctl.runtime.sim.calibrate``: how close each preset lands on its measurements.

Runs every measured point of a preset through the same closed loop the
measurement used (see offline.py) and prints simulated against measured
tokens/s. ``--fit`` searches the named cost parameters (coordinate descent on
the squared log error) and prints them, for re-calibrating a preset when new
measurements arrive; the preset file is then edited by hand, with the why.
A preset's ``checks`` (other runs it was not fitted to) are printed below its
table and never enter the fit.

A preset with no measurement (a prediction written before its GPU run, as
``h200-qwen3moe`` was before its first GPU run) prints what the GPU sweep would
measure instead: no speculation and static EAGLE-3 (specctl forced on) at the
sweep's concurrencies, their ratio, and where they cross. ``--predict`` prints
that table for any preset.

``--depth-csv FILE`` checks a preset against a GPU sweep of static depths
(bench/gpu/run_fast_off.sh ``depthsweep``/``depthauto``, interleave.py's CSV):
each window's mode ``dN`` runs forced on at depth N, ``off`` forced off and
``-`` (a no-spec server's CSV) without speculation, under SGLang's simulated
acceptance (``--acc-len``, SGLANG_SIMULATE_ACC_LEN with match-expected: each
verify accepts ACC_LEN - 1 drafts clamped to the depth), as
bench/policy_envelope.py ``--sglang-law`` runs them. Like a check, it is never
fitted to. The CSV is read, not pasted into presets.py: it is the record, and
a sweep re-run is checked without editing a preset.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
from collections.abc import Iterable
from typing import Any

from specctl.runtime.sim.depth import match_expected_law
from specctl.runtime.sim.offline import Server, run_point, static_settings
from specctl.runtime.sim.preset_model import Preset
from specctl.runtime.sim.presets import PRESETS
from specctl.runtime.sim.sweep_csv import DepthCsvError, Measured, read_windows

SERIES_SERVER: dict[str, Server] = {"nospec": "nospec", "eagle3": "on"}
FIT_FACTORS = (1.4, 1 / 1.4, 1.1, 1 / 1.1, 1.03, 1 / 1.03)


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


def prediction_rows(preset: Preset, decimals: int = 1) -> list[str]:
    """No speculation and static at the sweep's concurrencies, their ratio, and where they cross.

    One table for every caller (``prediction`` here, bench/moe_routing.py), so that they read alike.
    """
    rows = predicted(preset)
    cross = crossover(preset, rows)
    return ["| c | " + " | ".join(str(c) for c, _, _ in rows) + " |",
            "| --- |" + " ---: |" * len(rows),
            "| no spec tok/s | " + " | ".join(f"{none:.{decimals}f}" for _, none, _ in rows) + " |",
            "| static tok/s | " + " | ".join(f"{static:.{decimals}f}" for _, _, static in rows) + " |",
            "| static / none | " + " | ".join(f"{static / none:.2f}" for _, none, static in rows) + " |",
            ("static ahead at every concurrency" if cross is None else
             f"static falls under no speculation from c = {cross}")]


def prediction(preset: Preset) -> str:
    """What a none / static sweep would measure, as the simulator predicts it."""
    state = "calibrated" if preset.calibrated else "UNCALIBRATED (no GPU measurement): a prediction"
    lines = [f"preset {preset.name}: {preset.description}",
             f"{state}; closed loop, {preset.warmup_s:g} s warm-up + {preset.window_s:g} s window (simulated), "
             f"accept length {preset.accept_len:g}",
             *prediction_rows(preset)]
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


NOISY_FROM = 48  # from here one short window of a state reads up to 15-20 % apart on two servers


def depth_run(series: str, depths: Iterable[int], steps: int) -> tuple[Server, dict[str, Any] | None]:
    """How a window of ``series`` runs: the server kind and its policy settings.

    A server built with ``depths`` as candidates, pinned the way the GPU's
    depth_switch pins it: dN forced on at N (no acceptance floor), off forced
    off at the server's ``steps``; nospec a server without speculation.
    """
    depths = tuple(depths)
    if series == "nospec":
        return "nospec", None
    if series == "off":
        return "off", {**static_settings(steps, depths), "mode": "off"}
    return "on", static_settings(int(series[1:]), depths)


def depth_points(preset: Preset, measured: Measured, acc_len: float) -> list[Row]:
    """(series, concurrency, measured, simulated) for windows of static depths under SGLang's simulated acceptance."""
    law = match_expected_law(acc_len)
    variant = dataclasses.replace(preset, accept_len=acc_len)
    depths = sorted({0, preset.steps} | {int(s[1:]) for s in measured if s.startswith("d")})
    rows = []
    for series, values in measured.items():
        server, settings = depth_run(series, depths, preset.steps)
        for c, value in values.items():
            result = run_point(variant, c, server, settings=settings, warmup_s=preset.warmup_s,
                               window_s=preset.window_s, accept_law=law)
            rows.append((series, c, value, result.tok_s))
    return rows


def depth_summary(rows: list[Row]) -> list[str]:
    """Mean sim / measured per series (alone, and over off at the same c), worst misses, the best state by c.

    Windows of one server start share what the load and the machine did then; the
    ratio over off at the same concurrency removes that, leaving what the depth
    model itself gets wrong. From NOISY_FROM up the windows scatter too much to
    judge a preset by, so their worst miss is given apart.
    """
    steady = [r for r in rows if r[1] < NOISY_FROM]
    noisy = [r for r in rows if r[1] >= NOISY_FROM]
    lines = []
    ratios: dict[str, list[float]] = {}
    for series, _, meas, sim in steady:
        ratios.setdefault(series, []).append(sim / meas)
    if ratios:
        lines.append(f"mean sim / measured at c < {NOISY_FROM}: " +
                     ", ".join(f"{s} {statistics.fmean(v):.3f}" for s, v in ratios.items()))
    off = {c: sim / meas for series, c, meas, sim in steady if series == "off"}
    over_off: dict[str, list[float]] = {}
    for series, c, meas, sim in steady:
        if series.startswith("d") and c in off:
            over_off.setdefault(series, []).append(sim / meas / off[c])
    if over_off:
        lines.append(f"sim / measured over off's at the same c (what a sitting shares removed), c < {NOISY_FROM}: "
                     + ", ".join(f"{s} {statistics.fmean(v):.3f} ({min(v):.2f}-{max(v):.2f})"
                               for s, v in over_off.items()))
    for name, part, note in ((f"c < {NOISY_FROM}", steady, ""),
                             (f"c >= {NOISY_FROM}", noisy, " (noisy: one short window a state; the same state "
                                                           "read up to 15-20 % apart on two servers)")):
        if part:
            series, c, meas, sim = max(part, key=lambda r: abs(r[3] / r[2] - 1))
            lines.append(f"worst point at {name}: {abs(sim / meas - 1) * 100:.1f} % off ({series} at c={c}){note}")
    best = []
    for c in sorted({r[1] for r in rows}):
        at = [r for r in rows if r[1] == c]
        if len(at) > 1:
            measured_best, sim_best = max(at, key=lambda r: r[2]), max(at, key=lambda r: r[3])
            best.append(f"c={c} {measured_best[0]} / {sim_best[0]}{'' if measured_best[0] == sim_best[0] else ' *'}")
    if best:
        lines.append("best by c, measured / simulated (* where they differ): " + ", ".join(best))
    return lines


def depth_check(preset: Preset, path: str, acc_len: float | None = None) -> str:
    """A sweep CSV's static-depth windows against the preset: one table per label in the file."""
    acc = preset.accept_len if acc_len is None else acc_len
    law = match_expected_law(acc)
    lines: list[str] = []
    for label, measured in read_windows(path).items():
        depths = sorted(int(s[1:]) for s in measured if s.startswith("d"))
        lens = ", ".join(f"{law.accept_len(d):.2f} at d{d}" for d in depths)
        rows = depth_points(preset, measured, acc)
        lines += ["", f"depth check (not fitted): {label or '(no label)'}, {path}",
                  f"SGLang's simulated acceptance {acc:g} (match-expected{': ' + lens if lens else ''}); "
                  f"closed loop, {preset.warmup_s:g} s warm-up + {preset.window_s:g} s window (simulated)",
                  *render(rows), *depth_summary(rows)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specctl.runtime.sim.calibrate", description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), action="append",
                    help="preset to check (repeatable; default: all)")
    ap.add_argument("--fit", metavar="KEY,KEY", help="fit these PerfParams fields and print them")
    ap.add_argument("--predict", action="store_true",
                    help="print no speculation and static EAGLE-3 at c = 1-256 and where they cross, not the fit")
    ap.add_argument("--depth-csv", metavar="FILE", action="append",
                    help="also check the preset against a GPU sweep's static-depth windows (modes dN, off, -) "
                         "run under SGLang's simulated acceptance (repeatable; one --preset)")
    ap.add_argument("--acc-len", type=float, metavar="A",
                    help="with --depth-csv: the sweep's SGLANG_SIMULATE_ACC_LEN (default: the preset's accept length)")
    ns = ap.parse_args(argv)
    if ns.fit and ns.predict:
        ap.error("--fit and --predict do not go together")
    if ns.depth_csv and (ns.predict or len(ns.preset or []) != 1):
        ap.error("--depth-csv needs one --preset (the server the sweep measured) and no --predict")
    if ns.acc_len is not None and not ns.depth_csv:
        ap.error("--acc-len goes with --depth-csv")
    checks = ns.depth_csv or []
    try:  # every file readable, and the accept length usable, before any simulation runs
        for path in checks:
            read_windows(path)
        if checks:
            match_expected_law(PRESETS[ns.preset[0]].accept_len if ns.acc_len is None else ns.acc_len)
    except (DepthCsvError, ValueError) as exc:  # one line, no traceback: the user's file or number
        option = "--depth-csv" if isinstance(exc, DepthCsvError) else "--acc-len"
        print(f"calibrate: {option}: {exc}", file=sys.stderr)
        return 2
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
        for path in checks:
            print(depth_check(preset, path, ns.acc_len))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
