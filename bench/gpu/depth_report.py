#!/usr/bin/env python3
"""Issue 22's goal table from interleave.py's depth CSVs: auto against every static depth.

    depth_report.py [--trace-s S [--trace-seed N]] FILE.csv [FILE.csv ...]

Reads the rows of three servers, as run_fast_off.sh's phases label them:
``nospec-BACKEND`` (nospec2: no speculation, mode ``-``), ``depth-BACKEND``
(depthsweep: one specctl server, each depth pinned, modes d1 d2 d3 off) and
``depthauto-BACKEND`` (depthauto: another specctl server in auto with the
measured cost table, beside its own statics: d1, d2, d3 and off since
2026-12-02's first sitting, which ran d3 and off only; its ``steps`` column
is the mean depth the server ran in the window). A label may end in a model tag
(``depth-triton-qwen3moe``); rows of other labels are left alone, so
run_fast_off.sh's one CSV of every phase can be given as it is.

One table per backend, a row per concurrency. The goal (issue 22): auto >=
0.97 x the best static of {none, d1, d2, d3} at every concurrency, and >= 1.05
x the best binary choice max(none, d3) where a middle depth (d1, d2) wins.
Where a concurrency has no none row, the best static is over d1, d2, d3 and
off (off standing in for none) and the table marks it. Each cell is the mean
over the windows (rounds), with their range where there are several; each
ratio is of the means, with the range single windows allow (report.py's).

The sweep's statics and auto ran on different servers, so auto / best static
carries the scatter from one server start to the next; the summary
quantifies it with the modes both specctl servers ran, and puts auto against
the statics its own server ran beside it, which that scatter does not enter.

With ``--trace-s`` it adds the changing-load trace's ceiling from these
windows: the trace's phases (bench/gpu/trace_schedule.py, the schedule the
GPU's depthtrace and the simulator run) priced at each static's measured
tok/s, the best static of every phase against the best single static. A
policy that runs one state per load level cannot beat that ratio (it takes
every switch as free and instant), so it says whether issue 22's trace goal
(1.05) is within reach before a device call is spent on the trace.

Standard library only.
"""
from __future__ import annotations

import csv
import math
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import Cells, models_in, read
from table_cells import best_of, mean, ratio
from trace_schedule import ceiling, phase_seconds

KINDS = ("nospec", "depth", "depthauto")  # the three servers' label prefixes
NEEDED = ("label", "concurrency", "mode", "tok_s", "steps")
GOAL, MIDDLE_GOAL = 0.97, 1.05
STATICS = ("none", "d1", "d2", "d3")  # issue 22's set of static configurations
MIDDLE = ("d1", "d2")
# column name -> (report.read's kind, mode): the sweep's statics, then auto's server
SOURCES = {"none": ("nospec", "-"), "d1": ("depth", "d1"), "d2": ("depth", "d2"), "d3": ("depth", "d3"),
           "off": ("depth", "off"), "auto": ("depthauto", "auto"), "auto d1": ("depthauto", "d1"),
           "auto d2": ("depthauto", "d2"), "auto d3": ("depthauto", "d3"), "auto off": ("depthauto", "off")}
OWN = ("auto d1", "auto d2", "auto d3", "auto off")  # the statics auto's own server ran beside it
OWN_DEPTH = {"auto d1": 1.0, "auto d2": 2.0, "auto d3": 3.0, "auto off": 0.0}  # each one's steps column
Windows = list[dict[str, float]]


class Refused(Exception):
    """Input this tool will not read; its message is the one line the user sees."""


def backend_of(label: str) -> str | None:
    """The backend of a depth row's label (``depth-fa3-qwen3moe`` -> fa3); None for other labels."""
    parts = label.split("-")
    if parts[0] not in KINDS:
        return None
    if len(parts) < 2 or not parts[1]:
        raise Refused(f"label {label!r} names no backend (expected {parts[0]}-BACKEND)")
    return parts[1]


def check_row(row: dict[str, str]) -> None:
    """Raise ValueError where report.read would: it parses every row with a tok/s, whatever its label."""
    if row.get("tok_s"):
        float(row["tok_s"])
        int(row["concurrency"])
        for key in ("steps", "tpot_ms"):
            if row.get(key):
                float(row[key])


