"""The report's own system as a simulator preset: 8 RTX PRO 6000 Blackwell at TP 8, GLM-5-NVFP4.

Apart from presets.py because it shares nothing with the H200 presets but the
model: its own GPU, model counts and the report's four points
(docs/simulator.md, "Presets").
"""

from __future__ import annotations

from dataclasses import replace

from specctl.runtime.sim.costs import PerfParams, Workload
from specctl.runtime.sim.preset_model import GpuSpec, Preset

# The report's system (docs/simulator.md, "Presets"): 8 RTX PRO 6000
# Blackwell at TP 8 over PCIe Gen5 (no NVLink), GLM-5-NVFP4, EAGLE-3 topk 4 /
# 2 steps / 16 draft tokens, FlashInfer. GLM-5's public figures (its technical
# report, arXiv 2602.15763; the DeepSeek-V3 / Kimi K2.5 family): 78 layers (3
# dense + 75 MoE), hidden 6144, 256 routed experts of which 8 per token plus 1
# shared (MoE intermediate 2048, dense 12288), MLA (64 heads, q LoRA 2048, KV
# LoRA 512, QK head 192, V head 256) with a DSA indexer (32 heads x 128),
# vocabulary 154880: 743 B parameters, 40.0 B active per token, as reported
# (744 B / 40 B). Counted from those shapes:
_GLM5_LAYERS, _GLM5_HIDDEN = 78, 6144
_GLM5_EXPERT_PARAMS = 3 * _GLM5_HIDDEN * 2048  # one routed expert of one MoE layer
_NVFP4 = 0.5625  # bytes per parameter: 4-bit values + one FP8 scale per 16
_GLM5_ATTN_PARAMS = 12.785e9  # MLA + DSA indexer, all 78 layers
_GLM5_SHARED_DENSE_PARAMS = 2.831e9 + 0.679e9  # 75 shared experts + 3 dense MLPs
_GLM5_ROUTER_HEAD_PARAMS = 0.118e9 + 0.952e9  # 75 routers + the LM head (the embedding is a lookup)
# Assumed quantisation (a ModelOpt-style NVFP4 checkpoint): the MLPs' linears
# (routed, shared, dense) NVFP4; attention, routers and head bf16.
_GLM5_ALWAYS_BYTES = (_GLM5_ATTN_PARAMS + _GLM5_ROUTER_HEAD_PARAMS) * 2 + _GLM5_SHARED_DENSE_PARAMS * _NVFP4
_GLM5_EXPERT_BYTES = _GLM5_EXPERT_PARAMS * 75 * _NVFP4  # 1.59 GB; all 256: 408 GB (51 GB a GPU)
_GLM5_ACTIVE_PARAMS = 40.0e9
# An EAGLE-3 head shaped for it: one decoder layer on the 2h input, fc 3h -> h,
# MLP 16384, a 32k draft vocabulary: about 0.75 B parameters in bf16.
_GLM5_EAGLE3_PARAMS = 0.75e9
_RTX_PRO_6000_BW = 1.792e12  # GDDR7, 512-bit at 28 Gb/s

