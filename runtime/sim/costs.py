"""The step-cost model of a speculative-decoding server, from physical quantities.

It prices one scheduler step (a plain decode, the off state, a speculative
cycle, a prefill) from a few physical quantities (weight bytes over memory
bandwidth versus FLOPs over compute, a per-token KV read, an all-reduce per
layer, fixed overheads) so that presets can be calibrated against measurements
rather than tuned point by point (docs/simulator.md, "Presets"). Pure functions: the
engine (sim/engine.py), the depth tables (sim/depth.py) and the tests call them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from specctl.runtime.core.tree_drafts import most_draft_tokens


@dataclass(frozen=True)
class PerfParams:
    """Costs of one tensor-parallel group, as effective (achieved) rates.

    Rates are aggregates over the group: a TP-8 group reading 8 shards in
    parallel has 8x one GPU's bandwidth, and its all-reduces live in the
    overheads.
    """

    weight_bytes: float  # target weights read once per forward
    flops_per_token: float  # target FLOPs per token (about 2 x parameters)
    mem_bw: float  # effective bytes/s of weight streaming
    compute: float  # effective FLOP/s of the target's GEMMs
    decode_kv_s: float  # seconds per context token read by decode attention (all layers)
    verify_kv_s: float  # the same in target-verify mode (a different, slower kernel on Triton)
    step_overhead_s: float  # fixed cost of one target forward: launches, sampling, scheduler
    req_overhead_s: float  # per request per target forward: sampling and scheduler bookkeeping
    draft_weight_bytes: float  # draft head, read once per draft forward
    draft_flops_per_token: float
    draft_kv_s: float  # seconds per context token in a draft forward (one layer)
    draft_overhead_s: float  # fixed cost of one draft forward
    prefill_overhead_s: float  # fixed cost of one prefill forward (CPU scheduling, no graph)
    prefill_compute: float  # effective FLOP/s of prefill GEMMs
    prefill_attn_s: float  # seconds per (prompt token)^2 of prefill attention
    chunk_tokens: int = 8192  # chunked-prefill budget per prefill forward
    off_overhead: float = 0.0  # fraction a decode step costs extra while specctl has drafting off
    # A mixture-of-experts target (0 experts: dense, and every term below is 0). ``weight_bytes``
    # is then what every forward reads whatever it routes (attention, shared experts, dense
    # layers, head); each routed expert a forward touches adds ``expert_bytes``.
    moe_experts: int = 0  # routed experts per MoE layer
    moe_active: int = 0  # routed experts each token picks
    expert_bytes: float = 0.0  # one routed expert's weights summed over all MoE layers
    # The share of a forward's tokens after the first that draw their own experts; the others
    # repeat a route already drawn (experts_touched). 1: every token routes on its own, the
    # upper end. The GPU runs' random-weight target fits 0.25 (docs/simulator.md, "Presets").
    moe_spread: float = 1.0
    # The target's tensor-parallel all-reduces, per forward (0: folded into the overheads, as
    # the single-GPU presets have none): a fixed latency each, plus each token's activations
    # over the interconnect (count x hidden x 2 bytes x 2(n-1)/n / bus bandwidth).
    allreduce_count: int = 0  # all-reduces per target forward (two per layer)
    allreduce_latency_s: float = 0.0
    allreduce_token_s: float = 0.0  # seconds per token for all of a forward's all-reduces


@dataclass(frozen=True)
class Workload:
    """Request shapes of the built-in load generator (uniform, inclusive)."""

    input_min: int = 256
    input_max: int = 768
    output_min: int = 128
    output_max: int = 384


def alpha_for(accept_len: float, steps: int) -> float:
    """Per-token acceptance probability that gives ``accept_len`` (bonus included) at ``steps``.

    With a per-token acceptance ``a``, accepted drafts follow a geometric law
    truncated at ``steps``: mean accept length = 1 + a + a^2 + ... + a^steps.
    Solved by bisection because the sum has no closed inverse.
    """
    if not 1.0 <= accept_len <= steps + 1:
        raise ValueError(f"accept_len must be between 1 and steps+1 ({steps + 1}), got {accept_len}")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if mean_accept_len(mid, steps) < accept_len:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def mean_accept_len(alpha: float, steps: int) -> float:
    """Expected tokens per verify (accepted drafts plus the bonus token)."""
    return 1.0 + sum(alpha**k for k in range(1, steps + 1))


def experts_touched(p: PerfParams, tokens: int) -> float:
    """Expected distinct routed experts per MoE layer that ``tokens`` tokens route to.

    Each token picks ``moe_active`` of ``moe_experts`` uniformly; the first and
    a ``moe_spread`` share of the others draw on their own, the rest repeat a
    route already drawn: E * (1 - (1 - k/E)^n), n = 1 + (tokens - 1) x spread.
    Real routing is correlated (the draft tree's siblings sit at one position,
    requests fed alike token ids route alike), so spread 1 is the upper end of
    what a forward reads; at one token it is exactly k, whatever the spread.
    """
    if p.moe_experts <= 0 or tokens <= 0:
        return 0.0
    draws = 1.0 + (tokens - 1) * p.moe_spread
    return p.moe_experts * (1.0 - math.pow(1.0 - p.moe_active / p.moe_experts, draws))


def weights_read(p: PerfParams, tokens: int) -> float:
    """Bytes of target weights one forward over ``tokens`` tokens streams from memory."""
    return p.weight_bytes + p.expert_bytes * experts_touched(p, tokens)


def allreduce_s(p: PerfParams, tokens: int) -> float:
    """The tensor-parallel all-reduces of one target forward over ``tokens`` tokens."""
    return p.allreduce_count * p.allreduce_latency_s + tokens * p.allreduce_token_s


def gemm_s(p: PerfParams, tokens: int) -> float:
    """The target's weight GEMMs over ``tokens`` tokens: bandwidth or compute, whichever binds."""
    return max(weights_read(p, tokens) / p.mem_bw, tokens * p.flops_per_token / p.compute)


