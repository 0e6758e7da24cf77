"""Scheduler-side CPU cost per request of SGLang 0.5.23's Python TreeCore:
EAGLE bigram keys against plain keys, side by side in one process.

Why: on 0.5.23 under torch 2.11 the Rust TreeCore does not load, so both
servers of a pair ran on the pure-Python TreeCore. A server started with
EAGLE(-3) builds its radix tree over bigram keys (``is_eagle`` in
``CacheInitParams``); a server without speculation over plain token ids. This
script measures what the tree work of one request costs the scheduler thread
in each mode, so the difference can be set against the off state's 7-15 % gap.

What it drives (all SGLang's own code, on CPU): a real ``UnifiedRadixCache``
(component FULL, page size 1, LRU, Python TreeCore) over a real
``ReqToTokenPool``, ``MHATokenToKVPool`` (1 layer, 1 head, head_dim 1: the KV
bytes are never read) and ``TokenToKVPoolAllocator``, and real ``Req`` objects,
through the functions the scheduler calls:

- match: ``Req.init_next_round_input(tree_cache)`` on admission (the
  ``match_kv_cache`` walk), then ``tree_cache.lock(req.last_node)`` as
  ``PrefillAdder`` does;
- alloc: ``alloc_token_slots`` for the prompt, which evicts from the tree
  when the pool is short (``evict_to_free_tokens`` -> ``evict_for_alloc``),
  then writes the request's ``req_to_token`` row;
- checkpoint: ``checkpoint_kv_cache`` after the prefill (insert of the prompt,
  the request's lock moved to the new node);
- decode_alloc: once per decode step for the whole running batch, what
  ``alloc_for_decode`` does without speculation (``alloc_token_slots`` for one
  slot per request, evicting when short, and the ``req_to_token`` write);
- release: ``release_kv_cache(checkpoint=True)`` on finish (insert of prompt
  + output, the prompt-boundary split insert, unlock, frees).

checkpoint and release run inside the allocator's free group
(``free_group_begin``/``free_group_end``), as the scheduler's result passes
do (``batch_result_processor.py:264/501`` and ``:998/1100``); the group's
closing free is counted in the operation.

Each is timed with the thread's CPU clock and reported per finished request
(decode_alloc: its per-step total over the run, divided by the finishes).
A second pass counts the Python calls (function and C calls) per finished
request in each operation, which does not depend on the machine's speed.

Faked: the forward passes (each output token is a random id appended to
``output_ids``), the finish (``finished_reason = FINISH_LENGTH`` and
``finished_len`` set as ``update_finish_state`` does at the length cap), and
the batch object: requests are admitted one per step, outside a
``ScheduleBatch``. Both caches run without speculation's allocator (the
bigram cache differs only in ``is_eagle=True``, as the EAGLE server's
``CacheInitParams`` does); what EAGLE's own decode allocation costs is not
in here. Not covered: metrics (``--enable-metrics``), KV events, page size > 1.

Steady state: ``--resident`` requests run at once on a KV pool of
``--kv-tokens`` (the pair's ``--max-total-tokens``); a new request is admitted
whenever one finishes, and measurement starts once the pool is full, the tree
evicts, and 2N + 200 requests have finished. The plain and the bigram cache
get the same request stream and are stepped in lockstep, alternating which
goes first, so that the machine's drifting speed (2 shared cores here) hits
both alike; the spread of the ratio over chunks of steps is printed too.
Prompts are 256-768 random ids, 256 output tokens.

Run (needs torch and SGLang 0.5.23's dependencies importable; not part of the
test suite):

    python bench/tree_core_0523.py --sglang-path /tmp/sg523 [--step-extras]

``--sglang-path`` is the directory that contains the ``sglang`` package.
``--step-extras`` adds a second table: the speculation-only host loops of a
decode step (``step_extras``). Instrumentation: each cache's
``evict_for_alloc`` is wrapped to count evictions (the state line).
Findings: docs/benchmarks.md, "The off state on 0.5.23 under the Python
TreeCore (CPU analysis)".
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
from array import array
from collections import defaultdict
from typing import Any

OPS = ("match", "alloc", "checkpoint", "decode_alloc", "release")
OUTPUT_LEN = 256


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The shape of the run; the defaults are the bench's request shape."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sglang-path", required=True, help="directory holding sglang/")
    p.add_argument("--resident", type=int, nargs="+", default=[64, 128, 256])
    p.add_argument("--kv-tokens", type=int, default=340_000,
                   help="KV pool size (the pair's --max-total-tokens)")
    p.add_argument("--requests", type=int, default=1500,
                   help="finished requests measured per mode and batch size")
    p.add_argument("--chunk", type=int, default=50,
                   help="steps per chunk for the spread of the bigram/plain ratio")
    p.add_argument("--count-requests", type=int, default=100,
                   help="finished requests whose Python calls are counted")
    p.add_argument("--step-extras", action="store_true",
                   help="also time the spec-only host loops of a decode step (step_extras)")
    p.add_argument("--prompt-min", type=int, default=256)
    p.add_argument("--prompt-max", type=int, default=768)
    p.add_argument("--vocab", type=int, default=128_000)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def import_sglang(path: str) -> dict[str, Any]:
    """Import the SGLang names the harness uses from ``path``."""
    sys.path.insert(0, os.path.abspath(path))
    os.environ.setdefault("SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND", "python")
    import torch
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH, Req
    from sglang.srt.mem_cache.allocation import alloc_token_slots
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.common import checkpoint_kv_cache, release_kv_cache
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
    from sglang.srt.mem_cache.unified_cache.components.base import ComponentType
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    set_global_server_args_for_scheduler(ServerArgs(model_path="dummy", page_size=1))
    import sglang

    return {
        "torch": torch, "Req": Req, "FINISH_LENGTH": FINISH_LENGTH,
        "alloc_token_slots": alloc_token_slots,
        "TokenToKVPoolAllocator": TokenToKVPoolAllocator, "CacheInitParams": CacheInitParams,
        "checkpoint_kv_cache": checkpoint_kv_cache, "release_kv_cache": release_kv_cache,
        "MHATokenToKVPool": MHATokenToKVPool, "ReqToTokenPool": ReqToTokenPool,
        "ComponentType": ComponentType, "UnifiedRadixCache": UnifiedRadixCache,
        "SamplingParams": SamplingParams, "version": getattr(sglang, "__version__", "?"),
    }


class Harness:
    """One cache (plain or bigram keys) with its pools and its running batch."""

    def __init__(self, sg: dict[str, Any], is_eagle: bool, resident: int,
                 args: argparse.Namespace) -> None:
        self.sg, self.args, self.is_eagle, self.target = sg, args, is_eagle, resident
        torch = sg["torch"]
        max_ctx = args.prompt_max + OUTPUT_LEN + 8
        self.req_to_token_pool = sg["ReqToTokenPool"](
            size=resident + 4, max_context_len=max_ctx, device="cpu",
            enable_memory_saver=False)
        kv_pool = sg["MHATokenToKVPool"](
            size=args.kv_tokens, page_size=1, dtype=torch.bfloat16, head_num=1,
            head_dim=1, layer_num=1, device="cpu", enable_memory_saver=False)
        self.allocator = sg["TokenToKVPoolAllocator"](
            size=args.kv_tokens, dtype=torch.bfloat16, device="cpu", kvcache=kv_pool,
            need_sort=False)
        params = sg["CacheInitParams"](
            disable=False, req_to_token_pool=self.req_to_token_pool,
            token_to_kv_pool_allocator=self.allocator, page_size=1,
            is_eagle=is_eagle, tree_components=(sg["ComponentType"].FULL,),
            eviction_policy="lru", tree_core_backend="python")
        self.cache = sg["UnifiedRadixCache"](params=params)
        self.evictions = [0, 0]  # calls, tokens: proof the steady state evicts
        real_evict = self.cache.evict_for_alloc

        def counted_evict(*a, **kw):
            res = real_evict(*a, **kw)
            self.evictions[0] += 1
            self.evictions[1] += res.num_tokens_evicted
            return res

        self.cache.evict_for_alloc = counted_evict
        self.rng = random.Random(args.seed)
        self.running: list = []
        self.n = self.prefix_hits = self.finished = self.steps = 0
        self.times: dict[str, list[int]] = defaultdict(list)
        self.call_counts: dict[str, int] | None = None

    def _timed(self, op: str, fn, *a, **kw):
        if self.call_counts is not None:
            return self._counted(op, fn, *a, **kw)
        t0 = time.thread_time_ns()
        out = fn(*a, **kw)
        self.times[op].append(time.thread_time_ns() - t0)
        return out

    def _counted(self, op: str, fn, *a, **kw):
        counts = self.call_counts

        def prof(_frame, event, _arg):
            if event in ("call", "c_call"):
                counts[op] += 1

        sys.setprofile(prof)
        try:
            return fn(*a, **kw)
        finally:
            sys.setprofile(None)

    def _new_req(self) -> Any:
        sg, rng = self.sg, self.rng
        plen = rng.randint(self.args.prompt_min, self.args.prompt_max)
        ids = array("q", (rng.randrange(self.args.vocab) for _ in range(plen)))
        self.n += 1
        return sg["Req"](rid=f"r{self.n}", origin_input_text="", origin_input_ids=ids,
                         sampling_params=sg["SamplingParams"](
                             temperature=0, max_new_tokens=OUTPUT_LEN))

    def admit(self) -> None:
        """Admission and prefill of one new request, each tree step timed."""
        req = self._new_req()
        self._timed("match", self._match, req)
        self._timed("alloc", self._alloc_prompt, req)
        req.output_ids.append(self.rng.randrange(self.args.vocab))  # the prefill's token
        # The prefill's result pass frees in one group, as the scheduler's does.
        self.allocator.free_group_begin()
        self._timed("checkpoint", self.sg["checkpoint_kv_cache"], req, self.cache)
        self._timed("checkpoint", self.allocator.free_group_end)
        self.running.append(req)

    def _match(self, req: Any) -> None:
        req.init_next_round_input(self.cache)
        self.prefix_hits += req.prefix_len
        req.extend_end = len(req.full_untruncated_fill_ids)
        req.lock = self.cache.lock(req.last_node)

    def _alloc_prompt(self, req: Any) -> None:
        torch, cache, pool = self.sg["torch"], self.cache, self.req_to_token_pool
        pool.alloc([req])
        prefix = (cache.prefix_device_indices(req) if req.prefix_len
                  else torch.empty(0, dtype=torch.int64))
        loc = self.sg["alloc_token_slots"](cache, req.extend_end - req.prefix_len)
        row = torch.cat([prefix.to(torch.int64), loc.to(torch.int64)])
        pool.write((req.kv.req_pool_idx, slice(0, req.extend_end)), row)
        req.kv.kv_allocated_len = req.kv.kv_committed_len = req.extend_end

    def _decode_alloc(self) -> None:
        """A decode step's allocation as alloc_for_decode does it without
        speculation: one slot per running request, evicting when short."""
        torch, pool = self.sg["torch"], self.req_to_token_pool
        loc = self.sg["alloc_token_slots"](self.cache, len(self.running))
        rows = torch.tensor([r.kv.req_pool_idx for r in self.running], dtype=torch.int64)
        cols = torch.tensor([r.kv.kv_committed_len for r in self.running], dtype=torch.int64)
        pool.req_to_token[rows, cols] = loc.to(pool.req_to_token.dtype)
        for r in self.running:
            r.kv.kv_allocated_len = r.kv.kv_committed_len = r.kv.kv_committed_len + 1

    def step(self) -> None:
        """One decode step of the running batch, then finish and admit."""
        if self.running:
            self._timed("decode_alloc", self._decode_alloc)
            self.steps += 1
            vocab, rng = self.args.vocab, self.rng
            done = []
            for r in self.running:
                r.output_ids.append(rng.randrange(vocab))  # the forward pass, faked
                if len(r.output_ids) >= OUTPUT_LEN:
                    done.append(r)
            # The decode result pass frees in one group, as the scheduler's does.
            self.allocator.free_group_begin()
            for r in done:
                self.running.remove(r)
                r.finished_reason = self.sg["FINISH_LENGTH"](length=OUTPUT_LEN)
                r.finished_len = OUTPUT_LEN
                self._timed("release", self.sg["release_kv_cache"], r, self.cache,
                            checkpoint=True)
                self.finished += 1
            if done:
                self._timed("release", self.allocator.free_group_end)
            else:
                self.allocator.free_group_end()
        if len(self.running) < self.target:
            self.admit()  # one a step: the ramp staggers the finishes

    def fill(self) -> None:
        """Run until the pool is full and the tree has turned over once."""
        while self.evictions[0] == 0 or self.finished < 2 * self.target + 200:
            self.step()
        self.times.clear()

    def run(self, finishes: int) -> None:
        goal = self.finished + finishes
        while self.finished < goal:
            self.step()

    def state(self) -> str:
        """What the tree holds now: proof that the run is at the steady state."""
        nodes = len(getattr(self.cache.tree_core, "_node_arena", ()))
        return (f"{nodes} nodes, evictable {self.cache.evictable_size()} tok, "
                f"protected {self.cache.protected_size()} tok, "
                f"free {self.allocator.available_size()} tok, "
                f"prefix hits {self.prefix_hits} tok, "
                f"evictions {self.evictions[0]} ({self.evictions[1]} tok)")


def measure(hs: dict[bool, Harness], args: argparse.Namespace) -> dict:
    """Step the two caches in lockstep, alternating which goes first, so that
    the machine's speed (shared cores, frequency) drifts alike for both; cut
    the run into chunks of ``--chunk`` steps for the spread of the ratio."""
    for h in hs.values():
        h.times.clear()
    start = {m: h.finished for m, h in hs.items()}
    chunks: list[tuple[float, float]] = []
    chunk = dict.fromkeys(hs, 0)
    i = 0
    gc.collect()
    while min(h.finished - start[m] for m, h in hs.items()) < args.requests:
        for m in ((False, True) if i % 2 == 0 else (True, False)):
            before = sum(sum(v) for v in hs[m].times.values())
            hs[m].step()
            chunk[m] += sum(sum(v) for v in hs[m].times.values()) - before
        i += 1
        if i % args.chunk == 0:
            chunks.append((chunk[False], chunk[True]))
            chunk = dict.fromkeys(hs, 0)
    done = {m: h.finished - start[m] for m, h in hs.items()}
    per_req = {m: {op: sum(h.times[op]) / done[m] for op in OPS} for m, h in hs.items()}
    calls = {m: {op: len(h.times[op]) for op in OPS} for m, h in hs.items()}
    return {"per_req": per_req, "calls": calls, "done": done, "chunks": chunks, "steps": i}


def count_calls(hs: dict[bool, Harness], requests: int) -> dict[bool, dict[str, float]]:
    """Python calls (function and C calls) per finished request per operation:
    a count, so it does not depend on the machine's speed."""
    out = {}
    for m, h in hs.items():
        h.times.clear()
        h.call_counts = defaultdict(int)
        before = h.finished
        h.run(requests)
        done = h.finished - before
        out[m] = {op: h.call_counts[op] / done for op in OPS}
        h.call_counts = None
    return out


