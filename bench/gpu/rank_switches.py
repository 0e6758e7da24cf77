#!/usr/bin/env python3
"""Did every tensor-parallel rank switch at the same scheduler step? From SGLang's server log.

    rank_switches.py SERVER.log [SERVER.log ...]

Each scheduler process (one per TP rank) runs its own copy of specctl's
policy, and every copy must switch at the same step, or the ranks' batches
differ and their collectives hang. The plugin logs each switch
(``specctl: switch K at step S: speculation on|off (reason), batch B``);
SGLang prefixes a rank's lines with ``TP<rank>`` when there are several.
This compares the ranks' sequences switch by switch and prints the first
disagreement. Exit 0: every rank logged the same switches (at least one);
1: they differ; 2: no switch lines (nothing to compare).

Standard library only.
"""
from __future__ import annotations

import re
import sys
from collections import defaultdict

# "[2026-11-29 16:22:08 TP1] specctl: switch 3 at step 412: speculation off (load), batch 57"
# (choosing among depths the line ends ", depth 3 -> 1": ranks must agree on the depth too)
SWITCH = re.compile(r"^\[[^\]]*?(?: TP(?P<rank>\d+)[^\]]*)?\] specctl: switch (?P<k>\d+) at step (?P<step>\d+): "
                    r"speculation (?P<on>on|off) \((?P<reason>[^)]*)\), batch (?P<batch>[^\s,]+)"
                    r"(?:, depth (?P<from>\d+) -> (?P<to>\d+))?")

Switch = tuple[int, int, str, str]  # (switch number, step, on|off, reason)


def switches(paths: list[str]) -> dict[int, list[Switch]]:
    """rank -> its switches in log order (rank 0 where the lines carry no TP prefix)."""
    by_rank: dict[int, list[Switch]] = defaultdict(list)
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                m = SWITCH.match(line)
                if m:
                    on = m["on"] if m["to"] is None else f"{m['on']} at depth {m['to']}"
                    by_rank[int(m["rank"] or 0)].append((int(m["k"]), int(m["step"]), on, m["reason"]))
    return dict(by_rank)


def first_difference(by_rank: dict[int, list[Switch]]) -> str | None:
    """Where the ranks first disagree, in words; None when every rank has the same sequence."""
    ranks = sorted(by_rank)
    ref = by_rank[ranks[0]]
    for rank in ranks[1:]:
        other = by_rank[rank]
        for i, (a, b) in enumerate(zip(ref, other)):
            if a != b:
                return (f"switch {i + 1}: TP{ranks[0]} at step {a[1]} ({a[2]}, {a[3]}), "
                        f"TP{rank} at step {b[1]} ({b[2]}, {b[3]})")
        if len(ref) != len(other):
            return f"TP{ranks[0]} logged {len(ref)} switches, TP{rank} {len(other)}"
    return None


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    by_rank = switches(argv)
    if not by_rank:
        print("no specctl switch lines in the log (was the plugin on, and did the policy switch?)")
        return 2
    for rank in sorted(by_rank):
        seq = by_rank[rank]
        print(f"TP{rank}: {len(seq)} switches, steps {seq[0][1]}..{seq[-1][1]}")
    diff = first_difference(by_rank)
    if diff:
        print(f"ranks DISAGREE: {diff}")
        return 1
    print(f"every rank ({len(by_rank)}) switched at the same steps, {len(by_rank[min(by_rank)])} switches")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