RTX_8GPU_REPORT = Preset(
    name="rtx-8gpu-report",
    description="8x RTX PRO 6000 Blackwell (TP 8, PCIe Gen5), GLM-5-NVFP4 MoE, EAGLE-3 topk 4 / 2 steps / "
                "16 draft tokens, FlashInfer: the public report's system",
    model_path="zai-org/GLM-5-NVFP4",
    draft_model_path="sim/glm-5-eagle3",
    tp_size=8,
    # as nvidia-smi names it, 97887 MiB, 600 W; boost clock 2617 MHz
    gpu=GpuSpec("NVIDIA RTX PRO 6000 Blackwell Server Edition", 97_887 * 2**20, 600.0, 35.0, 2617.0, 180.0),
    params=PerfParams(
        weight_bytes=_GLM5_ALWAYS_BYTES,  # 29.7 GB read by every forward
        flops_per_token=2 * _GLM5_ACTIVE_PARAMS,
        mem_bw=8 * _RTX_PRO_6000_BW * 0.80,  # 11.5 TB/s: 80 % of 8 x 1.79 TB/s
        compute=1.6e15,  # 8 x ~400 TFLOP/s (bf16 attention, NVFP4 experts) at 50 %
        decode_kv_s=576 * 2 * _GLM5_LAYERS / (_RTX_PRO_6000_BW * 0.80),  # MLA latent, bf16, whole on each rank
        # fitted: 50x decode's; the tree's 16 tokens each read the latent cache (docs/simulator.md, "Presets")
        verify_kv_s=3.14e-6,
        step_overhead_s=1.5e-3,
        req_overhead_s=20e-6,
        draft_weight_bytes=_GLM5_EAGLE3_PARAMS * 2,
        draft_flops_per_token=2 * _GLM5_EAGLE3_PARAMS,
        draft_kv_s=8 * 128 * 2 * 2 / (_RTX_PRO_6000_BW * 0.80),  # one GQA layer's KV
        # fitted: a TP-8 draft forward (its all-reduces over PCIe, the vocab gather, launches)
        draft_overhead_s=1.17e-3,
        prefill_overhead_s=10e-3,
        prefill_compute=400e12,
        prefill_attn_s=2e-12,
        moe_experts=256,
        moe_active=8,
        expert_bytes=_GLM5_EXPERT_BYTES,
        allreduce_count=2 * _GLM5_LAYERS,  # after attention and after the MLP, every layer
        allreduce_latency_s=29.2e-6,  # fitted: 4.6 ms a forward at one token
        allreduce_token_s=0.156e-3,  # fitted: 3.35 MB a token at ~21 GB/s bus bandwidth
    ),
    workload=Workload(256, 768, 128, 384),
    accept_len=2.7,  # assumed (at most 3 at 2 steps): the target's token in the draft's top 4 87 % of the time
    steps=2,
    topk=4,
    draft_tokens=16,
    max_running=256,
    kv_pool_tokens=1_500_000,
    mem_fraction_static=0.90,
    attention_backend="flashinfer",
    measured={"nospec": {1: 92.7, 128: 773.0}, "eagle3": {1: 80.9, 128: 354.0}},
    source='public 8-GPU report quoted in docs/simulator.md; "100+ concurrent" taken as 128',
    warmup_s=120.0,  # the report's method is unknown: compare at steady state (a request lasts ~40 s at c=128)
    window_s=240.0,
)

# The same server as specctl can steer it: EAGLE-3 at topk 1, 3 steps, 4 draft
# tokens (SGLang's adaptive machinery accepts topk 1 only: docs/sglang-plugin.md, "Tree drafts"). The
# verify checks 4 tokens a request instead of 16, so its KV term is a quarter
# of the tree's. The report says speculation reached 96.1 tok/s "after tuning"
# without saying what was tuned; reading it as this chain, the accept length
# it implies is 2.02 (a per-token acceptance of 0.56, against the tree's 0.87
# for "in the draft's top 4"), fitted to that one point; docs/sglang-plugin.md, "Tree drafts" varies it.
RTX_8GPU_REPORT_TOPK1 = replace(
    RTX_8GPU_REPORT,
    name="rtx-8gpu-report-topk1",
    description="the report's system (8x RTX PRO 6000, GLM-5-NVFP4, TP 8) with EAGLE-3 topk 1 / 3 steps / "
                "4 draft tokens, as specctl steers it",
    params=replace(RTX_8GPU_REPORT.params, verify_kv_s=RTX_8GPU_REPORT.params.verify_kv_s * 4 / 16),
    accept_len=2.02,
    steps=3,
    topk=1,
    draft_tokens=None,
    measured={"nospec": {1: 92.7, 128: 773.0}, "eagle3": {1: 96.1}},
    source='public 8-GPU report quoted in docs/simulator.md: its no-speculation points and its '
           '"96.1 tok/s after tuning", read as this chain',
)