def print_table(resident: int, core: str, hs: dict[bool, Harness], res: dict,
                calls: dict[bool, dict[str, float]]) -> None:
    pr = res["per_req"]
    print(f"\nN={resident} running ({core}); per finished request: scheduler-thread "
          "CPU µs, and Python calls")
    print(f"{'operation':<13}{'plain µs':>9}{'bigram µs':>10}{'ratio':>7}{'diff':>8}"
          f"{'calls plain':>13}{'bigram':>8}")
    for op in OPS + ("total",):
        if op == "total":
            a, b = sum(pr[False].values()) / 1e3, sum(pr[True].values()) / 1e3
            ca, cb = sum(calls[False].values()), sum(calls[True].values())
        else:
            a, b = pr[False][op] / 1e3, pr[True][op] / 1e3
            ca, cb = calls[False][op], calls[True][op]
        print(f"{op:<13}{a:>9.1f}{b:>10.1f}{b / a:>7.2f}{b - a:>8.1f}{ca:>13.0f}{cb:>8.0f}")
    ratios = sorted(b / a for a, b in res["chunks"] if a and b)
    if ratios:
        q = [ratios[int(f * (len(ratios) - 1))] for f in (0.1, 0.5, 0.9)]
        print(f"  bigram/plain per chunk of steps ({len(ratios)} chunks): "
              f"p10 {q[0]:.3f}, median {q[1]:.3f}, p90 {q[2]:.3f}")
    steps = res["calls"][False]["decode_alloc"]
    per_step = {m: pr[m]["decode_alloc"] * res["done"][m] / res["calls"][m]["decode_alloc"]
                / 1e3 for m in hs}
    print(f"  {res['steps']} steps, {steps / res['done'][False]:.2f} steps per finished "
          f"request; decode_alloc {per_step[False]:.1f} / {per_step[True]:.1f} µs per step "
          "(plain / bigram)")
    for m, h in hs.items():
        print(f"  {'bigram' if m else 'plain':<6} after {h.n} requests: {h.state()}")