def backend_in(path: str) -> str:
    """The one backend of a file's depth rows, after checking what report.read will parse.

    Why one a file: report.read keys windows by label prefix, not backend, so a
    file is read with the other files of its backend; run_fast_off.sh writes one
    CSV per TAG, which names the backend.
    """
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            missing = [k for k in NEEDED if k not in (reader.fieldnames or [])]
            if missing:
                raise Refused(f"{path}: not an interleave.py CSV (no column {', '.join(missing)})")
            found = set()
            for line, row in enumerate(reader, start=2):
                try:
                    check_row(row)
                except (TypeError, ValueError):
                    raise Refused(f"{path}:{line}: tok_s, concurrency, steps or tpot_ms is not a number") from None
                if (backend := backend_of(row["label"] or "")) is not None:
                    found.add(backend)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise Refused(f"{path}: cannot read it ({exc.__class__.__name__}: {exc})") from None
    if len(found) != 1:
        what = "no rows labelled nospec-, depth- or depthauto-" if not found else \
            f"rows of backends {', '.join(sorted(found))}; give each backend's rows in its own file"
        raise Refused(f"{path}: {what}")
    return found.pop()


def files_by_backend(paths: list[str]) -> tuple[dict[str, list[str]], str]:
    """backend -> its files, and the files' one model; refuses what the tables cannot hold apart.

    Two models are refused (report.py's rule): their labels' prefixes are alike,
    so report.read would put their windows in the same cells.
    """
    groups: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        groups[backend_in(path)].append(path)
    models = models_in(paths)
    if len(models) > 1:
        raise Refused(f"these files hold more than one target model ({', '.join(sorted(models))}); "
                      "give each model's files apart")
    return dict(groups), models.pop()


class Point(NamedTuple):
    """One concurrency's windows by column, and what the goals compare."""

    c: int
    cols: dict[str, Windows | None]
    best: tuple[str, Windows] | None  # the best static's name and windows
    binary: Windows | None  # max(none, d3), or max(off, d3) without none
    has_none: bool
    own_statics: bool  # the static columns are auto's own server's: no sweep server ran them


def best_static(cols: dict[str, Windows | None]) -> tuple[str, Windows] | None:
    """The static with the highest mean tok/s: issue 22's set, or off in none's place where none is missing."""
    names = STATICS if cols["none"] else ("d1", "d2", "d3", "off")
    present = [(n, w) for n in names if (w := cols[n])]
    return max(present, key=lambda p: mean(p[1])) if present else None


def points(cells: Cells) -> list[Point]:
    """One Point per concurrency any of the three servers measured."""
    concs = sorted({c for (kind, _, c) in cells if kind in KINDS})
    out = []
    for c in concs:
        cols = {name: cells.get((kind, mode, c)) for name, (kind, mode) in SOURCES.items()}
        own = not any(cols[n] for n in ("d1", "d2", "d3", "off"))
        if own:  # depthauto alone, beside every static depth: its own statics are the ones to judge it by
            cols.update({n: cols[f"auto {n}"] for n in ("d1", "d2", "d3", "off")})
        low = cols["none"] or cols["off"]
        out.append(Point(c, cols, best_static(cols), best_of(low, cols["d3"]), bool(cols["none"]), own))
    return out


def over(top: Windows | None, bottom: Windows | None) -> float | None:
    """The ratio of two means, None where either is missing."""
    return mean(top) / mean(bottom) if top and bottom else None


def own_best_name(p: Point) -> str | None:
    """The column of the best static auto's own server ran (of d1-d3 and off), None where it ran none."""
    present = [n for n in OWN if p.cols[n]]
    return max(present, key=lambda n: mean(p.cols[n])) if present else None  # type: ignore[arg-type]


def own_best(p: Point) -> Windows | None:
    """The best static auto's own server ran (of d1-d3 and off): the comparison no server start's scatter enters."""
    name = own_best_name(p)
    return p.cols[name] if name else None


def middle_win(p: Point) -> Windows | None:
    """max(d1, d2)'s windows where a middle depth is the best static, else None."""
    return best_of(p.cols["d1"], p.cols["d2"]) if p.best and p.best[0] in MIDDLE else None


def fmt(windows: Windows | None, key: str = "tok_s", digits: int = 1, spread_digits: int = 0) -> str:
    """The mean over the windows, with their range where there are several ("-" where none).

    tok/s ranges are whole numbers, as report.py prints them: the windows scatter by per cents.
    """
    if not windows:
        return "-"
    vals = [w[key] for w in windows if not math.isnan(w[key])]
    if not vals:
        return "-"
    spread = f" ({min(vals):.{spread_digits}f}-{max(vals):.{spread_digits}f})" if len(set(vals)) > 1 else ""
    return f"{statistics.fmean(vals):.{digits}f}{spread}"


