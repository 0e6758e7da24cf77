#!/usr/bin/env python3
"""Closed-loop load that never stops, with the server's mode switched between windows.

Why: single 8 s windows, each after its own ramp-up, scattered by +-8 % on
the GPU, more than the 5 % the off state is held to (docs/benchmarks.md). Here the load keeps
running across windows and concurrencies
rise in place (new clients join the running ones), so every window measures a
desynchronised steady state; the modes of one concurrency take turns
(on, off, auto, on, off, auto, ...), so a slow drift of the machine lands on
every mode alike instead of on whichever ran last.

    interleave.py --url URL --concs 1 4 16 --modes on off auto --rounds 2 \
        --switch "specctl {verb} --socket /tmp/s.sock" --label specctl-triton --csv out.csv

--rotate changes the modes' order each round and each concurrency
(on off auto, then off auto on, ...; a Williams design, turn_order), so that
no mode always takes the first window after the load grows, nor always
follows the same mode. --modes '-' measures without switching
(a server without specctl). The
switch command gets {mode} and, for on/off/auto, {verb} (force-on/force-off/
auto, the specctl CLI verb); other mode names are passed through as they are.
Per window: output tok/s from SGLang's decode-token counter
(sglang:realtime_tokens_total{mode="decode"}), and the means of the
running-requests, accept-length and spec-steps gauges sampled every 0.5 s
(SGLang 0.5.17 refreshes its gauges every 40 decode batches, so a window's
first samples may still show the previous mode; the token counter is bumped
every batch, and specctl's steps gauge, preferred where there, at every switch).
TPOT is Little's law over the window, running requests / tok/s:
the time per output token a request saw on average, prefill included.
cpu_busy / cpu_steal: the share of the --cpus' time that ran something, and
that the host of a virtual machine took away, over the window (/proc/stat).

Needs the standard library plus aiohttp or httpx (bench_spec.py's client).
"""
from __future__ import annotations

import argparse
import asyncio
import csv
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_spec import Http, scrape

DECODE = "sglang:realtime_tokens_total:decode"
# Each gauge's names, the first one a server exports wins. The steps: specctl's plugin sets its
# gauge at every switch, SGLang 0.5.17 refreshes its own every 40 decode batches (2.4-3 s at 256
# requests, most of a window: the fourth sitting's pinned windows read 1.12 for depth 1 there),
# so specctl's comes first, and SGLang's serves a server without the plugin.
GAUGES = {"running": ("sglang:num_running_reqs",), "accept_len": ("sglang:spec_accept_length",),
          "steps": ("specctl:spec_steps", "sglang:spec_num_steps")}
VERBS = {"on": "force-on", "off": "force-off", "auto": "auto"}
FIELDS = ["label", "concurrency", "mode", "round", "window_s", "tok_s", "tpot_ms", "running",
          "accept_len", "steps", "reqs_done", "errors", "switch_rc", "t_unix", "cpu_busy", "cpu_steal"]


