#!/usr/bin/env python3
"""Calibrated auto against forced on, forced off and the row alone, per concurrency, from interleave.py's CSV.

    python3 bench/gpu/calib_report.py INTERLEAVE.csv [LABEL_PREFIX]

Rows whose label starts with LABEL_PREFIX (default ``specctl-``; calibrate.sh's sweep2) are grouped by
concurrency and mode (``on``, ``off``, ``auto`` = calibrated auto, ``row`` = auto with the thresholds row
alone, calib_switch.sh's); each cell is the mean tok/s over that mode's windows. Printed: a Markdown table
with auto / best (the better of forced on and off), auto / row where the row ran, and whether auto reads
0.97 of the best, the goal docs/calibration.md states. Windows with errors or no tok/s are left out and
counted. Standard library only (it runs on the GPU machine next to the CSV).
"""
from __future__ import annotations

import csv
import statistics
import sys
from collections import defaultdict

GOAL = 0.97


def table(rows: list[dict[str, str]], prefix: str = "specctl-") -> tuple[list[str], int]:
    """The table's lines and how many windows were left out."""
    cells: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    left_out = 0
    for r in rows:
        if not r.get("label", "").startswith(prefix):
            continue
        try:
            c, tok_s, errors = int(r["concurrency"]), float(r["tok_s"]), int(r.get("errors") or 0)
        except (KeyError, ValueError):
            left_out += 1
            continue
        if errors or tok_s <= 0:
            left_out += 1
            continue
        cells[c][r.get("mode", "")].append(tok_s)
    has_row = any("row" in modes for modes in cells.values())
    head = "| requests | forced on | forced off | calibrated auto |" + (" row alone |" if has_row else "")
    head += " auto / best |" + (" auto / row |" if has_row else "") + f" >= {GOAL} |"
    lines = [head, "|" + " ---: |" * (head.count("|") - 1)]
    for c in sorted(cells):
        mean = {m: statistics.fmean(v) for m, v in cells[c].items()}
        on, off, auto, row = (mean.get(m) for m in ("on", "off", "auto", "row"))
        best = max((x for x in (on, off) if x is not None), default=None)
        share = auto / best if auto is not None and best else None
        cols = [str(c), _f(on), _f(off), _f(auto)] + ([_f(row)] if has_row else [])
        cols.append(_r(share))
        if has_row:
            cols.append(_r(auto / row if auto is not None and row else None))
        cols.append("-" if share is None else "yes" if share >= GOAL else "NO")
        lines.append("| " + " | ".join(cols) + " |")
    return lines, left_out


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def _r(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        with open(argv[0], newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
    except OSError as exc:
        print(f"calib_report.py: cannot read {argv[0]}: {exc.strerror}", file=sys.stderr)
        return 2
    lines, left_out = table(rows, *argv[1:])
    print("\n".join(lines))
    if left_out:
        print(f"({left_out} windows left out: errors or no tok/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