def fmt_ratio(top: Windows | None, bottom: Windows | None) -> str:
    """report.py's ratio (with the single windows' range), the plain ratio where each side is one window."""
    if top and bottom and len(top) == len(bottom) == 1:
        return f"{mean(top) / mean(bottom):.3f}"
    return ratio(top, bottom)


def row(p: Point) -> str:
    """One concurrency's Markdown row."""
    cols = p.cols
    best = "-" if not p.best else f"{p.best[0]}{'' if p.has_none else '*'} {fmt(p.best[1])}"
    cells = [str(p.c), *(fmt(cols[n]) for n in ("none", "d1", "d2", "d3", "off")), best, fmt(cols["auto"]),
             fmt(cols["auto"], "steps", 2, 2), fmt_ratio(cols["auto"], p.best[1] if p.best else None),
             fmt_ratio(cols["auto"], own_best(p)),
             fmt_ratio(middle_win(p), p.binary)]
    return "| " + " | ".join(cells) + " |"


HEADER = ["c", "none", "d1", "d2", "d3", "off", "best static", "auto", "auto's depth", "auto / best static",
          "auto / best static, auto's server", "middle / binary"]


def table(pts: list[Point]) -> str:
    """The Markdown table, a row per concurrency."""
    rule = "| " + " | ".join(["---:"] * 6 + ["---"] + ["---:"] * 5) + " |"
    return "\n".join(["| " + " | ".join(HEADER) + " |", rule, *(row(p) for p in pts)])


def goal_line(pts: list[Point]) -> str:
    """The points where auto misses 0.97 x the best static, the issue's first goal."""
    rated = [(p, r) for p in pts if p.best and (r := over(p.cols["auto"], p.best[1])) is not None]
    missed = [f"c={p.c} {r:.3f} (best {p.best[0]})" for p, r in rated if p.best and r < GOAL]
    if not rated:
        return "- No concurrency has auto and a static both measured."
    if not missed:
        return f"- auto / best static >= {GOAL} (issue 22's goal) at all {len(rated)} concurrencies with both measured."
    return (f"- auto / best static < {GOAL} (issue 22's goal: >= {GOAL}) at {len(missed)} of {len(rated)}"
            f" concurrencies: {', '.join(missed)}.")


def own_line(pts: list[Point]) -> str:
    """The first goal on auto's own server, where it ran beside the statics (off standing in for none)."""
    rated = [(p, r) for p in pts if (r := over(p.cols["auto"], own_best(p))) is not None]
    if not rated:
        return "- auto's server ran no static beside it."
    ran = sorted({n.split()[1] for p, _ in rated for n in OWN if p.cols[n]})
    missed = [f"c={p.c} {r:.3f}" for p, r in rated if r < GOAL]
    verdict = f">= {GOAL} at all {len(rated)} concurrencies" if not missed else \
        f"< {GOAL} at {len(missed)} of {len(rated)} concurrencies: {', '.join(missed)}"
    return (f"- On auto's own server (beside {', '.join(ran)}; off stands in for none there, the off state's"
            f" cost being no speculation's): auto / the best of them {verdict}"
            + ("." if set(ran) >= {"d1", "d2", "d3", "off"} else
               " (not every static ran there: this is not issue 22's set)."))


def middle_line(pts: list[Point]) -> str:
    """Where a middle depth beats the binary choice, by how much, and auto against the binary choice there."""
    wins = []
    for p in pts:
        if (mid := middle_win(p)) and p.binary and p.best:
            auto = over(p.cols["auto"], p.binary)
            wins.append(f"c={p.c} {p.best[0]} {over(mid, p.binary):.3f}, auto {'-' if auto is None else f'{auto:.3f}'}"
                        + ("" if p.has_none else " (over max(off, d3))"))
    if not wins:
        return "- No middle depth (d1, d2) is the best static at any concurrency: the binary choice is."
    return (f"- A middle depth (d1, d2) is the best static at {len(wins)} concurrencies; over the binary choice"
            f" max(none, d3) (issue 22's goal for auto there: >= {MIDDLE_GOAL}): {'; '.join(wins)}.")


