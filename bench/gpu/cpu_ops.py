#!/usr/bin/env python3
"""Where the scheduler thread's CPU time goes, per scheduler span, from SGLang's torch-profiler traces.

    cpu_ops.py TRACE.json.gz [TRACE.json.gz ...] [--top N]
    cpu_ops.py A.json.gz B.json.gz --diff "scheduler.run_batch [EXTEND]" [--top N]

summarize_trace.py (the kit's) says whether a step is CPU- or GPU-bound;
this says which CPU work makes the difference between two traces: for each
``scheduler.*`` span (get_next_batch_to_run, run_batch, process_batch_result)
the mean milliseconds a step, how much of it is inside top-level torch ops
and CUDA runtime calls (the rest is Python between them), and the ops that
take most of it, and a CPU probe (the time per call of a few ops whose
work does not depend on the server: it tells when two traces ran on CPUs of
different speed); each span is split by the kind of step it serves (SGLang's
``step[DECODE bs=256]`` annotation inside run_batch), so that prefill steps
under arrivals are seen apart from decode steps. That is how 0.5.17's per-request ``select`` + ``item`` in
alloc_for_spec_decode showed up in the off step (docs/sglang-plugin.md). Times
are the profiler's, which inflates each op by a few microseconds.

Standard library only.
"""
from __future__ import annotations

import argparse
import bisect
import gzip
import json
import statistics
from collections import defaultdict
from typing import Any

SPANS = ("scheduler.get_next_batch_to_run", "scheduler.run_batch", "scheduler.process_batch_result")
OP_CATS = ("cpu_op", "cuda_runtime")
# Ops whose work does not depend on the model or the server: their time per call measures the CPU
# the scheduler ran on. Two servers started minutes apart on one machine differed by up to 30 %
# in it, which matters wherever the scheduler is CPU-bound (docs/benchmarks.md, "Method").
PROBE_OPS = ("aten::view", "aten::as_strided", "aten::empty", "aten::slice", "cudaLaunchKernel")


def load(path: str) -> list[dict[str, Any]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)["traceEvents"]


