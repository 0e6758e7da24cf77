#!/usr/bin/env python3
"""Acceptance right after a depth change, against acceptance once settled.

Standard library only (runs on the GPU machine without the project). Under a
steady load of --concurrency clients it pins the forced depth to each of
--depths in turn for --period seconds (`specctl_mode` on and `specctl_steps`
d; 0 is forced off), reads the plugin's state every --poll seconds, and
prints, per depth, the mean accepted drafts a verify over the first --first
verifies after each change and over the rest of the period. The accept window
is set to --window verifies first, so that a read is recent, and the reads
fewer than --window verifies after a change, which still hold the old depth's,
are left out.

A new depth's drafts must be accepted as usual within a few verifies: the
draft model's KV cache is extended with every accepted token at every depth,
so a switch from depth 1 to 3 should draft positions 2 and 3 from a warm
cache at once (ratio about 1.00); a ratio well under 1 means the new state
starts cold.

    depth_accept.py URL [--depths 1,3,2,0,3] [--period 4] [--concurrency 16]
                        [--first 8] [--window 4] [--csv FILE] [--replay-check-prompts]
    depth_accept.py FILE.csv --summarise [--first 8] [--window 4]
"""
from __future__ import annotations

import argparse
import csv
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import correctness
import ctl


def client(url: str, seed: int, stop: threading.Event, output_len: int, replay: bool = False) -> None:
    """One closed-loop client: a fresh random prompt whenever the last one is done.

    ``replay``: correctness.py's check prompts in turn instead, the ones whose
    outputs table_head.py's head was written from (run_fast_off.sh's
    MODEL=llama8b-table); the radix cache serves their prefills, which this
    measurement does not time.
    """
    rng = random.Random(seed)
    checks = [p["input_ids"] for p in correctness.prompts(8, 1)] if replay else []
    turn = seed
    while not stop.is_set():
        ids = checks[turn % len(checks)] if checks else [rng.randrange(1000, 30000) for _ in range(256)]
        turn += 1
        body = {"input_ids": ids,
                "sampling_params": {"max_new_tokens": output_len, "temperature": 0.0, "ignore_eos": True}}
        try:
            ctl.http(url, "/generate", body, timeout=120)
        except Exception:
            time.sleep(0.2)


def pin(url: str, depth: int) -> Any:
    args = {"specctl_mode": ctl.MODE_CODES["off"]} if depth == 0 else \
        {"specctl_mode": ctl.MODE_CODES["on"], "specctl_steps": depth}
    return ctl.set_server_args(url, args)


def watch(url: str, depths: list[int], period: float, poll: float) -> list[dict[str, Any]]:
    """Pin each depth for ``period`` s; one row per read of the state."""
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    for turn, depth in enumerate(depths):
        answer = pin(url, depth)
        if answer == [False]:
            raise SystemExit(f"the server refused depth {depth} (no runtime state for it?)")
        start_verifies = None
        end = time.monotonic() + period
        while time.monotonic() < end:
            state = ctl.specctl_state(url) or {}
            verifies = state.get("verifies")
            if state.get("steps") == depth and start_verifies is None and isinstance(verifies, int):
                start_verifies = verifies
            rows.append({"t": round(time.monotonic() - t0, 3), "turn": turn, "pinned": depth,
                         "depth": state.get("steps"), "verifies": verifies,
                         "since_change": None if start_verifies is None or verifies is None
                         else verifies - start_verifies,
                         "accept_mean": state.get("accept_mean")})
            time.sleep(poll)
    return rows