def same_state_line(pts: list[Point]) -> str | None:
    """Where auto ran its own server's best static's state in every window: one state read twice.

    There auto / best static measures the windows' noise, not the policy's
    choice, so a miss there says how far two windows of one state part, which
    is what a single round can resolve. None where auto never did.
    """
    same: list[tuple[int, str, float]] = []
    for p in pts:
        name, auto = own_best_name(p), p.cols["auto"]
        if auto and name and all(w["steps"] == OWN_DEPTH[name] for w in auto):
            same.append((p.c, name.split()[1], mean(auto) / mean(p.cols[name])))  # type: ignore[arg-type]
    if not same:
        return None
    ratios = [r for _, _, r in same]
    return (f"- Where auto ran its own server's best static's state in every window, auto / best static reads"
            f" one state twice (the windows' noise, not a choice): "
            f"{', '.join(f'c={c} {n} {r:.3f}' for c, n, r in same)}; median {statistics.median(ratios):.3f},"
            f" range {min(ratios):.3f}-{max(ratios):.3f}.")


def scatter_line(pts: list[Point]) -> str:
    """The same modes on the two specctl servers: how far one server start reads from the other."""
    if all(p.own_statics for p in pts):
        return ("- One specctl server ran auto and every static depth beside it, so no specctl server start's"
                " scatter enters auto / best static (none's server, where there is one, is another start).")
    def per_c(a: str, b: str) -> str:
        found = [(p.c, r) for p in pts if (r := over(p.cols[a], p.cols[b])) is not None]
        if not found:
            return "not measured on both"
        low, high = min(r for _, r in found), max(r for _, r in found)
        return ", ".join(f"c={c} {r:.3f}" for c, r in found) + f" (range {low:.3f}-{high:.3f})"
    return ("- The statics and auto ran on different servers (none on one without speculation, d1-d3 and off on"
            " the sweep's specctl server, auto on another specctl server), so auto / best static carries"
            " server-to-server scatter. The modes both specctl servers ran:\n"
            f"  - d3 auto-server / d3 sweep-server: {per_c('auto d3', 'd3')}\n"
            f"  - off auto-server / off sweep-server: {per_c('auto off', 'off')}")


def ceiling_line(pts: list[Point], trace_s: float, seed: int) -> str:
    """The trace's ceiling: every phase at its best static, against the best single static over the whole trace."""
    spent = phase_seconds(seed, trace_s)
    at = {p.c: p for p in pts}
    names = STATICS if all(at.get(c) and at[c].has_none for c in spent) else ("d1", "d2", "d3", "off")
    lacking = sorted(c for c in spent if c not in at or any(not at[c].cols[n] for n in names))
    if lacking:
        return (f"- The trace's ceiling ({trace_s:g} s, seed {seed}): no windows of every static at"
                f" c={', '.join(map(str, lacking))}, which the trace visits.")
    rates = {n: {c: mean(at[c].cols[n]) for c in spent} for n in names}  # type: ignore[arg-type]
    low = names[0] if names[0] == "none" else "off"
    best, top, binary = ceiling(spent, rates, (low, "d3"))
    return (f"- The trace's ceiling from these windows ({trace_s:g} s, seed {seed}, "
            f"{', '.join(f'c={c} {t:.0f} s' for c, t in sorted(spent.items()))}): the best static in every phase"
            f" gives {top:.3f} x the best single static ({best}), choosing only between {low}"
            f" and d3 {binary:.3f} x. A policy that runs one state per load level cannot exceed"
            f" it (it takes every switch as free and instant); issue 22's trace goal is {MIDDLE_GOAL}.")


def read_files(paths: list[str]) -> tuple[Cells, str | None]:
    """Every file's windows in one set of cells, and a line naming the cells that mix files (None if none).

    Two files are two server starts (two calls, or two sittings), so a cell with
    windows of both carries the scatter between starts; both sides of a ratio do
    where both files ran both modes.
    """
    cells: Cells = defaultdict(list)
    seen: dict[tuple[str, int], list[str]] = defaultdict(list)
    for path in paths:
        own = read([path])
        for (kind, mode, c), windows in own.items():
            cells[(kind, mode, c)] += windows
        for kind, c in {(k, c) for (k, _, c) in own if k in KINDS}:
            seen[(kind, c)].append(Path(path).name)
    mixed = {key: names for key, names in seen.items() if len(names) > 1}
    if not mixed:
        return cells, None
    by_kind: dict[str, list[int]] = defaultdict(list)
    for kind, c in sorted(mixed):
        by_kind[kind].append(c)
    files = sorted({n for names in mixed.values() for n in names})
    return cells, (f"- Cells averaged over several files ({', '.join(files)}: server starts apart): "
                   + "; ".join(f"{k} at c={', '.join(map(str, cs))}" for k, cs in by_kind.items()) + ".")


