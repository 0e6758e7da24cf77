#!/usr/bin/env python3
"""The target and EAGLE-3 draft configs the GPU runs start SGLang with (``--load-format dummy``).

    models.py MODEL TARGET_DIR DRAFT_DIR

writes ``TARGET_DIR/config.json`` and ``DRAFT_DIR/config.json`` for MODEL:

- ``llama8b``: Llama-3.1-8B's shapes and an EAGLE-3 head for it (every figure in
  docs/benchmarks.md before issue 23 ran on these; the files are byte for byte what
  run_fast_off.sh wrote before MODEL existed).
- ``qwen3moe``: Qwen3-30B-A3B's shapes (a mixture of experts: 128 experts, 8 a
  token) and an EAGLE-3 head shaped for it (docs/benchmarks.md).
- ``llama8b-table``: llama8b's target and its head with the target's LM head
  (``draft_vocab_size`` null), for weights that table_head.py writes: a head
  that drafts what the dummy target says, for acceptance after a depth change.

Why config files only: the device reaches no model hub, and random weights are
all a throughput run needs (acceptance is simulated, docs/benchmarks.md);
the shapes decide what every step costs. Standard library only, so that it
runs on the device before anything else is installed.

Memory on one H200 (143,771 MiB = 140.4 GiB), bf16, MEM_FRAC 0.85:

- Qwen3-30B-A3B target: 30.53 B parameters = 61.1 GB = 56.9 GiB. Per layer
  18.9 M attention (q 2048x4096, k and v 2048x512, o 4096x2048) and 604.2 M
  in the experts (128 x 3 x 2048 x 768; 95 % of all weights), x 48 layers,
  plus embedding and LM head 2 x 151,936 x 2,048 = 0.62 B. Active a token:
  3.35 B (8 experts of 128).
- KV a token: 48 layers x 2 (K, V) x 4 KV heads x 128 x 2 bytes = 96 KiB
  (Llama-3.1-8B: 32 x 2 x 8 x 128 x 2 = 128 KiB); the draft adds 1 layer's
  2 KiB (Llama's draft 4 KiB).
- Draft: 0.46 B parameters = 0.85 GiB while loading, of which its own
  embedding (151,936 x 2,048, 0.58 GiB) is swapped for the target's once both
  are up (SGLang's EAGLE worker ``init_lm_head`` -> ``set_embed``).
- KV pool: SGLang keeps MEM_FRAC of the GPU for weights + pools:
  0.85 x 140.4 = 119.3 GiB; less both models' weights and about 1.2 GiB
  more (the figure that makes this arithmetic give the 805,547 tokens SGLang
  0.5.17 allocated for Llama-3.1-8B + draft, docs/benchmarks.md):
  119.3 - 56.9 - 0.85 - 1.2 = 60.4 GiB / 98 KiB = about 646,000 tokens for
  the specctl server, about 669,000 for a server without speculation
  (MEM_FRAC 0.80: about 571,000). The sweep at 256 requests of 512 +- 50 %
  in and 256 +- 50 % out holds about 200,000; the decode-only loads
  (256 x 2,256 or 2,512 tokens, 578,000-643,000) only just fit. Outside the
  pool stay 0.15 x 140.4 = 21 GiB for CUDA graphs and activations.
- Two MoE servers do not fit one H200 together (2 x 56.9 GiB of weights
  before any KV), so ``offpair`` and ``earlypub`` are for Llama only.
- Mixtral-8x7B, the other MoE of issue 23, is 46.7 B parameters = 93.4 GB
  (87 GiB): 119.3 - 87 = 32 GiB of pool at 0.85, about 250,000 tokens at
  128 KiB; it would fit, tightly, but it is not needed: Qwen3MoeForCausalLM
  captures EAGLE-3's hidden states in SGLang 0.5.17 (docs/benchmarks.md).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

Config = dict[str, Any]


def llama8b() -> tuple[Config, Config]:
    """Llama-3.1-8B and an EAGLE-3 head for it (draft vocabulary 32,000, as the public heads use)."""
    common = {"model_type": "llama", "bos_token_id": 128000, "head_dim": 128, "hidden_act": "silu",
              "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
              "num_attention_heads": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
              "rope_theta": 500000.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
              "use_cache": True, "vocab_size": 128256}
    target = dict(common, architectures=["LlamaForCausalLM"], num_hidden_layers=32,
                  eos_token_id=[128001, 128008, 128009], max_position_embeddings=131072,
                  attention_bias=False, attention_dropout=0.0, mlp_bias=False, pretraining_tp=1,
                  rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 8192, "rope_type": "llama3"})
    draft = dict(common, architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1,
                 eos_token_id=128001, pad_token_id=0, max_position_embeddings=8192,
                 draft_vocab_size=32000)
    return target, draft


def qwen3moe() -> tuple[Config, Config]:
    """Qwen3-30B-A3B and an EAGLE-3 head shaped for it.

    The target's values are Qwen3-30B-A3B's public config.json as written
    from memory (no hub here): 48 layers, hidden 2,048, 32 query heads and 4
    KV heads of 128, 128 experts of intermediate size 768 with 8 a token
    (renormalised), no dense layers (``mlp_only_layers`` empty,
    ``decoder_sparse_step`` 1), vocabulary 151,936, RoPE theta 1e6. The
    fields SGLang 0.5.17's Qwen3MoeForCausalLM reads are checked against its
    source by tests/test_bench_models.py.

    The draft is LlamaForCausalLMEagle3 with 1 layer at the target's hidden
    size and heads, intermediate size 6,144 (the target config's dense
    ``intermediate_size``), the target's vocabulary for its embedding (SGLang
    swaps it for the target's) and a draft vocabulary of 32,000 for its LM
    head, as the public EAGLE-3 heads for Qwen3-30B-A3B are built (recalled,
    not checked here). Why 32,000 and not the target's 151,936: it is what
    such heads use, so the draft's cost a step is that of a real one (its LM
    head 65.5 M parameters instead of 311 M), and it keeps the Llama runs'
    draft layout, so the two targets differ in the target alone.
    """
    target = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
              "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 151643,
              "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
              "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
              "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [],
              "moe_intermediate_size": 768, "norm_topk_prob": True, "num_attention_heads": 32,
              "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
              "num_key_value_heads": 4, "output_router_logits": False, "rms_norm_eps": 1e-06,
              "rope_scaling": None, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
              "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
              "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}
    draft = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
             "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 151643,
             "eos_token_id": 151645, "pad_token_id": 0, "head_dim": 128, "hidden_act": "silu",
             "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
             "max_position_embeddings": 40960, "mlp_bias": False, "num_attention_heads": 32,
             "num_hidden_layers": 1, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
             "rope_scaling": None, "rope_theta": 1000000.0, "tie_word_embeddings": False,
             "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 151936,
             "draft_vocab_size": 32000}
    return target, draft


def llama8b_table() -> tuple[Config, Config]:
    """llama8b with a head that shares the target's LM head, so table_head.py's rows are the target's.

    ``draft_vocab_size`` is null rather than absent: SGLang's Eagle3 model reads the attribute, and
    transformers 5 raises on a missing one (the first GPU start of this head failed so).
    """
    target, draft = llama8b()
    return target, {**draft, "draft_vocab_size": None}


MODELS = {"llama8b": llama8b, "qwen3moe": qwen3moe, "llama8b-table": llama8b_table}


def write(model: str, target_dir: Path, draft_dir: Path) -> None:
    """Both config.json files, in the layout run_fast_off.sh has always written (indent 1, no newline)."""
    target, draft = MODELS[model]()
    for folder, config in ((target_dir, target), (draft_dir, draft)):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in MODELS:
        print(f"usage: models.py {{{'|'.join(MODELS)}}} TARGET_DIR DRAFT_DIR", file=sys.stderr)
        return 2
    write(argv[0], Path(argv[1]), Path(argv[2]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
