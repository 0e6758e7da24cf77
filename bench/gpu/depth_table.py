#!/usr/bin/env python3
"""The policy's cost table from measured static windows: step time per (batch, depth).

Standard library only. Reads interleave.py CSVs whose modes pin one depth
each (``d1``, ``d2``, ``d3``, ... and ``off``, as run_fast_off.sh's
depthsweep names them) and writes the JSON that ``--depth-costs`` /
SPECCTL_DEPTH_COSTS takes: a decode step lasts one output token per
request, stretched by the tokens a verify yields, so

    step_ms = tpot_ms x accept_len     (accept_len 1 with drafting off)

averaged over the windows of each (concurrency, depth). Concurrencies become
the table's buckets (the running batch, where the window's mean differs).

    depth_table.py OUT.json CSV [CSV ...] [--label LABEL]

--label keeps only that label's windows: run_fast_off.sh appends every phase's
windows to one CSV, where sweep2's "off" and depthauto's "d3" would otherwise
join depthsweep's cells (and sweep2's concurrencies leave pairs missing).
"""
from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import sys
from collections import defaultdict


def depth_of(mode: str) -> int | None:
    """'d2' -> 2, 'off' -> 0, anything else (auto, on) -> None."""
    if mode == "off":
        return 0
    m = re.fullmatch(r"d(\d{1,2})", mode)
    return int(m.group(1)) if m else None


def table(paths: list[str], label: str | None = None) -> dict:
    cells: dict[tuple[int, int], list[float]] = defaultdict(list)
    for path in paths:
        with open(path, newline="") as fh:
            for row in csv.DictReader(fh):
                if label is not None and row.get("label") != label:
                    continue
                depth = depth_of(row.get("mode", ""))
                try:
                    tpot, c = float(row["tpot_ms"]), int(row["concurrency"])
                    accept = 1.0 if depth == 0 else float(row["accept_len"])
                except (KeyError, TypeError, ValueError):
                    continue
                if depth is None or tpot <= 0 or accept < 1:
                    continue
                cells[(c, depth)].append(tpot * accept)
    buckets = sorted({c for c, _ in cells})
    depths = sorted({d for _, d in cells})
    missing = [(c, d) for c in buckets for d in depths if (c, d) not in cells]
    if not buckets or 0 not in depths or len(depths) < 2:
        raise SystemExit("need windows with mode off and at least one dN mode")
    if missing:
        raise SystemExit(f"no window for (concurrency, depth) {missing[:6]}: every pair is needed")
    return {"source": "measured: " + ", ".join(paths), "buckets": buckets, "depths": depths,
            "step_ms": [[round(statistics.fmean(cells[(c, d)]), 4) for d in depths] for c in buckets]}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", metavar="OUT.json")
    p.add_argument("csvs", nargs="+", metavar="CSV")
    p.add_argument("--label", help="only this label's windows (e.g. depth-triton)")
    args = p.parse_args(argv)
    out = table(args.csvs, args.label)
    with open(args.out, "w") as fh:
        json.dump(out, fh)
        fh.write("\n")
    for c, row in zip(out["buckets"], out["step_ms"]):
        print(f"c={c}: " + "  ".join(f"d{d} {ms:.2f} ms" for d, ms in zip(out["depths"], row)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