def _extras_fns(sg: dict[str, Any], bs: int, proc: Any, resolve: Any, sb: Any) -> tuple:
    """step_extras' five measured bodies for a batch of ``bs`` requests:
    spec prepare, no-spec prepare, spec resolve, no-spec resolve, isolation."""
    import dataclasses
    from types import SimpleNamespace

    from sglang.srt.mem_cache.allocation_sizing import page_aligned_decode_alloc_lens

    torch = sg["torch"]
    reqs = []
    for i in range(bs):
        r = sg["Req"](rid=f"s{i}", origin_input_text="",
                      origin_input_ids=array("q", range(512)),
                      sampling_params=sg["SamplingParams"](temperature=0, max_new_tokens=256))
        r.kv.kv_committed_len, r.kv.kv_allocated_len = 600, 608
        reqs.append(r)
    seq = torch.full((bs,), 600, dtype=torch.int64)
    ids = torch.zeros(bs, dtype=torch.int64)
    acc = torch.ones(bs, dtype=torch.int32)
    batch = SimpleNamespace(reqs=reqs)

    def spec_prep():
        cur, nxt, _ = page_aligned_decode_alloc_lens(reqs, reserve=8, page_size=1)
        for r in reqs:
            r.decode_batch_idx += 1
        torch.tensor(cur, dtype=torch.int32)
        nxt_cpu = torch.tensor(nxt, dtype=torch.int32)
        for r, n in zip(reqs, nxt_cpu.tolist(), strict=True):
            r.kv.kv_allocated_len = max(r.kv.kv_allocated_len, n)

    def plain_prep():
        for r in reqs:
            r.kv.kv_allocated_len += 0
            r.kv.kv_committed_len += 0
        for r in reqs:
            r.decode_batch_idx += 1
        for _ in range(3):
            seq + 1

    def spec_resolve():
        result = SimpleNamespace(
            next_token_ids=ids, accept_lens=acc, speculative_output_stride=1,
            speculative_num_draft_tokens=1, num_non_draft_tokens_per_req=1,
            block_accept_lens=None, cap_lens=None, grammar_retained_tokens=None)
        resolve(proc, result, batch)

    def plain_resolve():
        return [[t] for t in ids.tolist()]

    def isolation():
        snap = {f.name: getattr(sb, f.name) for f in dataclasses.fields(sb)}
        for name, value in snap.items():
            setattr(sb, name, value)

    return spec_prep, plain_prep, spec_resolve, plain_resolve, isolation


