#!/usr/bin/env python3
"""Do two servers' GPU kernels cost the same? Kernel for kernel, from two torch-profiler traces.

    same_kernels.py A.trace.json.gz B.trace.json.gz [--top N] [--min-calls N]

Why: when one server's step takes longer than another's, the GPU side may
differ in work (more tokens, other kernels) or in speed per kernel. Kernels
with the same name, grid and block did the same work on both, so the ratio
of their median durations isolates the speed per kernel (within about 1 %
between a server without speculation and specctl's off state, prefill
included: docs/sglang-plugin.md). Listed by the total time both traces spent in
them; ratio = B / A.

Standard library only.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_ops import load

Key = tuple[str, str, str]


def kernels(path: str) -> dict[Key, list[float]]:
    """Durations (us) of every GPU kernel in the trace, by (name, grid, block)."""
    out: dict[Key, list[float]] = defaultdict(list)
    for e in load(path):
        if e.get("cat") == "kernel" and e.get("ph") == "X":
            args = e.get("args") or {}
            out[(e["name"], str(args.get("grid")), str(args.get("block")))].append(float(e["dur"]))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--min-calls", type=int, default=20, help="in each trace, for a kernel to be compared")
    args = p.parse_args(argv)
    ka, kb = kernels(args.a), kernels(args.b)
    rows = []
    for key in ka.keys() & kb.keys():
        if len(ka[key]) >= args.min_calls and len(kb[key]) >= args.min_calls:
            rows.append((sum(ka[key]) + sum(kb[key]), key))
    rows.sort(reverse=True)
    if not rows:
        print("no kernel launched alike in both traces often enough to compare")
        return 1
    print(f"B / A of the median duration, kernels launched alike (same name, grid, block); A={args.a} B={args.b}")
    ratios = []
    for _, key in rows[: args.top]:
        a, b = statistics.median(ka[key]), statistics.median(kb[key])
        ratios.append(b / a)
        print(f"  {b / a:6.3f}  A {a:9.1f} us x{len(ka[key]):<6d} B {b:9.1f} us x{len(kb[key]):<6d} "
              f"{key[0][:60]} grid={key[1]}")
    print(f"median ratio over these {len(ratios)}: {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