def summarise(rows: list[dict[str, Any]], first: int, window: int) -> list[str]:
    """Per pinned depth: accept mean right after a change (first verifies) and settled.

    The plugin's accept mean covers its last ``window`` verifies, so a read taken
    fewer than ``window`` verifies after a change still holds the old depth's: on
    the GPU that lifted depth 1's "right after" to 1.097, above the 1.0 a depth-1
    draft can reach. Right after therefore counts the reads from ``window`` to
    ``first`` verifies in, which cover verifies 1..first of the new depth alone.
    Each pinned period is compared with its own settled reads (the ratio is the
    mean over periods): with real drafts acceptance follows the prompts in flight,
    which differ from one period to the next.
    """
    lines = [f"| depth | right after (verifies 1-{first}) | settled | after / settled | periods |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    for depth in sorted({int(r["pinned"]) for r in rows}):
        if depth == 0:
            continue
        pairs = [p for p in (_period(rows, turn, first, window) for turn in
                             sorted({int(r["turn"]) for r in rows if int(r["pinned"]) == depth})) if p]
        if not pairs:
            lines.append(f"| {depth} | - | - | - | 0 |")
            continue
        a = sum(e for e, _ in pairs) / len(pairs)
        b = sum(s for _, s in pairs) / len(pairs)
        ratios = [e / s for e, s in pairs if s]
        ratio = f"{sum(ratios) / len(ratios):.3f}" if ratios else "-"
        lines.append(f"| {depth} | {a:.3f} | {b:.3f} | {ratio} | {len(pairs)} |")
    return lines + ["", *periods(rows, first, window)]


def periods(rows: list[dict[str, Any]], first: int, window: int) -> list[str]:
    """Each pinned period on its own line, with the depth pinned before it.

    What a depth reads right after a change can depend on the one before:
    the fourth sitting's table head read 1.75, 2.5 or 1.0 at depth 3 after
    depth 1, off and depth 2 (docs/benchmarks.md).
    """
    lines = [f"| period | depth | after | right after (verifies 1-{first}) | settled |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    pinned = {int(r["turn"]): int(r["pinned"]) for r in rows}
    for turn in sorted(pinned):
        if pinned[turn] == 0:
            continue
        before = str(pinned[turn - 1]) if turn - 1 in pinned else "-"
        pair = _period(rows, turn, first, window)
        reads = f"{pair[0]:.3f} | {pair[1]:.3f}" if pair else "- | -"
        lines.append(f"| {turn} | {pinned[turn]} | {before} | {reads} |")
    return lines


def _period(rows: list[dict[str, Any]], turn: int, first: int, window: int) -> tuple[float, float] | None:
    """One pinned period's (right after, settled) means, or None where it lacks either."""
    mine = [r for r in rows if int(r["turn"]) == turn and _int(r["depth"]) == int(r["pinned"])
            and _int(r["since_change"]) is not None and _float(r["accept_mean"]) is not None]
    early = [_float(r["accept_mean"]) for r in mine if window <= _int(r["since_change"]) <= first]
    late = [_float(r["accept_mean"]) for r in mine if _int(r["since_change"]) > first]
    if not early or not late:
        return None
    return sum(early) / len(early), sum(late) / len(late)


def _int(v: Any) -> int | None:
    """A CSV cell or a live read as an int; None where empty."""
    return None if v in (None, "") else int(v)


def _float(v: Any) -> float | None:
    return None if v in (None, "") else float(v)


def summarise_file(path: str, first: int, window: int) -> int:
    """The table again from a committed CSV (the rows this tool wrote with --csv)."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        print(f"depth_accept.py: cannot read {path}: {e.strerror}", file=sys.stderr)
        return 2
    if not rows or not {"turn", "pinned", "depth", "since_change", "accept_mean"} <= set(rows[0]):
        print(f"depth_accept.py: {path} is not a depth_accept.py --csv file", file=sys.stderr)
        return 2
    try:
        table = summarise(rows, first, window)
    except ValueError as e:
        print(f"depth_accept.py: {path}: a cell is not a number ({e})", file=sys.stderr)
        return 2
    print("\n".join(table))
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("url", help="the server, or with --summarise a CSV this tool wrote")
    p.add_argument("--depths", default="1,3,2,0,3,1,2", type=lambda t: [int(x) for x in t.split(",")])
    p.add_argument("--period", type=float, default=4.0)
    p.add_argument("--poll", type=float, default=0.02)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--output-len", type=int, default=2000)
    p.add_argument("--first", type=int, default=8)
    p.add_argument("--window", type=int, default=4)
    p.add_argument("--csv")
    p.add_argument("--replay-check-prompts", action="store_true",
                   help="send correctness.py's eight check prompts in turn, not random ones")
    p.add_argument("--summarise", action="store_true",
                   help="print the table from the CSV named in place of the URL (nothing is sent)")
    args = p.parse_args(argv)
    if args.window > args.first:
        p.error(f"--window {args.window} > --first {args.first}: "
                "no read right after a change would hold the new depth alone")
    if args.summarise:
        return summarise_file(args.url, args.first, args.window)
    before = ctl.specctl_state(args.url) or {}
    ctl.set_server_args(args.url, {"specctl_accept_window": args.window})
    stop = threading.Event()
    clients = [threading.Thread(target=client, args=(args.url, i, stop, args.output_len, args.replay_check_prompts),
                                daemon=True)
               for i in range(args.concurrency)]
    for c in clients:
        c.start()
    try:
        time.sleep(2.0)  # the batch fills
        rows = watch(args.url, args.depths, args.period, args.poll)
    finally:
        stop.set()
        settings = before.get("settings") or {}
        restore = {"specctl_accept_window": settings.get("accept_window", 64),
                   "specctl_mode": ctl.MODE_CODES.get(settings.get("mode", "auto"), 0)}
        if isinstance(settings.get("steps"), int):
            restore["specctl_steps"] = settings["steps"]
        ctl.set_server_args(args.url, restore)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    if args.replay_check_prompts:
        print("load: correctness.py's eight check prompts in turn (the table head's tokens)")
    print("\n".join(summarise(rows, args.first, args.window)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
