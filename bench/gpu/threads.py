#!/usr/bin/env python3
"""Which threads of a server's process tree burn the CPU during a load turn, without a profiler.

    threads.py snap FILE.jsonl ROLE C PID [PID ...]   append one snapshot of each PID's process tree
    threads.py table FILE.jsonl                       per role and load: CPU % of each busy thread

Why: with prompts arriving, both servers of offpair are CPU-bound on their
eager prefills, and a profile found every op of the off server 7-31 %
slower (docs/sglang-plugin.md, "Prefill CUDA graphs"). A profiler perturbs exactly that, and cannot
see the other threads: torch's intra-op pool, the tokenizer and
detokenizer processes, anything spinning beside the scheduler on the CPUs
the servers share. offpair takes a snapshot before and after each turn; the
table gives each thread's CPU over the turn (the warm-up and the window) as
a percentage of one CPU, and its involuntary context switches (preemptions)
a second, averaged over the turns of one role at one load, and the CPUs the
thread was on at the snapshots: one server's ops ran 1.1-1.7x slower than
its partner's on the same CPU list (docs/benchmarks.md, "Twelfth
sitting"), and the profile's CPU probe says that, not where.

Uses psutil (SGLang's own dependency) and /proc for thread names.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections import defaultdict
from typing import Any

import psutil

MIN_SHARE = 1.0  # % of one CPU: quieter threads are summed into one "(other threads)" row


def thread_comm(pid: int, tid: int) -> str:
    try:
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def thread_switches(pid: int, tid: int) -> int:
    """Involuntary context switches of one thread: how often it was preempted."""
    try:
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            for line in f:
                if line.startswith("nonvoluntary_ctxt_switches:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def thread_cpu(pid: int, tid: int) -> int | None:
    """The CPU a thread last ran on (field 39 of its /proc stat; the name before it may hold spaces)."""
    try:
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[36])
    except (OSError, IndexError, ValueError):
        return None


def process_title(argv: list[str], name: str) -> str:
    """The command line on one line, without the interpreter's directory, which would eat the 48 characters shown."""
    return " ".join(" ".join([os.path.basename(argv[0]), *argv[1:]]).split())[:48] if argv else name


def process_rows(proc: psutil.Process) -> dict[str, Any]:
    try:
        title = process_title(proc.cmdline(), proc.name())
        threads = [{"tid": t.id, "comm": thread_comm(proc.pid, t.id), "cpu": t.user_time + t.system_time,
                    "preempt": thread_switches(proc.pid, t.id), "on": thread_cpu(proc.pid, t.id)}
                   for t in proc.threads()]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return {"pid": proc.pid, "title": "(gone)", "threads": []}
    return {"pid": proc.pid, "title": title, "threads": threads}


def snapshot(role: str, conc: str, pids: list[int]) -> dict[str, Any]:
    procs = []
    for pid in pids:
        try:
            root = psutil.Process(pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        procs.extend(process_rows(p) for p in tree if p.pid != os.getpid())
    return {"t": time.time(), "role": role, "c": conc, "procs": procs}


def turn_deltas(before: dict[str, Any], after: dict[str, Any]) -> dict[tuple[str, str], tuple[float, float]]:
    """(process title, thread name) -> (CPU % of one CPU, preemptions a second) between two snapshots."""
    wall = max(after["t"] - before["t"], 1e-6)
    old = {(p["pid"], t["tid"]): t for p in before["procs"] for t in p["threads"]}
    sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for p in after["procs"]:
        for t in p["threads"]:
            prev = old.get((p["pid"], t["tid"]), {"cpu": 0.0, "preempt": 0})
            row = sums[(p["title"], t["comm"])]
            row[0] += 100.0 * (t["cpu"] - prev["cpu"]) / wall
            row[1] += (t["preempt"] - prev["preempt"]) / wall
    return {k: (v[0], v[1]) for k, v in sums.items()}


def pair_snapshots(snaps: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict]]:
    """Consecutive snapshots of one role and load are one turn's start and end."""
    turns: dict[tuple[str, str], list[dict]] = defaultdict(list)
    pending: dict[tuple[str, str], dict[str, Any]] = {}
    for s in snaps:
        key = (s["role"], s["c"])
        if key in pending:
            turns[key].append(turn_deltas(pending.pop(key), s))
        else:
            pending[key] = s
    return turns


def cpus_seen(snaps: list[dict[str, Any]]) -> dict[tuple[str, str, str], set[int]]:
    """(role, process title, thread name) -> the CPUs its threads were on at the snapshots."""
    seen: dict[tuple[str, str, str], set[int]] = defaultdict(set)
    for s in snaps:
        for p in s["procs"]:
            for t in p["threads"]:
                if t.get("on") is not None:  # snapshots before 2026-12-03 did not record it
                    seen[(s["role"], p["title"], t["comm"])].add(t["on"])
    return seen


def table(path: str) -> str:
    with open(path) as f:
        snaps = [json.loads(line) for line in f if line.strip()]
    seen = cpus_seen(snaps)
    out = []
    for (role, conc), turns in sorted(pair_snapshots(snaps).items()):
        keys = {k for t in turns for k in t}
        rows = {k: (statistics.mean(t.get(k, (0.0, 0.0))[0] for t in turns),
                    statistics.mean(t.get(k, (0.0, 0.0))[1] for t in turns)) for k in keys}
        busy = sorted((k for k in rows if rows[k][0] >= MIN_SHARE), key=lambda k: -rows[k][0])
        rest = sum(rows[k][0] for k in rows if rows[k][0] < MIN_SHARE)
        out.append(f"== {role} c={conc}: {len(turns)} turns, CPU % of one CPU over each turn, mean")
        out.append("| process | thread | CPU % | preempted /s | on CPUs |")
        out.append("| --- | --- | ---: | ---: | --- |")
        out += [f"| {p} | {t} | {rows[(p, t)][0]:.1f} | {rows[(p, t)][1]:.1f} | "
                f"{' '.join(map(str, sorted(seen.get((role, p, t), ())))) or '-'} |" for p, t in busy]
        out.append(f"| (all) | (other threads) | {rest:.1f} | | |")
        out.append(f"| (all) | total | {sum(r[0] for r in rows.values()):.1f} | | |")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if len(argv) >= 5 and argv[0] == "snap":
        with open(argv[1], "a") as f:
            f.write(json.dumps(snapshot(argv[2], argv[3], [int(p) for p in argv[4:]])) + "\n")
        return 0
    if len(argv) == 2 and argv[0] == "table":
        print(table(argv[1]))
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
