#!/usr/bin/env python3
"""Which depth a cost table makes the policy choose, at each load the pinned windows measured.

    depth_choice.py TABLE.json [TABLE.json ...] --windows FILE.csv [FILE.csv ...]

Auto can miss the best static for two reasons: its price model points at
the wrong depth, or it runs the right one and its windows read low (the
same-state under-read, depth_report.py's control). This separates the
first from the second without a device call: for every concurrency where
one server ran d1, d2 and d3 pinned (depthauto's own statics, or
depthsweep's), it takes the acceptance each pinned depth measured
(E[accepted drafts] = accept_len - 1, 0 for off), prices every depth with
the table as the policy does (``DepthCosts.row``: pooled non-decreasing in
depth, interpolated between buckets; score = tokens a request per second of
step), and prints the depth the table picks, its lead over the runner-up
(under the policy's ``DEPTH_MARGIN`` the policy holds whichever depth it is
in), the measured best static, and what the picked depth measured against it.

Give it the files of one acceptance length (the acceptance per depth is
read per concurrency, across files). It imports specctl's runtime (run it
with the project's environment): the step times are the policy's own
``DepthCosts.row`` and its ``DEPTH_MARGIN``; the score, one line, is
``SpecPolicy._best``'s.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

try:
    from specctl.runtime.core.depth_model import DepthCosts, DepthCostsError, read_costs
    from specctl.runtime.core.policy import DEPTH_MARGIN
except ImportError:
    sys.exit("depth_choice.py: needs specctl installed (run it with the project's .venv/bin/python)")

STATIC_MODES = {"off": 0, "d1": 1, "d2": 2, "d3": 3}
SERVERS = ("depthauto", "depth")  # label prefixes of the servers that pin depths


class Refused(Exception):
    """Input this tool will not read; its message is the one line the user sees."""


Pinned = dict[int, dict[int, list[dict[str, float]]]]  # concurrency -> depth -> windows


def read_pinned(paths: list[str]) -> Pinned:
    """Windows of the pinned depths (off, d1-d3) by concurrency and depth: depthauto's and depthsweep's rows alike."""
    pinned: Pinned = defaultdict(lambda: defaultdict(list))
    for path in paths:
        try:
            with open(path, newline="", encoding="utf-8") as fh:
                rows = list(csv.DictReader(fh))
        except OSError as exc:
            raise Refused(f"{path}: {exc.strerror or exc}") from None
        missing = {"label", "concurrency", "mode", "tok_s", "accept_len", "running"} - set(rows[0] if rows else {})
        if missing:
            raise Refused(f"{path}: not an interleave.py CSV (no {', '.join(sorted(missing))} column)")
        for row in rows:
            if row["label"].split("-")[0] not in SERVERS or row["mode"] not in STATIC_MODES:
                continue
            try:
                window = {k: float(row[k]) for k in ("tok_s", "accept_len", "running")}
                c = int(row["concurrency"])
            except (TypeError, ValueError):
                continue
            pinned[c][STATIC_MODES[row["mode"]]].append(window)
    return pinned


def choice(costs: DepthCosts, windows: dict[int, list[dict[str, float]]]) -> dict[str, float] | None:
    """The table's pick at one load, or None where a depth of 0-3 has no window."""
    if any(not windows.get(d) for d in STATIC_MODES.values()):
        return None
    bs = max(1, round(statistics.fmean(w["running"] for d in windows for w in windows[d])))
    row = costs.row(bs)
    expected = {d: 0.0 if d == 0 else max(statistics.fmean(w["accept_len"] for w in windows[d]) - 1.0, 0.0)
                for d in windows}
    scores = {d: (1.0 + expected[d]) / row[d] for d in sorted(windows) if d < len(row)}  # SpecPolicy._best's score
    ranked = sorted(scores, key=scores.__getitem__, reverse=True)
    tok = {d: statistics.fmean(w["tok_s"] for w in windows[d]) for d in windows}
    best = max(tok, key=tok.__getitem__)
    pick = ranked[0]
    return {"bs": bs, "pick": pick, "lead": scores[pick] / scores[ranked[1]] - 1.0, "best": best,
            "measured": tok[pick] / tok[best]}


def report(tables: list[tuple[str, DepthCosts]], pinned: Pinned) -> str:
    name = {0: "off", 1: "d1", 2: "d2", 3: "d3"}
    head = "| c | batch | best static (tok/s) | " + " | ".join(
        f"{label}: pick (lead) | its tok/s / best" for label, _ in tables) + " |"
    lines = [head, "|" + " ---: |" * 2 + " --- |" + " --- | ---: |" * len(tables)]
    held = []
    for c in sorted(pinned):
        picks = [(label, choice(costs, pinned[c])) for label, costs in tables]
        if any(p is None for _, p in picks):
            continue
        first = picks[0][1]
        assert first is not None
        best = int(first["best"])
        cells = []
        for label, p in picks:
            assert p is not None
            mark = "*" if p["lead"] < DEPTH_MARGIN else ""
            cells.append(f"{name[int(p['pick'])]}{mark} ({100 * p['lead']:+.1f} %) | {p['measured']:.3f}")
            if mark:
                held.append(f"{label} at c={c}")
        tok = statistics.fmean(w["tok_s"] for w in pinned[c][best])
        lines.append(f"| {c} | {int(first['bs'])} | {name[best]} ({tok:.0f}) | " + " | ".join(cells) + " |")
    if len(lines) == 2:
        raise Refused("no concurrency with windows of off, d1, d2 and d3 pinned (depthauto or depthsweep rows)")
    lines.append("")
    lines.append(f"(*) the pick leads the runner-up by less than the policy's DEPTH_MARGIN "
                 f"({100 * DEPTH_MARGIN:.0f} %): auto holds whichever of the two it is in"
                 + (f" ({'; '.join(held)})." if held else "."))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("tables", nargs="+", metavar="TABLE.json", help="cost tables to compare (--depth-costs files)")
    p.add_argument("--windows", nargs="+", required=True, metavar="FILE.csv", help="interleave.py CSVs")
    args = p.parse_args(argv)
    try:
        tables = []
        for path in args.tables:
            try:
                tables.append((Path(path).stem, read_costs(path)))
            except DepthCostsError as exc:
                raise Refused(str(exc)) from None
        print(report(tables, read_pinned(args.windows)))
    except Refused as exc:
        print(f"depth_choice.py: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
