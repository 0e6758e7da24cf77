#!/usr/bin/env python3
"""The changing-load trace of issue 22 against a running server, once per configuration.

Why: the goal "the whole trace's output tok/s >= 1.05 x the best single static
configuration, p50 TPOT no worse" is met or missed on a load whose
concurrency changes every 10-20 s; the simulator runs it offline
(bench/policy_envelope.py's run_trace), and this runs the same schedule on a
live server so that the two compare.

    trace_load.py --url URL --configs d1 d2 d3 off auto --switch "bash depth.sh {mode}" \
        --trace-s 120 --trace-seed 0 --prompt-seed 100 --label depthtrace-triton --csv trace.csv
    trace_load.py --url URL --configs none --prompt-seed 100 ...   (a server without speculation)
    trace_load.py --table trace.csv [more.csv] [--label L]          (the table of CSVs' summary rows; a trace
                                                                       a file, and the mean over several)
    trace_load.py --plan --trace-s 120                              (the schedule and its length)

The schedule is trace_schedule.trace_levels(trace_seed, trace_s): the first
phases of the simulator's 600 s trace with the same seed, each 10-20 s
(--time-scale shrinks every phase alike, for tests only). A configuration
starts from an empty server, runs closed-loop clients whose number follows
each phase's level (a client leaves when its request ends while there are more
than the level, as in run_trace), then aborts what is still running. Requests
are interleave.py's: fresh random token ids, IL lengths +-jitter, greedy,
ignore_eos. Each configuration draws its prompts from its own seed (prompt
seed + its position in --configs): SGLang's radix cache would otherwise serve a
later configuration's prefills and flatter it by 10-25 %.

The configurations run in the order interleave.py's turn_order gives for
--order-shift (run_fast_off.sh passes the trace seed; below the number of
configurations, --configs rotated left by it): no configuration is always the first
trace after the server started, nor always the last as the machine drifts; two
seeds give two orders.

Measured per configuration (and per phase): output tok/s as SGLang's decode
token counter's delta over the wall time (what interleave.py reads; the
simulator's run_trace divides its decode tokens by its clock the same way), and
the completion tokens of requests that finished / wall time; TPOT per request
as run_trace defines it: the non-streamed latency (sent to answered, queueing
and prefill included) over its completion tokens, p50 over the requests that
finished; the depth (mean of the steps gauge), the share of samples with
speculation on, running requests and accept length, sampled every 0.5 s.
The specctl configurations are switched by --switch ({mode} and {verb} filled
in, interleave.py's switch); 'none' is never switched (a server without
speculation).
"""
from __future__ import annotations

import argparse
import asyncio
import csv
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_spec import Http, scrape
from interleave import DECODE, Load, append_csv, gauge_mean, switch, turn_order
from trace_schedule import TRACE_LEVELS, trace_levels

SWITCHES = "specctl:spec_switches_total"  # the plugin's gauge and the simulator's counter, by one name
ON = "specctl:spec_on"
STATIC_GOAL, TPOT_GOAL = 1.05, 1.0
FIELDS = ["label", "config", "phase", "until_s", "level", "wall_s", "tok_s", "completion_tok_s", "tpot_p50_ms",
          "reqs_done", "running", "steps", "on_share", "accept_len", "switches", "errors", "prompt_seed",
          "trace_seed", "prompt_sha", "switch_rc", "t_unix"]
SUMMARY = "all"  # the phase column of a configuration's summary row


def schedule(seed: int, trace_s: float, scale: float = 1.0,
             levels: tuple[int, ...] = TRACE_LEVELS) -> list[tuple[float, int]]:
    """trace_levels(seed) up to ``trace_s``, every phase ``scale`` times as long."""
    return [(until * scale, level) for until, level in trace_levels(seed, trace_s / scale, levels)]