def top_level_ops(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ops and runtime calls not nested in another one on the same thread."""
    ops = sorted((e for e in events if e.get("cat") in OP_CATS and e.get("ph") == "X"), key=lambda e: e["ts"])
    top, ends = [], {}
    for e in ops:
        if ends.get(e["tid"], -1.0) >= e["ts"] + e["dur"]:
            continue
        top.append(e)
        ends[e["tid"]] = e["ts"] + e["dur"]
    return top


def within(events: list[dict[str, Any]], starts: list[float], span: dict[str, Any]) -> list[dict[str, Any]]:
    """The events (sorted by start, ``starts`` their start times) that start inside ``span``, on its thread."""
    lo = bisect.bisect_left(starts, span["ts"])
    hi = bisect.bisect_left(starts, span["ts"] + span["dur"])
    return [e for e in events[lo:hi] if e["tid"] == span["tid"]]


def spans_by_name(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The scheduler spans under report names, each with the kind of step it serves: ``NAME [KIND]``.

    KIND is from the first ``step[KIND ...]`` annotation inside a run_batch
    (DECODE, EXTEND, ...). The overlap loop runs get_next_batch_to_run(i),
    run_batch(i), then process_batch_result(i-1), so get_next_batch_to_run
    takes the kind of the run_batch after it and process_batch_result the kind
    of the one before the run_batch it follows: a prefill's CPU cost is seen
    in all three spans, apart from the decode steps'.
    """
    marks = sorted((e for e in events if e.get("cat") == "user_annotation"
                    and e.get("name", "").startswith("step[")), key=lambda e: e["ts"])
    mark_starts = [e["ts"] for e in marks]
    spans = sorted((e for e in events if e.get("cat") == "user_annotation" and e.get("name") in SPANS),
                   key=lambda e: e["ts"])
    runs = [e for e in spans if e["name"] == "scheduler.run_batch"]
    run_starts = [e["ts"] for e in runs]
    kinds = []
    for run in runs:
        inside = within(marks, mark_starts, run)
        kinds.append(inside[0]["name"][5:].split()[0].rstrip("]") if inside else "?")
    named: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in spans:
        if e["name"] == "scheduler.process_batch_result":  # the batch launched before the latest one
            i = bisect.bisect_right(run_starts, e["ts"]) - 2
        else:  # run_batch itself, or get_next_batch_to_run: the run_batch that starts next
            i = bisect.bisect_left(run_starts, e["ts"])
        named[f"{e['name']} [{kinds[i] if 0 <= i < len(runs) else '?'}]"].append(e)
    return named


def op_table(spans: list[dict[str, Any]], ops: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Op name -> (calls a step, µs a step) over the top-level ops inside ``spans``."""
    per_op: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    starts = [e["ts"] for e in ops]
    for s in spans:
        for e in within(ops, starts, s):
            per_op[e["name"]][0] += 1
            per_op[e["name"]][1] += e["dur"]
    n = max(len(spans), 1)
    return {name: (calls / n, us / n) for name, (calls, us) in per_op.items()}


def diff_report(paths: list[str], span: str, top_n: int) -> list[str]:
    """One span of two traces op by op, largest difference first: whether B's extra CPU is extra ops
    (calls a step) or the same ops slower (µs a call): the off server's eager prefill turned out to be the latter."""
    tables, counts = [], []
    for path in paths:
        events = load(path)
        spans = spans_by_name(events).get(span, [])
        tables.append(op_table(spans, top_level_ops(events)))
        counts.append(len(spans))
    a, b = tables
    lines = [f"{span}: {counts[0]} steps in A ({paths[0]}), {counts[1]} in B ({paths[1]})",
             "| op | calls A | calls B | us a step A | us a step B | us a call A | us a call B |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    def gap(name: str) -> float:
        return abs(b.get(name, (0.0, 0.0))[1] - a.get(name, (0.0, 0.0))[1])

    for name in sorted(set(a) | set(b), key=gap, reverse=True)[:top_n]:
        (ca, ua), (cb, ub) = a.get(name, (0.0, 0.0)), b.get(name, (0.0, 0.0))
        lines.append(f"| {name[:60]} | {ca:.1f} | {cb:.1f} | {ua:.0f} | {ub:.0f} | "
                     f"{ua / ca if ca else 0:.1f} | {ub / cb if cb else 0:.1f} |")
    total = [sum(v[1] for v in t.values()) for t in tables]
    calls = [sum(v[0] for v in t.values()) for t in tables]
    lines.append(f"| all top-level ops | {calls[0]:.0f} | {calls[1]:.0f} | {total[0]:.0f} | {total[1]:.0f} | "
                 f"{total[0] / max(calls[0], 1):.1f} | {total[1] / max(calls[1], 1):.1f} |")
    return lines


def span_report(spans: list[dict[str, Any]], ops: list[dict[str, Any]], name: str, top_n: int) -> list[str]:
    per_op = op_table(spans, ops)
    total = sum(s["dur"] for s in spans) / len(spans) / 1000
    in_ops = sum(v[1] for v in per_op.values()) / 1000
    calls = sum(v[0] for v in per_op.values())
    lines = [f"{name}: {total:.3f} ms/step, {in_ops:.3f} ms in {calls:.0f} top-level ops/step "
             f"({total - in_ops:.3f} ms between them)"]
    for op, (count, us) in sorted(per_op.items(), key=lambda kv: -kv[1][1])[:top_n]:
        lines.append(f"  {us / 1000:8.3f} ms {count:7.1f}/step  {op[:90]}")
    return lines


def cpu_probe(events: list[dict[str, Any]]) -> str:
    """Median microseconds per call of PROBE_OPS, over the whole trace."""
    durs: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("name") in PROBE_OPS:
            durs[e["name"]].append(e["dur"])
    parts = [f"{name} {statistics.median(durs[name]):.2f}" for name in PROBE_OPS if durs[name]]
    return "CPU probe (median us per call): " + (", ".join(parts) if parts else "none of the probe ops")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("traces", nargs="+")
    p.add_argument("--top", type=int, default=8, help="ops listed per span")
    p.add_argument("--diff", metavar="SPAN", help='two traces, one span (e.g. "scheduler.run_batch [EXTEND]") '
                   "compared op by op")
    args = p.parse_args(argv)
    if args.diff:
        if len(args.traces) != 2:
            p.error("--diff compares exactly two traces")
        print("\n".join(diff_report(args.traces, args.diff, args.top)))
        return 0
    for path in args.traces:
        events = load(path)
        named, ops = spans_by_name(events), top_level_ops(events)
        print(f"== {path}")
        print(cpu_probe(events))
        for name in SPANS:
            found = sorted(n for n in named if n.split(" [")[0] == name)
            for report_name in found:
                print("\n".join(span_report(named[report_name], ops, report_name, args.top)))
            if not found:
                print(f"{name}: not in this trace")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