def decode_s(p: PerfParams, bs: int, ctx_tokens: int) -> float:
    """One decode forward without speculation: a roofline GEMM term plus the KV read."""
    return (p.step_overhead_s + bs * p.req_overhead_s + gemm_s(p, bs) + allreduce_s(p, bs)
            + ctx_tokens * p.decode_kv_s)


def off_s(p: PerfParams, bs: int, ctx_tokens: int, warm: bool = False) -> float:
    """A step with specctl's drafting off: what no speculation costs, plus ``off_overhead``.

    ``warm``: the draft model keeps its KV cache warm (batch below the ``warm_below``
    setting), which costs one draft forward of one token per request, as SGLang's
    draft extend does.
    """
    cold = decode_s(p, bs, ctx_tokens) * (1.0 + p.off_overhead)
    return cold + draft_forward_s(p, bs, ctx_tokens) if warm else cold


def draft_forward_s(p: PerfParams, tokens: int, ctx_tokens: int) -> float:
    """One forward of the draft head over ``tokens`` query tokens."""
    gemm = max(p.draft_weight_bytes / p.mem_bw, tokens * p.draft_flops_per_token / p.compute)
    return p.draft_overhead_s + gemm + ctx_tokens * p.draft_kv_s


def tree_tokens(steps: int, topk: int, draft_tokens: int | None = None) -> int:
    """Tokens a verify checks per request: the chain's steps+1 at topk 1, else the draft tree.

    SGLang's tree keeps ``--speculative-num-draft-tokens`` (the root included)
    of the 1 + topk + (steps-1)*topk^2 candidates its draft steps produce.
    """
    if topk <= 1:
        return steps + 1
    most = most_draft_tokens(steps, topk)
    return most if draft_tokens is None else max(1, min(draft_tokens, most))


def spec_s(p: PerfParams, bs: int, ctx_tokens: int, steps: int, topk: int = 1,
           draft_tokens: int | None = None) -> float:
    """One speculative cycle: ``steps`` draft forwards, a verify of the draft tokens, a draft extend.

    At topk 1 a cycle drafts a chain and verifies steps+1 tokens a request; at
    topk k every draft step after the first runs on k branches a request and
    the verify checks the tree (``tree_tokens``). For a MoE target the verify's
    extra tokens reach more experts, so they cost weight bytes, not only FLOPs.
    """
    per_req = tree_tokens(steps, topk, draft_tokens)
    tokens = bs * per_req
    drafts = (draft_forward_s(p, bs, ctx_tokens) + (steps - 1) * draft_forward_s(p, bs * topk, ctx_tokens)
              if topk > 1 and steps > 0 else steps * draft_forward_s(p, bs, ctx_tokens))
    verify = (p.step_overhead_s + bs * p.req_overhead_s + gemm_s(p, tokens) + allreduce_s(p, tokens)
              + ctx_tokens * p.verify_kv_s)
    return drafts + verify + draft_forward_s(p, tokens, ctx_tokens)


def prefill_s(p: PerfParams, prompt_lens: list[int], with_draft: bool) -> float:
    """Prefill of newly admitted prompts, in chunks of ``chunk_tokens``; the draft too when drafting."""
    tokens = sum(prompt_lens)
    if tokens == 0:
        return 0.0
    chunks = math.ceil(tokens / p.chunk_tokens)
    read = chunks * weights_read(p, min(tokens, p.chunk_tokens))
    gemm = max(read / p.mem_bw, tokens * p.flops_per_token / p.prefill_compute)
    attn = sum(n * n for n in prompt_lens) * p.prefill_attn_s
    total = chunks * p.prefill_overhead_s + gemm + attn + chunks * p.allreduce_count * p.allreduce_latency_s
    total += tokens * p.allreduce_token_s
    if with_draft:
        total += chunks * p.draft_overhead_s + tokens * p.draft_flops_per_token / p.prefill_compute
    return total