class TraceLoad(Load):
    """interleave.py's closed-loop clients, whose number follows a level that also falls."""

    def __init__(self, http: Http, args: argparse.Namespace, seed: int, prompts_log: Any = None) -> None:
        super().__init__(http, argparse.Namespace(**{**vars(args), "seed": seed}))
        self.target = self.active = 0
        self.finished: list[tuple[float, float, int]] = []  # (sent, answered, completion tokens)
        self.sha = hashlib.sha1()
        self.prompts_log = prompts_log

    def set_level(self, level: int) -> None:
        """Clients join at once; surplus ones leave as their requests end (run_trace's rule)."""
        self.target = level
        while self.active < level:
            self.active += 1
            self.tasks.append(asyncio.create_task(self._client()))

    def _payload(self) -> dict[str, Any]:
        payload = super()._payload()
        ids = json.dumps(payload["input_ids"]).encode()
        self.sha.update(ids)
        if self.prompts_log is not None:
            self.prompts_log.write(hashlib.sha1(ids).hexdigest() + "\n")
        return payload

    async def _client(self) -> None:
        while not self.stop.is_set():
            if self.active > self.target:
                self.active -= 1
                return
            sent = time.perf_counter()
            if (reply := await self._post()) is None:
                continue
            status, body = reply
            if self.stop.is_set():
                return
            tokens = completion_tokens(body) if status == 200 else None
            if tokens is None:
                self._error(f"HTTP {status}: {body[:200]!r}")
                await asyncio.sleep(0.5)
                continue
            now = time.perf_counter()
            self.finished.append((sent, now, tokens))
            self.done.append(now)


def completion_tokens(body: bytes) -> int | None:
    """A finished answer's completion tokens; None for an aborted or unreadable one."""
    try:
        meta = json.loads(body)["meta_info"]
        if (meta.get("finish_reason") or {}).get("type") == "abort":
            return None
        return int(meta["completion_tokens"])
    except (ValueError, KeyError, TypeError):
        return None


def gauge_means(samples: list[dict[str, float]]) -> dict[str, Any]:
    """Means of the running, accept-length and steps gauges, and the share of samples with speculation on."""
    row: dict[str, Any] = {}
    for col in ("running", "accept_len", "steps"):
        row[col] = gauge_mean(samples, col)
    on = [m[ON] for m in samples if ON in m]
    row["on_share"] = round(statistics.fmean(on), 3) if on else ""
    return row


def measures(load: TraceLoad, m0: dict[str, float] | None, m1: dict[str, float] | None,
             t0: float, t1: float) -> dict[str, Any]:
    """tok/s (counter, completions), p50 TPOT and switches between two scrapes."""
    wall = max(t1 - t0, 1e-9)
    ended = [(sent, done, n) for sent, done, n in load.finished if t0 < done <= t1]
    tpots = [(done - sent) / n for sent, done, n in ended if n > 0]
    row: dict[str, Any] = {"wall_s": round(wall, 2), "reqs_done": len(ended),
                           "completion_tok_s": round(sum(n for *_, n in ended) / wall, 1),
                           "tpot_p50_ms": round(1e3 * statistics.median(tpots), 2) if tpots else ""}
    if m0 and m1 and DECODE in m1:
        row["tok_s"] = round((m1[DECODE] - m0.get(DECODE, 0.0)) / wall, 1)
    if m0 and m1 and SWITCHES in m1:
        row["switches"] = round(m1[SWITCHES] - m0.get(SWITCHES, 0.0))
    return row


async def sample_until(http: Http, end: float, samples: list[dict[str, float]]) -> None:
    while (now := time.perf_counter()) < end:
        await asyncio.sleep(min(0.5, end - now))
        m = await scrape(http)
        if m is not None:
            samples.append(m)


async def run_config(http: Http, args: argparse.Namespace, name: str, seed: int,
                     phases: list[tuple[float, int]], prompts_log: Any) -> list[dict[str, Any]]:
    """One configuration over the whole schedule: a row per phase, then its summary row."""
    rc: Any = ""
    if name != "none" and args.switch:
        rc = await switch(args.switch, name, 30.0)
        await asyncio.sleep(args.settle)
    common = {"label": args.label, "config": name, "prompt_seed": seed, "trace_seed": args.trace_seed,
              "switch_rc": rc}
    load = TraceLoad(http, args, seed, prompts_log)
    rows: list[dict[str, Any]] = []
    everything: list[dict[str, float]] = []
    start = await scrape(http)
    t0 = time.perf_counter()
    m0, p0, errors0 = start, t0, 0
    try:
        for i, (until, level) in enumerate(phases):
            load.set_level(level)
            samples: list[dict[str, float]] = []
            await sample_until(http, t0 + until, samples)
            m1, p1 = await scrape(http), time.perf_counter()
            row = {**common, "phase": i, "until_s": round(until, 2), "level": level, **gauge_means(samples),
                   **measures(load, m0, m1, p0, p1), "errors": load.errors - errors0}
            emit(row, args.csv)
            rows.append(row)
            everything += samples
            m0, p0, errors0 = m1, p1, load.errors
    finally:
        end = await scrape(http), time.perf_counter()
        await load.close()
    summary = {**common, "phase": SUMMARY, "until_s": round(phases[-1][0], 2), "level": "",
               **gauge_means(everything), **measures(load, start, end[0], t0, end[1]), "errors": load.errors,
               "prompt_sha": load.sha.hexdigest()[:12], "t_unix": round(time.time(), 1)}
    emit(summary, args.csv)
    if load.errors:
        print(f"[trace] {name}: {load.errors} request errors, last: {load.last_error}", flush=True)
    return [*rows, summary]


