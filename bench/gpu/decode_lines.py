#!/usr/bin/env python3
"""Decode-only tok/s per load from SGLang's own log lines, for servers that took turns.

    decode_lines.py --concs "64 128 256" BASE.log OTHER.log [...]

Why: offpair's windows carry arrivals, so each holds prefills as well as decode
steps, and one 4 s window of a pair scattered 0.77-1.21 at 128 requests in the
eleventh sitting (docs/benchmarks.md). SGLang logs a `Decode batch` line every
40 decode steps with the running batch and its `gen throughput (token/s)` since
the line before: decode steps only. Per log and load it takes the lines whose
running batch lies within 3 % of the load (at least 2 requests), drops each turn's
first line (it spans the idle minutes while the other server had the GPU), and
prints the median and its ratio to the first log's: the eleventh sitting's second
reading of the tree's off step (0.914, 1.041, 0.947 at 64, 128, 256 requests).
"""
from __future__ import annotations

import argparse
import re
import statistics
import sys
from datetime import datetime
from pathlib import Path

LINE = re.compile(r"^\[(?P<ts>[\d-]+ [\d:]+)\] Decode batch, #running-req: (?P<run>\d+),"
                  r".*gen throughput \(token/s\): (?P<tps>[\d.]+)")
TURN_GAP_S = 3.0  # lines come every 40 steps (well under a second at any load here); a longer gap is a new turn


def decode_rates(lines: list[str]) -> list[tuple[int, float]]:
    """(running batch, gen tok/s) of every decode line but the first of each turn."""
    out: list[tuple[int, float]] = []
    last: datetime | None = None
    for line in lines:
        m = LINE.match(line)
        if not m:
            continue
        ts = datetime.strptime(m["ts"], "%Y-%m-%d %H:%M:%S")
        if last is not None and (ts - last).total_seconds() <= TURN_GAP_S:
            out.append((int(m["run"]), float(m["tps"])))
        last = ts
    return out


def near(running: int, c: int) -> bool:
    """Whether a batch of ``running`` requests is the load ``c`` (within 3 %, at least 2 requests)."""
    return abs(running - c) <= max(2.0, 0.03 * c)


def medians(rates: list[tuple[int, float]], concs: list[int]) -> dict[int, tuple[int, float | None]]:
    """Per load: how many lines, and their median tok/s (None without a line)."""
    result: dict[int, tuple[int, float | None]] = {}
    for c in concs:
        values = [tps for running, tps in rates if near(running, c)]
        result[c] = (len(values), statistics.median(values) if values else None)
    return result


def table(paths: list[Path], concs: list[int]) -> str:
    """A markdown table: per load, each log's median (lines) and its ratio to the first log's."""
    per = [medians(decode_rates(p.read_text(errors="replace").splitlines()), concs) for p in paths]
    head = ["c", *(f"{p.name} median tok/s (lines)" for p in paths),
            *(f"{p.name} / {paths[0].name}" for p in paths[1:])]
    rows = ["| " + " | ".join(head) + " |", "| " + " | ".join(["---:"] * len(head)) + " |"]
    for c in concs:
        base = per[0][c][1]
        cells = [str(c)] + [f"{m:.0f} ({n})" if m is not None else f"- ({n})" for n, m in (x[c] for x in per)]
        for x in per[1:]:
            m = x[c][1]
            cells.append(f"{m / base:.3f}" if m is not None and base else "-")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def loads(text: str) -> list[int]:
    """``--concs``: positive request counts, spaces or commas between."""
    try:
        values = [int(x) for x in re.split(r"[\s,]+", text.strip())]
    except ValueError:
        raise argparse.ArgumentTypeError(f"loads are whole request counts, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"loads are positive request counts, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--concs", type=loads, required=True, help='the loads the servers took turns at, e.g. "64 128 256"')
    p.add_argument("logs", type=Path, nargs="+", help="SGLang server logs; ratios are to the first")
    args = p.parse_args(argv)
    missing = [str(x) for x in args.logs if not x.is_file()]
    if missing:
        print(f"decode_lines: no such log: {', '.join(missing)}", file=sys.stderr)
        return 2
    print(table(args.logs, args.concs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
