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

--depths 0,1,2,3 instead compares auto choosing among those depths (the
``candidates`` setting, with the preset's cost table) with no speculation and
each static depth, at c = 1, 4, 8, 16, 24, 32, 48, 64, 128, 256 (goal: auto >=
0.97 x the best static; >= 1.05 x the best of none and the deepest where a
middle depth wins), then on a trace whose concurrency changes every 10-20 s
(whole-trace tok/s and p50 TPOT against each static configuration; --trace-s S
runs its first S seconds, as bench/gpu/run_fast_off.sh's depthtrace does).
--decline D makes each draft position's acceptance D below the one before
(a non-geometric law; the preset's accept length still holds at its steps);
--sglang-law uses SGLang's simulated acceptance instead (the same accepted
drafts at every depth: what the GPU's depthsweep sees, so what predicts it);
without --depths it does the same for on / off / auto (a GPU sweep's
SGLANG_SIMULATE_ACC_LEN accepts floor(a) - 1 or floor(a) drafts a verify, never 0 or 3).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from specctl.runtime.core.policy import SpecPolicy
from specctl.runtime.core.settings import SettingsError
from specctl.runtime.sim.depth import AcceptLaw, law_for, match_expected_law, policy_costs
from specctl.runtime.sim.offline import PointResult, Server, run_point, static_settings
from specctl.runtime.sim.preset_model import Preset
from specctl.runtime.sim.presets import DEFAULT_PRESET, PRESETS
from specctl.runtime.sim.rows import supervised_settings

sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu"))
from trace_schedule import TRACE_LEVELS, TRACE_S, ceiling, phase_seconds, trace_levels  # shared with gpu/trace_load.py

CONCURRENCIES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
GOAL = 0.95
Row = tuple[int, PointResult, PointResult, PointResult]  # c, on, off, auto
WARMUP_S = 10.0  # at least; a preset calibrated at steady state asks for longer (its warmup_s/window_s)
WINDOW_S = 30.0


def sweep(preset: Preset, settings: dict[str, Any], concurrencies: tuple[int, ...] = CONCURRENCIES,
          seed: int = 0, law: AcceptLaw | None = None) -> list[Row]:
    """(c, on, off, auto) per concurrency; the same seed for all three, so they see the same requests.

    ``law``: acceptance per draft position (None: the preset's geometric law).
    """
    warmup_s, window_s = max(WARMUP_S, preset.warmup_s), max(WINDOW_S, preset.window_s)

    def point(c: int, server: Server) -> PointResult:
        return run_point(preset, c, server, settings=settings, seed=seed, warmup_s=warmup_s, window_s=window_s,
                         accept_law=law)

    return [(c, point(c, "on"), point(c, "off"), point(c, "auto")) for c in concurrencies]


def render(preset: Preset, settings: dict[str, Any], rows: list[Row], sglang_law: bool = False) -> str:
    """The table, and which points miss the goal."""
    chosen = preset.default_settings().with_changes(settings).as_dict()
    law = " (SGLang's simulated acceptance)" if sglang_law else ""
    lines = [f"preset {preset.name}, accept length {preset.accept_len:g}{law}; auto settings: {chosen}",
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


DEPTH_CONCURRENCIES = (1, 4, 8, 16, 24, 32, 48, 64, 128, 256)
DEPTH_GOAL = 0.97
MIDDLE_GOAL = 1.05


def sweep_depths(preset: Preset, settings: dict[str, Any], depths: tuple[int, ...],
                 law: AcceptLaw | None, concurrencies: tuple[int, ...] = DEPTH_CONCURRENCIES,
                 seed: int = 0) -> list[tuple[int, dict[str, PointResult]]]:
    """Per concurrency: 'none', each positive depth forced on, and 'auto' over ``depths``."""
    warmup_s, window_s = max(WARMUP_S, preset.warmup_s), max(WINDOW_S, preset.window_s)
    auto = {**settings, "candidates": ",".join(map(str, depths)), "steps": max(depths)}
    rows = []
    for c in concurrencies:
        def point(server: Server, chosen: dict[str, Any] | None = None, c: int = c) -> PointResult:
            return run_point(preset, c, server, settings=chosen, seed=seed, warmup_s=warmup_s,
                             window_s=window_s, accept_law=law)
        row = {"none": point("nospec")}
        for d in depths:
            if d:
                row[str(d)] = point("on", static_settings(d, depths))
        row["auto"] = point("auto", auto)
        rows.append((c, row))
    return rows


def render_depths(preset: Preset, depths: tuple[int, ...], rows: list[tuple[int, dict[str, PointResult]]],
                  law: AcceptLaw) -> str:
    """One line per concurrency: each static configuration, auto, and the two ratios."""
    statics = ["none", *[str(d) for d in depths if d]]
    deepest = str(max(depths))
    lens = ", ".join(f"{law.accept_len(d):.2f} at {d}" for d in depths if d)
    lines = [f"preset {preset.name} (SIMULATED, not measured); accept length {lens}",
             "| c | " + " | ".join(f"{k} tok/s" for k in statics) + " | auto tok/s | best static | "
             f"auto / best | auto / max(none, {deepest}) |",
             "| ---: |" + " ---: |" * (len(statics) + 1) + " :---: | ---: | ---: |"]
    misses, middles = [], []
    for c, row in rows:
        best = max(statics, key=lambda k: row[k].tok_s)
        ratio = row["auto"].tok_s / row[best].tok_s
        binary = row["auto"].tok_s / max(row["none"].tok_s, row[deepest].tok_s)
        if ratio < DEPTH_GOAL:
            misses.append(c)
        if best not in ("none", deepest):
            middles.append((c, best, binary))
        cells = " | ".join(f"{row[k].tok_s:.0f}" for k in statics)
        miss = "*" if ratio < DEPTH_GOAL else ""
        lines.append(f"| {c} | {cells} | {row['auto'].tok_s:.0f} | {best} | {ratio:.3f}{miss} | {binary:.3f} |")
    lines.append(f"goal auto >= {DEPTH_GOAL} x best static: " +
                 ("met at every point" if not misses else f"missed at c = {', '.join(map(str, misses))}"))
    if middles:
        lines.append("a middle depth wins at " + ", ".join(
            f"c={c} (depth {d}, auto / binary {b:.3f}{' < ' + str(MIDDLE_GOAL) if b < MIDDLE_GOAL else ''})"
            for c, d, b in middles))
    else:
        lines.append("no middle depth wins at any concurrency: the best static is none or the deepest everywhere")
    return "\n".join(lines)


def run_trace(preset: Preset, server: Server, settings: dict[str, Any] | None, law: AcceptLaw | None,
              seed: int = 0, trace_s: float = TRACE_S) -> tuple[float, float, int]:
    """(output tok/s over the trace, p50 TPOT in ms, switches) of one configuration."""
    policy = None
    if server != "nospec":
        chosen = preset.default_settings().with_changes(settings or {})
        policy = SpecPolicy(chosen, policy_costs(preset.params, preset.workload, chosen.candidates))
    engine = preset.engine(policy, seed=seed)
    engine.accept_law = law
    phases = trace_levels(seed, trace_s)
    target = phases[0][1]
    tpots: list[float] = []

    def finished(req: Any) -> None:
        tpots.append((req.finished_at - req.arrived) / max(req.done, 1))
        if engine.in_flight("load") < target:
            engine.submit_random()

    engine.on_finish = finished
    for _ in range(target):
        engine.submit_random()
    for until, level in phases:
        target = level
        while engine.in_flight("load") < target:
            engine.submit_random()
        while engine.now < until:
            engine.step()
    tok_s = engine.decode_tokens_total / engine.now
    switches = policy.state()["switches"] if policy is not None else 0
    return tok_s, statistics.median(tpots) * 1e3, switches


def ceiling_line(rows: list[tuple[int, dict[str, PointResult]]], depths: tuple[int, ...], trace_s: float) -> str:
    """The trace's ceiling from the sweep's steady points: every phase at its best static (one-state-per-load bound)."""
    spent = phase_seconds(0, trace_s)
    by_c = dict(rows)
    missing = sorted(set(spent) - set(by_c))
    if missing:
        return f"ceiling: the sweep has no point at c = {', '.join(map(str, missing))}, which the trace visits"
    statics = ["none", *[str(d) for d in depths if d]]
    rates = {k: {c: by_c[c][k].tok_s for c in spent} for k in statics}
    best, top, binary = ceiling(spent, rates, ("none", str(max(depths))))
    return (f"ceiling (every phase at the sweep's best static for its load, switches free): "
            f"{top:.3f} x the best single static ({best}); none or {max(depths)} only: {binary:.3f}")


def render_trace(preset: Preset, settings: dict[str, Any], depths: tuple[int, ...], law: AcceptLaw | None,
                 trace_s: float = TRACE_S, rows: list[tuple[int, dict[str, PointResult]]] | None = None) -> str:
    configs: list[tuple[str, Server, dict[str, Any] | None]] = [("none", "nospec", None)]
    configs += [(f"static {d}", "on", static_settings(d, depths)) for d in depths if d]
    configs.append((f"auto on/off (0, {max(depths)})", "auto", {**settings, "steps": max(depths)}))
    configs.append(("auto", "auto", {**settings, "candidates": ",".join(map(str, depths)), "steps": max(depths)}))
    results = {name: run_trace(preset, server, chosen, law, trace_s=trace_s) for name, server, chosen in configs}
    best = max((n for n in results if not n.startswith("auto")), key=lambda n: results[n][0])
    auto = results["auto"]
    lines = [f"trace: concurrency changes every 10-20 s across {', '.join(map(str, TRACE_LEVELS))} for "
             f"{trace_s:g} s (SIMULATED)",
             "(TPOT here: a request's latency over its output tokens, queueing and prefill included)",
             "| configuration | output tok/s | p50 TPOT ms | switches |", "| --- | ---: | ---: | ---: |"]
    lines += [f"| {n} | {r[0]:.0f} | {r[1]:.2f} | {r[2]} |" for n, r in results.items()]
    lines.append(f"auto / best single static ({best}): tok/s {auto[0] / results[best][0]:.3f} "
                 f"(goal >= {MIDDLE_GOAL}), p50 TPOT {auto[1] / results[best][1]:.3f} (goal <= 1)")
    if rows:
        lines.append(ceiling_line(rows, depths, trace_s))
    return "\n".join(lines)


def depth_list(text: str) -> tuple[int, ...]:
    """'0,1,2,3' -> (0, 1, 2, 3); argparse reports a ValueError as a usage error."""
    depths = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    if 0 not in depths or len(depths) < 3 or any(not 0 <= d <= 16 for d in depths):
        raise ValueError(text)
    return depths


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
                         "attention backend, GPU and model class (runtime/core/thresholds.py) as it does for "
                         "a server it launches")
    ap.add_argument("--depths", type=depth_list, metavar="0,1,2,...",
                    help="auto over these depths against none and each static depth (0 and two more needed)")
    ap.add_argument("--decline", type=float, default=0.0, metavar="D",
                    help="with --depths: each draft position accepted D less often than the one before")
    ap.add_argument("--no-trace", action="store_true", help="with --depths: skip the changing-load trace")
    ap.add_argument("--trace-s", type=float, default=TRACE_S, metavar="S",
                    help="with --depths: the trace's length (its first phases; the GPU's depthtrace runs TRACE_S)")
    ap.add_argument("--sglang-law", action="store_true",
                    help="SGLang's simulated acceptance (match-expected), what the GPU sweeps see")
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
        if ns.no_backend_thresholds:
            chosen_settings = dict(settings)
            said = f"preset {preset.name}: the policy's defaults (--no-backend-thresholds)"
        else:
            chosen_settings, said = supervised_settings(preset, settings)
        try:
            preset.default_settings().with_changes(chosen_settings)
        except SettingsError as exc:
            ap.error(str(exc))
        print(said)
        for accept_len in ns.accept_lens or [preset.accept_len]:
            if ns.depths:
                try:
                    variant = dataclasses.replace(preset, accept_len=accept_len)
                    law = match_expected_law(accept_len) if ns.sglang_law else \
                        law_for(accept_len, preset.steps, ns.decline)
                    rows = sweep_depths(variant, chosen_settings, ns.depths, law)
                    print(render_depths(variant, ns.depths, rows, law))
                    if not ns.no_trace:
                        print()
                        print(render_trace(variant, chosen_settings, ns.depths, law, ns.trace_s, rows))
                except (ValueError, SettingsError) as exc:
                    ap.error(str(exc))
                print()
                continue
            try:
                variant = dataclasses.replace(preset, accept_len=accept_len)
                rows = sweep(variant, chosen_settings, law=match_expected_law(accept_len) if ns.sglang_law else None)
            except ValueError as exc:  # an accept length the preset's draft steps cannot reach
                ap.error(str(exc))
            grids.setdefault(name, {})[accept_len] = rows
            print(render(variant, chosen_settings, rows, ns.sglang_law))
            print()
    if ns.accept_lens:
        for name, grid in grids.items():
            print(render_grid(name, grid))
            print()
    print(f"({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
