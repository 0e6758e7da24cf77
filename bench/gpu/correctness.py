#!/usr/bin/env python3
"""Greedy-output check: the same prompts, token for token, in every mode.

Why: specctl's fast off (runtime/sglang_plugin/fast_off.py) changes how the
target runs while speculation is off; the outputs must not change. This
sends one fixed set of prompts (random ids from a seed, staggered output
lengths so that the batch shrinks as requests finish) all at once, greedy,
and saves the output ids. Run it against a server without speculation and
against the specctl server in each mode, then compare.

    correctness.py run URL LABEL OUT.json [--mode off|on|auto] [--toggle S]
                   [--then MODE --after S] [--set key=value ...] [--logprobs] [--n 8] [--seed 1]
    correctness.py compare REF.json OTHER.json ...

--toggle S flips specctl between forced on and forced off every S seconds
(with --cycle-steps 1,3,0,2: pins those depths in turn, 0 being forced off)
while the requests run ("switched mid-generation"). --set applies specctl
settings first (e.g. an auto policy that switches often). --then MODE --after S
switches once, S seconds in (the resume experiment: start off, then on).
--logprobs asks for each output token's logprob; compare then also prints the
largest difference from the reference where the tokens agree (greedy ids
alone are weak evidence with random weights: their outputs are nearly
degenerate). Each request's rid is LABEL:INDEX, so that draft traces
(runtime/sglang_plugin/draft_trace.py) of two runs line up. Standard library only.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ctl


def prompts(n: int, seed: int) -> list[dict[str, Any]]:
    """n deterministic requests: 64-256 input ids, outputs 96..256 tokens (staggered)."""
    rng = random.Random(seed)
    reqs = []
    for i in range(n):
        ilen = rng.randint(64, 256)
        olen = 96 + (160 * i) // max(1, n - 1)
        reqs.append({
            "input_ids": [rng.randrange(10, 128000) for _ in range(ilen)],
            "sampling_params": {"max_new_tokens": olen, "temperature": 0.0, "ignore_eos": True},
        })
    return reqs


def generate(url: str, payload: dict[str, Any], out: list[Any], i: int) -> None:
    """One blocking /generate; stores (output_ids, meta_info, logprobs if asked) or the error."""
    try:
        ans = ctl.http(url, "/generate", payload, timeout=300)
        ans = ans[0] if isinstance(ans, list) else ans
        meta = ans.get("meta_info", {})
        out[i] = {"ids": ans.get("output_ids"), "meta": {
            k: meta.get(k) for k in ("completion_tokens", "spec_verify_ct", "finish_reason")}}
        if payload.get("return_logprob"):
            out[i]["logprobs"] = [e[0] if isinstance(e, (list, tuple)) else e
                                  for e in meta.get("output_token_logprobs") or []]
    except Exception as exc:
        out[i] = {"ids": None, "error": repr(exc)[:300]}


def toggler(url: str, period: float, stop: threading.Event, flips: list[str],
            depths: list[int] | None = None) -> None:
    """Flip forced on / forced off every ``period`` seconds until told to stop.

    With ``depths`` (``--cycle-steps 1,3,0,2``) each flip pins the next depth
    instead (forced on at that many draft steps; 0 is forced off), so one
    generation runs through several runtime states.
    """
    mode, i = "off", 0
    while not stop.wait(period):
        if depths:
            depth = depths[i % len(depths)]
            i += 1
            args = {"specctl_mode": ctl.MODE_CODES["off"]} if depth == 0 else \
                {"specctl_mode": ctl.MODE_CODES["on"], "specctl_steps": depth}
            label = f"depth {depth}"
        else:
            mode = "on" if mode == "off" else "off"
            args, label = {"specctl_mode": ctl.MODE_CODES[mode]}, mode
        try:
            answer = ctl.set_server_args(url, args)
            flips.append(label if answer != [False] else f"error refused {label}")
        except Exception as exc:
            flips.append(f"error {exc!r}"[:100])


def switch_once(url: str, after: float, mode: str, stop: threading.Event, flips: list[str]) -> None:
    """Switch to ``mode`` once, ``after`` seconds in (unless the requests finished first)."""
    if stop.wait(after):
        return
    try:
        ctl.set_server_args(url, {"specctl_mode": ctl.MODE_CODES[mode]})
        flips.append(mode)
    except Exception as exc:
        flips.append(f"error {exc!r}"[:100])


def run(args: argparse.Namespace) -> int:
    url = args.url
    record: dict[str, Any] = {"label": args.label, "mode": args.mode, "toggle": args.toggle, "set": args.set,
                              "then": args.then, "after": args.after, "cycle_steps": args.cycle_steps}
    if args.set:
        ctl_args = ["set", *args.set]
        record["set_answer"] = _ctl(url, ctl_args)
    if args.mode:
        record["mode_answer"] = _ctl(url, ["mode", args.mode])
    record["state_before"] = _safe(lambda: ctl.specctl_state(url))
    reqs = prompts(args.n, args.seed)
    for i, req in enumerate(reqs):
        req["rid"] = f"{args.label}:{i}"
        if args.logprobs:
            req["return_logprob"] = True
    outs: list[Any] = [None] * len(reqs)
    threads = [threading.Thread(target=generate, args=(url, r, outs, i)) for i, r in enumerate(reqs)]
    stop, flips = threading.Event(), []
    flip_thread = None
    if args.toggle:
        flip_thread = threading.Thread(target=toggler, args=(url, args.toggle, stop, flips, args.cycle_steps))
    elif args.then:
        flip_thread = threading.Thread(target=switch_once, args=(url, args.after, args.then, stop, flips))
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    if flip_thread:
        flip_thread.start()
    for t in threads:
        t.join()
    stop.set()
    if flip_thread:
        flip_thread.join()
    record["seconds"] = round(time.perf_counter() - t0, 2)
    record["flips"] = len(flips)
    record["flip_errors"] = [f for f in flips if f.startswith("error")][:3]
    record["state_after"] = _safe(lambda: ctl.specctl_state(url))
    record["outputs"] = outs
    Path(args.out).write_text(json.dumps(record))
    ok = sum(1 for o in outs if o and o.get("ids"))
    sw = (record["state_after"] or {}).get("switches") if isinstance(record["state_after"], dict) else None
    print(f"[correctness] {args.label}: {ok}/{len(outs)} answered in {record['seconds']} s, "
          f"flips sent {len(flips)}, specctl switches {sw}")
    return 0 if ok == len(outs) else 1


def _ctl(url: str, argv: list[str]) -> Any:
    return _safe(lambda: ctl.main_capture(url, argv))


def _safe(fn: Any) -> Any:
    try:
        return fn()
    except Exception as exc:
        return {"error": repr(exc)[:300]}


def compare(paths: list[str]) -> int:
    """Print, per file, how many requests match the reference token for token."""
    ref = json.loads(Path(paths[0]).read_text())
    ref_ids = [o.get("ids") for o in ref["outputs"]]
    worst = 0
    for path in paths[1:]:
        other = json.loads(Path(path).read_text())
        same, first = 0, []
        for a, b in zip(ref_ids, [o.get("ids") for o in other["outputs"]]):
            if a is not None and a == b:
                same += 1
                continue
            if a is None or b is None:
                first.append("missing")
                continue
            k = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            first.append(f"tok{k}/{len(a)}")
        worst = max(worst, len(ref_ids) - same)
        sw = other.get("state_after", {})
        sw = sw.get("switches") if isinstance(sw, dict) else None
        print(f"[compare] {other['label']} vs {ref['label']}: {same}/{len(ref_ids)} identical"
              f"{'; first differences ' + ', '.join(first) if first else ''}"
              f" (flips sent {other.get('flips')}, specctl switches {sw}){logprob_diff(ref, other)}")
    return 0 if worst == 0 else 1


def logprob_diff(ref: dict[str, Any], other: dict[str, Any]) -> str:
    """'; logprobs max |d| X mean |d| Y over N tokens' where both runs have them and the ids agree."""
    diffs: list[float] = []
    for a, b in zip(ref["outputs"], other["outputs"]):
        if not (a and b and a.get("logprobs") and b.get("logprobs")):
            continue
        for x, y, ia, ib in zip(a["logprobs"], b["logprobs"], a.get("ids") or [], b.get("ids") or []):
            if ia == ib and x is not None and y is not None:
                diffs.append(abs(float(x) - float(y)))
    if not diffs:
        return ""
    return f"; logprobs max |d| {max(diffs):.4g} mean |d| {sum(diffs) / len(diffs):.3g} over {len(diffs)} tokens"


def main(argv: list[str]) -> int:
    if argv and argv[0] == "compare":
        return compare(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("cmd", choices=["run"])
    p.add_argument("url")
    p.add_argument("label")
    p.add_argument("out")
    p.add_argument("--mode", choices=["on", "off", "auto"])
    p.add_argument("--toggle", type=float, default=0.0)
    p.add_argument("--cycle-steps", type=lambda t: [int(x) for x in t.split(",")], metavar="1,3,0,2",
                   help="with --toggle: pin these depths in turn (0 = forced off) instead of flipping on/off")
    p.add_argument("--then", choices=["on", "off", "auto"], help="switch to this mode once, --after seconds in")
    p.add_argument("--after", type=float, default=1.0)
    p.add_argument("--logprobs", action="store_true")
    p.add_argument("--set", nargs="*", default=[])
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
