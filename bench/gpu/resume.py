#!/usr/bin/env python3
"""How far the draft's proposals after resuming are from an always-on server's.

Reads draft traces (runtime/sglang_plugin/draft_trace.py: one JSON line per
request per drafting verify, rid "LABEL:INDEX") of greedy runs over the same
prompts (bench/gpu/correctness.py). The reference label never switched off;
every other label started off and resumed. For each request and position
present in both, the proposed draft tokens (not the root, which is the last
verified token) are compared; agreement is grouped by how many drafting
verifies that request had made since resuming. 100 % means the draft saw
the same context as if it had never stopped.

    resume.py REF_LABEL TRACE_FILE... [--labels A B ...]

Standard library only.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from typing import Any

BUCKETS = ((0, 0), (1, 1), (2, 4), (5, 9), (10, 19), (20, 49), (50, 10**9))


def load(paths: list[str]) -> dict[str, dict[int, dict[int, list[int]]]]:
    """label -> prompt index -> length before the verify -> draft tokens after the root."""
    runs: dict[str, dict[int, dict[int, list[int]]]] = defaultdict(lambda: defaultdict(dict))
    for path in paths:
        if not os.path.exists(path):
            print(f"resume.py: no trace file {path}", file=sys.stderr)
            continue
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                label, _, index = str(row.get("rid")).rpartition(":")
                if not label or not index.isdigit():
                    continue
                runs[label][int(index)][int(row["len"])] = list(row["draft"][1:])
    return runs


def agreement(ref: dict[int, dict[int, list[int]]],
              run: dict[int, dict[int, list[int]]]) -> dict[tuple[int, int], list[int]]:
    """(bucket) -> [tokens equal, tokens compared], by drafting verifies since resuming."""
    out: dict[tuple[int, int], list[int]] = {b: [0, 0] for b in BUCKETS}
    for index, verifies in run.items():
        for k, length in enumerate(sorted(verifies)):
            theirs = ref.get(index, {}).get(length)
            if theirs is None:
                continue
            bucket = next(b for b in BUCKETS if b[0] <= k <= b[1])
            mine = verifies[length]
            out[bucket][0] += sum(1 for a, b in zip(mine, theirs) if a == b)
            out[bucket][1] += min(len(mine), len(theirs))
    return out


def table(ref_label: str, runs: dict[str, Any], labels: list[str]) -> str:
    head = "| run | " + " | ".join(f"verifies {a}" + (f"-{b}" if b != a else "") if b < 10**9 else f"{a}+"
                                   for a, b in BUCKETS) + " | all |"
    lines = [head, "|" + " --- |" * (len(BUCKETS) + 2)]
    for label in labels:
        agg = agreement(runs[ref_label], runs[label])
        cells = [f"{100 * eq / n:.1f} % ({n})" if n else "-" for eq, n in agg.values()]
        eq_all, n_all = sum(v[0] for v in agg.values()), sum(v[1] for v in agg.values())
        cells.append(f"{100 * eq_all / n_all:.1f} % ({n_all})" if n_all else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("ref")
    p.add_argument("traces", nargs="+")
    p.add_argument("--labels", nargs="*", help="runs to compare (default: all but the reference)")
    args = p.parse_args(argv)
    runs = load(args.traces)
    if args.ref not in runs:
        print(f"resume.py: no trace lines for {args.ref!r} (labels found: {sorted(runs)})", file=sys.stderr)
        return 2
    labels = args.labels or sorted(k for k in runs if k != args.ref)
    print("Share of draft tokens equal to the always-on run's at the same request and position"
          " (tokens compared in brackets):")
    print(table(args.ref, runs, labels))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