def control_line(cells: Cells) -> str | None:
    """Auto confined to {0, N} (run_fast_off.sh's DEPTH_CONTROL=N, mode ``aN``) beside dN pinned and auto.

    Why: on FA3 auto read its own best state's pinned windows at 0.78-0.96 with no switch in the
    window. ``aN`` is mode auto without the depth choice: aN / dN near 1 puts the loss in the depth
    choice's path, aN / dN as low as auto / dN puts it in auto mode itself. None where none ran.
    """
    found = sorted((int(m[1:]), c) for (kind, m, c) in cells if kind == "depthauto" and re.fullmatch(r"a\d", m))

    def own(mode: str, c: int) -> Windows | None:
        return cells.get(("depthauto", mode, c))

    parts = [f"c={c} a{n} / d{n} {ratio(own(f'a{n}', c), own(f'd{n}', c))}, auto / a{n} "
             f"{ratio(own('auto', c), own(f'a{n}', c))}" for n, c in found]
    return ("- The same-state control (auto confined to {0, N} as mode aN, beside dN pinned, one server): "
            + "; ".join(parts) + ".") if parts else None


def report(backend: str, model: str, cells: Cells, merged: str | None = None,
           trace: tuple[float, int] | None = None) -> str:
    """One backend's heading, table and summary (and the trace's ceiling where asked)."""
    pts = points(cells)
    no_none = [f"c={p.c}" for p in pts if not p.has_none]
    note = "" if not no_none else (f"\n\n(*) no none row at {', '.join(no_none)}: the best static there is over"
                                   " d1, d2, d3 and off, and the binary choice max(off, d3).")
    own = [f"c={p.c}" for p in pts if p.own_statics]
    if own:
        note += (f"\n\nd1-d3 and off at {', '.join(own)} are auto's own server's (no sweep server ran them), so"
                 " there the two auto / best static columns read the same windows.")
    return "\n".join([
        f"## {backend}, {model}: auto against every static depth (issue 22)\n",
        "Output tok/s, mean over the windows (their range); ratios of the means (range over single windows);"
        " auto's depth = the mean of its windows' steps column; middle / binary = max(d1, d2) / max(none, d3)"
        " where d1 or d2 is the best static.\n",
        table(pts) + note, "", goal_line(pts), own_line(pts),
        *([same] if (same := same_state_line(pts)) else []), *([ctl] if (ctl := control_line(cells)) else []),
        middle_line(pts), scatter_line(pts),
        *([merged] if merged else []),
        *([ceiling_line(pts, *trace)] if trace else [])])


def trace_option(argv: list[str]) -> tuple[tuple[float, int] | None, list[str]]:
    """(--trace-s, --trace-seed) taken out of argv, and the files left; Refused on a bad value."""
    rest, found = list(argv), {}
    for flag in ("--trace-s", "--trace-seed"):
        if flag in rest:
            i = rest.index(flag)
            if i + 1 >= len(rest):
                raise Refused(f"{flag} needs a value")
            try:
                found[flag] = float(rest[i + 1]) if flag == "--trace-s" else int(rest[i + 1])
            except ValueError:
                raise Refused(f"{flag}: not a number: {rest[i + 1]!r}") from None
            del rest[i:i + 2]
    if "--trace-seed" in found and "--trace-s" not in found:
        raise Refused("--trace-seed needs --trace-s")
    if "--trace-s" not in found:
        return None, rest
    if not 0 < found["--trace-s"] <= 3600:
        raise Refused(f"--trace-s: between 0 and 3600 seconds, got {found['--trace-s']:g}")
    return (found["--trace-s"], int(found.get("--trace-seed", 0))), rest


def main(argv: list[str]) -> int:
    if not argv:
        print("depth_report.py: give interleave.py's CSVs (usage: depth_report.py FILE.csv [FILE.csv ...])",
              file=sys.stderr)
        return 2
    try:
        trace, files = trace_option(argv)
        if not files:
            raise Refused("give interleave.py's CSVs (usage: depth_report.py [--trace-s S [--trace-seed N]]"
                          " FILE.csv [FILE.csv ...])")
        groups, model = files_by_backend(files)
    except Refused as exc:
        print(f"depth_report.py: {exc}", file=sys.stderr)
        return 2
    print("\n\n".join(report(b, model, *read_files(paths), trace=trace) for b, paths in sorted(groups.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