class Load:
    """c closed-loop clients over one session; more join when c rises."""

    def __init__(self, http: Http, args: argparse.Namespace) -> None:
        self.http, self.args = http, args
        self.rng = random.Random(args.seed)
        self.tasks: list[asyncio.Task[None]] = []
        self.stop = asyncio.Event()
        self.done: list[float] = []  # finish times of requests that completed
        self.errors = 0
        self.last_error = ""

    def grow_to(self, c: int) -> None:
        while len(self.tasks) < c:
            self.tasks.append(asyncio.create_task(self._client()))

    def _payload(self) -> dict[str, Any]:
        a, j = self.args, self.args.len_jitter
        ilen = max(1, round(a.input_len * self.rng.uniform(1 - j, 1 + j)))
        olen = max(1, round(a.output_len * self.rng.uniform(1 - j, 1 + j)))
        return {"input_ids": [self.rng.randrange(10, a.vocab) for _ in range(ilen)],
                "sampling_params": {"max_new_tokens": olen, "temperature": 0.0, "ignore_eos": True},
                "stream": False}

    async def _post(self) -> tuple[int, Any] | None:
        """One request; None where it did not get through (said, after a pause), as when the load stops."""
        try:
            return await self.http.post_json("/generate", self._payload())
        except Exception as exc:  # connection reset by the final abort, etc.
            if not self.stop.is_set():
                self._error(repr(exc))
                await asyncio.sleep(0.5)
            return None

    async def _client(self) -> None:
        while not self.stop.is_set():
            if (reply := await self._post()) is None:
                continue
            status, body = reply
            if status != 200:
                if not self.stop.is_set():
                    self._error(f"HTTP {status}: {body[:200]!r}")
                    await asyncio.sleep(0.5)
                continue
            self.done.append(time.perf_counter())

    def _error(self, text: str) -> None:
        self.errors += 1
        self.last_error = text[:200]

    async def close(self) -> None:
        self.stop.set()
        try:
            await self.http.post_json("/abort_request", {"abort_all": True})
        except Exception:
            pass
        _, pending = await asyncio.wait(self.tasks, timeout=30) if self.tasks else (set(), set())
        for task in pending:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def switch(template: str, mode: str, timeout: float) -> int:
    """Run the switch command for ``mode``; its exit status (124 on timeout)."""
    cmd = template.format(mode=mode, verb=VERBS.get(mode, mode))
    proc = await asyncio.create_subprocess_shell(cmd, stdout=asyncio.subprocess.PIPE,
                                                 stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        print(f"[interleave] switch to {mode} timed out: {cmd}", flush=True)
        return 124
    if proc.returncode:
        print(f"[interleave] switch to {mode} failed ({proc.returncode}): {out.decode()[:300]}", flush=True)
    return proc.returncode or 0


def parse_cpus(text: str) -> set[int]:
    """A taskset-style CPU list ("0-11,14") as a set; empty text = every CPU."""
    cpus: set[int] = set()
    for part in filter(None, text.replace(" ", "").split(",")):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def cpu_ticks(cpus: set[int]) -> tuple[int, int, int] | None:
    """(total, idle + iowait, steal) jiffies summed over ``cpus`` (all if empty) from /proc/stat; None off Linux.

    Why: the device is a virtual machine whose scheduler CPUs ran at speeds
    differing by up to 2x between profiles (cpu_ops.py's CPU probe, the same cores);
    steal time is the host taking those CPUs away, busy time what ran on them.
    """
    try:
        lines = Path("/proc/stat").read_text().splitlines()
    except OSError:
        return None
    total = idle = steal = 0
    for line in lines:
        name, *vals = line.split()
        if not (name.startswith("cpu") and name[3:].isdigit()) or (cpus and int(name[3:]) not in cpus):
            continue
        ticks = [int(v) for v in vals[:8]] + [0] * (8 - len(vals[:8]))
        total += sum(ticks)
        idle += ticks[3] + ticks[4]
        steal += ticks[7]
    return (total, idle, steal) if total else None


def cpu_shares(before: tuple[int, int, int] | None, after: tuple[int, int, int] | None) -> dict[str, Any]:
    """cpu_busy and cpu_steal in per cent of the CPUs' time between two cpu_ticks readings."""
    if before is None or after is None or after[0] <= before[0]:
        return {}
    total = after[0] - before[0]
    return {"cpu_busy": round(100.0 * (total - (after[1] - before[1])) / total, 1),
            "cpu_steal": round(100.0 * (after[2] - before[2]) / total, 1)}


async def window(http: Http, load: Load, seconds: float, cpus: set[int] | None = None) -> dict[str, Any]:
    """Measure one window: decode tok/s from the counter, gauge means from 0.5 s samples, CPU shares."""
    ticks0 = cpu_ticks(cpus or set())
    m0, t0 = await scrape(http), time.perf_counter()
    errors0 = load.errors
    samples: list[dict[str, float]] = []
    end = t0 + seconds
    while (now := time.perf_counter()) < end:
        await asyncio.sleep(min(0.5, end - now))
        m = await scrape(http)
        if m is not None:
            samples.append(m)
    m1, t1 = await scrape(http), time.perf_counter()
    row: dict[str, Any] = {"window_s": round(t1 - t0, 2), "errors": load.errors - errors0,
                           "reqs_done": sum(1 for t in load.done if t0 <= t <= t1)}
    if m0 and m1 and DECODE in m1:
        row["tok_s"] = round((m1[DECODE] - m0.get(DECODE, 0.0)) / (t1 - t0), 1)
    for col in GAUGES:
        row[col] = gauge_mean(samples, col)
    if row.get("tok_s") and row["running"]:
        row["tpot_ms"] = round(1000.0 * row["running"] / row["tok_s"], 2)
    row.update(cpu_shares(ticks0, cpu_ticks(cpus or set())))
    return row


def gauge_mean(samples: list[dict[str, float]], col: str) -> float | str:
    """The mean of GAUGES[col] over the samples, under the first of its names any sample has ('' if none)."""
    names = GAUGES[col]
    name = next((n for n in names if any(n in m for m in samples)), names[0])
    values = [m[name] for m in samples if name in m]
    return round(statistics.fmean(values), 3) if values else ""


def emit(row: dict[str, Any], path: str) -> None:
    shown = [k for k in FIELDS if k not in ("errors", "switch_rc", "t_unix")]
    print("[interleave] " + " ".join(f"{k}={row.get(k, '')}" for k in shown), flush=True)
    append_csv(path, row, FIELDS)


def append_csv(path: str, row: dict[str, Any], fields: list[str]) -> None:
    """One row onto ``path`` (nothing where it is empty), the header first where the file is new or empty.

    Appending lets several device calls write one CSV, which report.py and trace_load.py --table read whole.
    """
    if not path:
        return
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow(row)


def summary(rows: list[dict[str, Any]]) -> None:
    """Mean tok/s per (c, mode) over the rounds, with the spread between rounds."""
    print("[interleave] summary: c mode mean_tok_s (min..max over rounds) tpot_ms steps", flush=True)
    keys = sorted({(r["concurrency"], r["mode"]) for r in rows}, key=lambda k: (k[0], k[1]))
    for c, mode in keys:
        sel = [r for r in rows if (r["concurrency"], r["mode"]) == (c, mode) and r.get("tok_s")]
        if not sel:
            continue
        toks = [r["tok_s"] for r in sel]
        tpots = [r["tpot_ms"] for r in sel if r.get("tpot_ms")]
        steps = [r["steps"] for r in sel if r.get("steps") != ""]
        print(f"[interleave]   c={c} {mode}: {statistics.fmean(toks):.1f} ({min(toks):.1f}..{max(toks):.1f}) "
              f"tpot {statistics.fmean(tpots) if tpots else float('nan'):.2f} "
              f"steps {statistics.fmean(steps) if steps else float('nan'):.2f}", flush=True)


def turn_order(modes: list[str], shift: int) -> list[str]:
    """The modes of one round: row ``shift`` of a Williams design.

    Why not a plain rotation: it keeps the cyclic order, so each mode always
    follows the same one (2026-12-02: auto always right after off), and
    whatever one window leaves the next lands on one pair. Here, over the
    design's rows (n for an even number of modes, 2n for an odd, the second n
    the first reversed), every mode takes the first window equally often and
    follows every other mode equally often. With two or three modes the first
    n rows are the rotation's.
    """
    n = len(modes)
    if not n:
        return ["-"]
    base, lo, hi = [0], 1, n - 1
    while lo <= hi:  # 0, 1, n-1, 2, n-2, ...
        base.append(lo)
        lo += 1
        if lo <= hi:
            base.append(hi)
            hi -= 1
    k = shift % (n if n % 2 == 0 else 2 * n)
    row = [modes[(b + k) % n] for b in base]
    return row[::-1] if k >= n else row


def settle_s(mode: str, args: argparse.Namespace) -> float:
    """Seconds after switching to ``mode`` that no window measures.

    Auto gets its own: after a forced-off window it resumes with an empty acceptance
    window (64 verifies), which on a slow server outlasts a short settle, so its
    window would show the resume rather than the state it settles in (a MoE at 128
    requests verifies about 7 times a second). Every mode but on and off is an auto
    (calib_switch.sh's ``row``: auto with the thresholds row alone), so each gets it.
    """
    if mode == "-":
        return 0.0
    if mode not in ("on", "off") and args.auto_settle is not None:
        return args.auto_settle
    return args.settle


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    modes = [] if args.modes == ["-"] else args.modes
    deadline = time.perf_counter() + args.budget_s
    cpus = parse_cpus(args.cpus)
    async with Http(args.url, max(args.concs) + 8) as http:
        load = Load(http, args)
        try:
            for ci, c in enumerate(args.concs):
                need = args.warmup + args.rounds * sum(args.window + settle_s(m, args) + 0.5 for m in modes or ["-"])
                if time.perf_counter() + need > deadline:
                    print(f"[interleave] skip c={c} and above: budget", flush=True)
                    break
                load.grow_to(c)
                await asyncio.sleep(args.warmup)
                for rnd in range(args.rounds):
                    for mode in turn_order(modes, ci + rnd if args.rotate else 0):
                        rc = await switch(args.switch, mode, 30.0) if mode != "-" else ""
                        await asyncio.sleep(settle_s(mode, args))
                        row = await window(http, load, args.window, cpus)
                        row.update(label=args.label, concurrency=c, mode=mode, round=rnd,
                                   switch_rc=rc, t_unix=round(time.time(), 1))
                        emit(row, args.csv)
                        rows.append(row)
        finally:
            await load.close()
        if load.errors:
            print(f"[interleave] {load.errors} request errors, last: {load.last_error}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:30000")
    p.add_argument("--concs", type=int, nargs="+", default=[1, 4, 16, 32, 64, 128, 256])
    p.add_argument("--modes", nargs="+", default=["-"], help="e.g. on off auto, or - (no switching)")
    p.add_argument("--switch", default="", help="shell command; {mode} and {verb} are filled in")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--rotate", action="store_true",
                   help="change the modes' order each round and each concurrency (a Williams design)")
    p.add_argument("--window", type=float, default=5.0)
    p.add_argument("--settle", type=float, default=1.0, help="seconds after a switch, not measured")
    p.add_argument("--auto-settle", type=float, default=None,
                   help="seconds after a switch to auto, not measured (default: --settle); long enough for "
                        "auto's acceptance window to fill after a resume on a slow server")
    p.add_argument("--warmup", type=float, default=6.0, help="seconds after the load grows, not measured")
    p.add_argument("--input-len", type=int, default=512)
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--len-jitter", type=float, default=0.5)
    p.add_argument("--vocab", type=int, default=128000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--budget-s", type=float, default=1e9, help="skip concurrencies that would not fit")
    p.add_argument("--cpus", default="",
                   help="CPU list for cpu_busy / cpu_steal (the server's, e.g. 0-11); default all")
    p.add_argument("--label", default="")
    p.add_argument("--csv", default="")
    args = p.parse_args(argv)
    try:
        parse_cpus(args.cpus)
    except ValueError:
        p.error(f"--cpus takes a CPU list such as 0-11,14 (got {args.cpus!r})")
    if args.modes != ["-"] and ("-" in args.modes or not args.switch):
        p.error(f"modes other than '-' need --switch, and '-' goes alone (got {args.modes})")
    rows = asyncio.run(run(args))
    summary(rows)
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