def emit(row: dict[str, Any], path: str) -> None:
    shown = ["config", "phase", "level", "tok_s", "completion_tok_s", "tpot_p50_ms", "reqs_done", "steps",
             "on_share", "switches", "errors"]
    print("[trace] " + " ".join(f"{k}={row.get(k, '')}" for k in shown), flush=True)
    append_csv(path, row, FIELDS)


def number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def tok_s(row: dict[str, Any]) -> float:
    """The counter's tok/s, else the completions' (a server without the counter)."""
    return number(row.get("tok_s")) or number(row.get("completion_tok_s")) or 0.0


def split_repeats(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """One file's rows split where a configuration's summary row comes again (its phase rows go with it)."""
    groups: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    seen: set[str] = set()
    for row in rows:
        pending.append(row)
        if str(row.get("phase")) != SUMMARY:
            continue
        if (name := str(row["config"])) in seen:
            groups.append(current)
            current, seen = [], set()
        current += pending
        pending = []
        seen.add(name)
    if current or pending:
        groups.append(current + pending)
    return groups


def traces(files: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    """The CSVs' rows as traces: one a file, and a file that measured none of the last trace's
    configurations joins it (a trace split over device calls, as depthtrace's FA3 commands split it).

    A configuration measured twice (a second seed, a second sitting) is thus in
    two traces, each with its own best static, never one row standing for both.
    """
    groups: list[list[dict[str, Any]]] = []
    for rows in files:
        for i, part in enumerate(split_repeats(rows)):
            if i == 0 and groups and not set(summaries(part)) & set(summaries(groups[-1])):
                groups[-1] = groups[-1] + part
            else:
                groups.append(part)
    return groups


def render_tables(files: list[list[dict[str, Any]]]) -> str:
    """One table a trace, and where there are several, auto / best static over them (each its own best)."""
    groups = traces(files)
    if len(groups) == 1:
        return render_table(groups[0])
    ratios = [r for g in groups if (r := auto_over_best(g)) is not None]
    out = [f"## trace {i} of {len(groups)}\n\n{render_table(g)}" for i, g in enumerate(groups, 1)]
    if ratios:
        tok = [t for _, t, _ in ratios]
        tpot = [p for _, _, p in ratios if p is not None]
        out.append(f"over the {len(ratios)} traces with auto and a static: auto / each trace's best single static, "
                   f"tok/s mean {statistics.fmean(tok):.3f} ({', '.join(f'{t:.3f}' for t in tok)}; goal >= "
                   f"{STATIC_GOAL})" + (f", p50 TPOT mean {statistics.fmean(tpot):.3f}" if tpot else ""))
    return "\n\n".join(out)


def summaries(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each configuration's whole-trace row (its last, within one trace there is one)."""
    return {str(r["config"]): r for r in rows if str(r.get("phase")) == SUMMARY}


def failed_of(last: dict[str, dict[str, Any]]) -> set[str]:
    """The configurations whose switch the server refused: they ran in whatever mode it was left in."""
    return {n for n, r in last.items() if str(r.get("switch_rc", "")) not in ("", "0")}


def statics_of(last: dict[str, dict[str, Any]]) -> list[str]:
    """The static configurations that ran as named and measured something."""
    failed = failed_of(last)
    return [n for n in last if n != "auto" and n not in failed and tok_s(last[n]) > 0]


def best_static(last: dict[str, dict[str, Any]]) -> str | None:
    """The static configuration with the highest tok/s; None without one, or where auto's switch failed."""
    statics = statics_of(last)
    return max(statics, key=lambda n: tok_s(last[n])) if statics and "auto" not in failed_of(last) else None


def auto_over_best(rows: list[dict[str, Any]]) -> tuple[str, float, float | None] | None:
    """(the best static, auto / it in tok/s, in p50 TPOT) of one trace; None without auto or a static."""
    last = summaries(rows)
    best = best_static(last)
    if "auto" not in last or best is None:
        return None
    ta, tb = number(last["auto"].get("tpot_p50_ms")), number(last[best].get("tpot_p50_ms"))
    return best, tok_s(last["auto"]) / tok_s(last[best]), (ta / tb if ta and tb else None)


def render_table(rows: list[dict[str, Any]]) -> str:
    """Each configuration's whole-trace numbers, and auto against the best static (the goals)."""
    last = summaries(rows)
    if not last:
        return "[trace] no summary rows"
    phases = phases_of(rows, next(iter(last)))
    some = next(iter(last.values()))
    lines = [f"trace: {len(phases)} phases, {number(some['until_s']) or 0:g} s, trace seed {some['trace_seed']}, "
             f"label {some['label']}",
             "(tok/s: SGLang's decode counter / wall; TPOT: a request's latency over its output tokens, queueing "
             "and prefill included, as the simulator's run_trace)",
             "| configuration | output tok/s | completion tok/s | p50 TPOT ms | requests | switches | mean depth | "
             "on share | prompt seed |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    failed = failed_of(last)
    for name, r in last.items():
        shown = f"{name} (SWITCH FAILED, rc {r['switch_rc']})" if name in failed else name
        lines.append(f"| {shown} | {r.get('tok_s', '')} | {r.get('completion_tok_s', '')} | {r.get('tpot_p50_ms', '')} "
                     f"| {r.get('reqs_done', '')} | {r.get('switches', '')} | {r.get('steps', '')} | "
                     f"{r.get('on_share', '')} | {r.get('prompt_seed', '')} |")
    if "auto" in failed:
        lines.append("auto's switch failed: it ran in whatever mode the server was left in; no ratio")
        return "\n".join(lines)
    if (found := auto_over_best(rows)) is None:
        lines.append("auto / best static: needs auto and at least one static configuration")
        return "\n".join(lines)
    best, ratio, tpot = found
    lines.append(f"auto / best single static ({best}, of {', '.join(statics_of(last))}): tok/s {ratio:.3f} "
                 f"(goal >= {STATIC_GOAL}: {'met' if ratio >= STATIC_GOAL else 'MISSED'}), p50 TPOT "
                 f"{'n/a' if tpot is None else f'{tpot:.3f}'} "
                 f"(goal <= {TPOT_GOAL:g}: {'met' if tpot is not None and tpot <= TPOT_GOAL else 'MISSED'})")
    auto_phases = phases_of(rows, "auto")
    if auto_phases:
        lines.append("auto's depth per phase (level: mean steps): " + ", ".join(
            f"{r['level']}: {r.get('steps', '')}" for r in auto_phases))
    if noise := same_state(rows, best):
        lines.append(noise)
    return "\n".join(lines)


def phases_of(rows: list[dict[str, Any]], config: str) -> list[dict[str, Any]]:
    """A configuration's per-phase rows in one trace (traces() keeps each trace's apart)."""
    return [r for r in rows if str(r.get("config")) == config and str(r.get("phase")) != SUMMARY]


def same_state(rows: list[dict[str, Any]], static: str) -> str:
    """The phases where auto ran ``static``'s own state throughout, and auto / static in each.

    Why: the two ran the same state there, so the ratio is what two traces of
    one configuration read apart, the noise the whole-trace ratio carries (the
    GPU's first trace: 0.925 and 0.970 with both off, against a 1.051 goal
    reading).
    """
    pairs = []
    for a, s in zip(phases_of(rows, "auto"), phases_of(rows, static)):
        da, ds, moved = number(a.get("steps")), number(s.get("steps")), number(a.get("switches"))
        if da is None or ds is None or abs(da - ds) > 0.05 or moved or not tok_s(s):
            continue
        pairs.append(f"{a['level']}: {tok_s(a) / tok_s(s):.3f}")
    if not pairs:
        return ""
    return (f"phases where auto ran {static}'s own state throughout (level: auto / {static}; the traces' noise, "
            "not a choice): " + ", ".join(pairs))


def read_rows(path: str, label: str) -> list[dict[str, Any]]:
    with open(path, newline="") as fh:
        return [r for r in csv.DictReader(fh) if not label or r.get("label") == label]


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    phases = schedule(args.trace_seed, args.trace_s, args.time_scale, args.levels)
    length = phases[-1][0] + args.settle + 2.0
    deadline = time.perf_counter() + args.budget_s
    rows: list[dict[str, Any]] = []
    prompts_log = open(args.prompts_log, "a") if args.prompts_log else None
    try:
        async with Http(args.url, max(level for _, level in phases) + 8) as http:
            for name in turn_order(args.configs, args.order_shift):
                if time.perf_counter() + length > deadline:
                    print(f"[trace] skip {name}: budget ({length:.0f} s a configuration)", flush=True)
                    continue
                if prompts_log is not None:
                    prompts_log.write(f"# {name}\n")
                seed = args.prompt_seed + args.configs.index(name)
                rows += await run_config(http, args, name, seed, phases, prompts_log)
    finally:
        if prompts_log is not None:
            prompts_log.close()
    return rows


def levels_list(text: str) -> tuple[int, ...]:
    levels = tuple(int(part) for part in text.split(",") if part.strip())
    if not levels or min(levels) < 1:
        raise ValueError(text)
    return levels


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:30000")
    p.add_argument("--configs", nargs="+", default=["none"],
                   help="switch modes in order (e.g. d1 d2 d3 off auto), or none (no switching)")
    p.add_argument("--switch", default="", help="shell command; {mode} and {verb} are filled in")
    p.add_argument("--settle", type=float, default=1.0, help="seconds after a switch, the server empty")
    p.add_argument("--trace-s", type=float, default=120.0, help="the trace's length (phases of 10-20 s each)")
    p.add_argument("--trace-seed", type=int, default=0, help="the schedule's seed (the simulator's run_trace: 0)")
    p.add_argument("--time-scale", type=float, default=1.0, help="every phase this many times as long (tests)")
    p.add_argument("--levels", type=levels_list, default=TRACE_LEVELS, metavar="1,4,...",
                   help="the concurrencies a phase draws from (default the simulator's)")
    p.add_argument("--prompt-seed", type=int, default=0,
                   help="the first configuration's prompt seed; the k-th in --configs uses this + k")
    p.add_argument("--order-shift", type=int, default=0,
                   help="the row of interleave.py's turn_order (below the number of --configs: rotated left by it)")
    p.add_argument("--input-len", type=int, default=512)
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--len-jitter", type=float, default=0.5)
    p.add_argument("--vocab", type=int, default=128000)
    p.add_argument("--budget-s", type=float, default=1e9, help="skip configurations that would not fit")
    p.add_argument("--label", default="")
    p.add_argument("--csv", default="")
    p.add_argument("--prompts-log", default="", help="append each prompt's SHA-1 here (# CONFIG lines between)")
    p.add_argument("--table", metavar="CSV", nargs="+",
                   help="print the table of these CSVs' summary rows (of --label) and stop: one per device call")
    p.add_argument("--plan", action="store_true", help="print the schedule and its length in seconds, and stop")
    args = p.parse_args(argv)
    if args.trace_s <= 0 or args.time_scale <= 0:
        p.error("--trace-s and --time-scale must be positive")
    if "none" in args.configs and len(args.configs) > 1:
        p.error(f"'none' (a server without speculation) goes alone (got {args.configs})")
    if args.configs != ["none"] and not args.switch:
        p.error(f"configurations other than 'none' need --switch (got {args.configs})")
    if len(set(args.configs)) != len(args.configs):
        p.error(f"a configuration is named twice in {args.configs}")
    if args.table:
        try:
            print(render_tables([read_rows(path, args.label) for path in args.table]))
        except OSError as exc:
            p.error(f"cannot read {exc.filename}: {exc.strerror}")
        return 0
    if args.plan:
        phases = schedule(args.trace_seed, args.trace_s, args.time_scale, args.levels)
        print(" ".join(f"{until:.1f}:{level}" for until, level in phases))
        print(f"length_s {phases[-1][0]:.0f}")
        return 0
    rows = asyncio.run(run(args))
    if args.csv:
        print(render_tables([read_rows(args.csv, args.label)]))
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