def step_extras(sg: dict[str, Any], sizes: list[int]) -> None:
    """Host-side Python work an EAGLE v2 decode step does around the forward
    that a step without speculation does not, for the parts that run on CPU
    alone (no GPU ops): SGLang's own ``page_aligned_decode_alloc_lens`` and
    ``_resolve_spec_v2_tokens`` (called with a stand-in ``self`` whose metrics,
    adaptive-controller and grammar calls do nothing), the loops of
    ``eagle_prepare_for_decode`` / ``alloc_for_spec_decode`` around them, and
    ``_forward_isolation``'s snapshot of every ``ScheduleBatch`` field. The
    no-spec side is what its step does at the same places. Allocation and
    GPU ops are left out on both sides."""
    import dataclasses
    from types import SimpleNamespace

    from sglang.srt.managers.schedule_batch import ScheduleBatch
    from sglang.srt.managers.scheduler_components.batch_result_processor import (
        SchedulerBatchResultProcessor,
    )

    resolve = SchedulerBatchResultProcessor._resolve_spec_v2_tokens
    proc = SimpleNamespace(
        metrics_reporter=SimpleNamespace(snapshot_spec_decode_metrics=lambda b, r: None),
        model_worker=SimpleNamespace(on_verify_complete_cpu=lambda *a, **k: None),
        advance_grammar_fsm=lambda r, b: None)
    sb = object.__new__(ScheduleBatch)
    for f in dataclasses.fields(ScheduleBatch):
        object.__setattr__(sb, f.name, None)

    def timed(fn, n: int = 2000) -> float:
        fn()
        t0 = time.thread_time_ns()
        for _ in range(n):
            fn()
        return (time.thread_time_ns() - t0) / n / 1e3

    print(f"\nspec-only host work a decode step (topk 1, steps 0, reserve 8), µs; "
          f"ScheduleBatch has {len(dataclasses.fields(ScheduleBatch))} fields")
    print(f"{'bs':>5}{'prepare spec':>14}{'no-spec':>9}{'resolve spec':>14}{'no-spec':>9}"
          f"{'isolation':>11}{'extra':>8}")
    for bs in sizes:
        t = [timed(f) for f in _extras_fns(sg, bs, proc, resolve, sb)]
        extra = t[0] - t[1] + t[2] - t[3] + t[4]
        print(f"{bs:>5}{t[0]:>14.1f}{t[1]:>9.1f}{t[2]:>14.1f}{t[3]:>9.1f}{t[4]:>11.1f}{extra:>8.1f}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sg = import_sglang(args.sglang_path)
    print(f"sglang {sg['version']} from {args.sglang_path}, torch {sg['torch'].__version__}")
    print(f"prompts {args.prompt_min}-{args.prompt_max} random ids, {OUTPUT_LEN} output "
          f"tokens, KV pool {args.kv_tokens} tokens, {args.requests} measured requests "
          "per mode, the two caches stepped in lockstep")
    for resident in args.resident:
        hs = {m: Harness(sg, m, resident, args) for m in (False, True)}
        core = type(hs[True].cache.tree_core).__name__
        for h in hs.values():
            h.fill()
        res = measure(hs, args)
        calls = count_calls(hs, args.count_requests)
        print_table(resident, core, hs, res, calls)
    if args.step_extras:
        step_extras(sg, args.resident)
    return 0


if __name__ == "__main__":
    sys.exit(main())
