"""Qwen3-30B-A3B's shapes and its EAGLE-3 head, counted into the bytes and FLOPs the cost model reads.

The target of the MoE GPU runs (bench/gpu/models.py ``qwen3moe``; docs/benchmarks.md) from its
public config.json: 48 layers, hidden 2048, 32 query / 4 KV heads of 128, 128 experts of
intermediate 768 with 8 a token, vocabulary 151,936, bf16. Apart from presets.py so the preset
reads as its calibration, and the arithmetic as what it is: counting.
"""

from __future__ import annotations

LAYERS, HIDDEN, VOCAB = 48, 2048, 151_936
Q_HEADS, KV_HEADS, HEAD_DIM = 32, 4, 128
ATTN_PARAMS = LAYERS * (  # q 2048x4096, k and v 2048x512, o 4096x2048, q/k norms
    2 * HIDDEN * Q_HEADS * HEAD_DIM + 2 * HIDDEN * KV_HEADS * HEAD_DIM + 2 * HEAD_DIM)  # 0.906 B
ROUTER_NORM_PARAMS = LAYERS * (128 * HIDDEN + 2 * HIDDEN) + HIDDEN
EMBED_HEAD_PARAMS = 2 * VOCAB * HIDDEN  # untied; 0.62 B
# Read by every forward whatever it routes: attention, routers, norms, embedding and LM head
# (3.08 GB). The embedding is a lookup, but h200-llama8b's weight_bytes counts it (8.03 B
# parameters), and its mem_bw was fitted so: counted the same way here.
ALWAYS_BYTES = (ATTN_PARAMS + ROUTER_NORM_PARAMS + EMBED_HEAD_PARAMS) * 2
EXPERT_BYTES = 3 * HIDDEN * 768 * LAYERS * 2  # one expert, 48 layers: 453 MB
ACTIVE_PARAMS = ALWAYS_BYTES / 2 + 8 * EXPERT_BYTES / 2  # 3.35 B, as published
# KV a context token: 48 layers x 4 KV heads x 128 x (K, V) x 2 bytes = 96 KiB (Llama-8B 128 KiB).
KV_BYTES = LAYERS * KV_HEADS * HEAD_DIM * 2 * 2
# The EAGLE-3 head a draft forward streams (its embedding is the target's, a lookup): q on the
# 2h input 4096x4096, k and v 4096x512, o 4096x2048, MLP 3 x 2048 x 6144, fc 6144 -> 2048,
# LM head 2048 x 32000: 0.145 B parameters (Llama-8B's head, counted the same way: 0.44 B).
EAGLE3_PARAMS = (2 * HIDDEN * 4096 + 2 * 2 * HIDDEN * 512 + 4096 * HIDDEN
                 + 3 * HIDDEN * 6144 + 3 * HIDDEN * HIDDEN + HIDDEN * 32_000)
