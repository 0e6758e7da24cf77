#!/usr/bin/env python3
"""An EAGLE-3 head whose weights are written, not trained: it drafts what the dummy target says.

    table_head.py CORR_NOSPEC.json DRAFT_DIR

Why: issue 22 asks for acceptance right after a depth change, and a head with
dummy weights accepts nothing (nor did a head that echoed the target's hidden
state: docs/benchmarks.md, third sitting). The device reaches no model hub,
so this writes one. SGLang's dummy target (``--load-format dummy``) greedily
loops over two tokens, A B A B (2026-12-02: every one of the eight check
prompts), so after token t+1 comes token t+2 = next(t+1), a function of one
token that a no-spec run's outputs (correctness.py's JSON) give as a table.

The head, for run_fast_off.sh's ``MODEL=llama8b-table`` (weights in bf16):

- ``fc`` is zero, so the draft's residual starts at zero: the target's hidden
  state does not enter.
- Its one layer attends with one head (q head 0, kv head 0, the rest zero) from
  the token embedding half of its input to the positions that hold the same
  table token. Each table token gets its own coordinate in RoPE's slowest
  pairs, where a few thousand positions turn the angle by under 0.25 rad. The
  coordinates come from the pseudo-inverse of the tokens' normalised
  embeddings, so they are one-hot for table tokens and near zero for others.
- Value and output write ``C`` times the target's LM-head row of next(t+1)
  from that one-hot. With the final norm's weight at 1 and the LM head the
  target's (the config's ``draft_vocab_size`` is null), the row's product with
  itself outscores every other by about sqrt(hidden).
- An eraser, a second attention head (q head ``CANCEL_Q``, on another kv head),
  reads the hidden half of the input: zero wherever the target's hidden state
  came in (fc is zero), and at a draft step the head's own last output, one
  written row. Its query and key are that row's one-hot (the pseudo-inverse of
  the written rows), so it attends to its own position alone and writes the
  row back negated: each step's residual holds the newest row only.
- The MLP is zero.

The target's embedding and LM head are reproduced here, not read:
``initialize_dummy_weights`` seeds a generator with 1234 for every parameter,
so a CUDA tensor of their shape and dtype drawn the same way holds the same
values. That needs the device's torch and GPU, the ones SGLang draws them with.

Without the eraser (the fourth sitting, 2026-12-02, docs/benchmarks.md) the
GPU read 1.000 at depth 1 right after every change as settled, but 1.000 at
depth 2 and 1.0, 1.75 or 2.5 at depth 3 by the depth before: a later draft's
residual held the previous draft's row beside its own, so the second draft was
right only when the last committed token was the one of its pair with the
larger row norm, and a verify commits accepted + 1 tokens, which kept every
request at depth 2 in the wrong parity. The CPU emulation below reproduces
that (second draft 42 of 85) and, with the eraser, reads every draft of a
three-step chain right (85 of 85 each). Predicted on the GPU: about 1, 2 and 3
accepted drafts at depths 1-3 (what the loop allows), the same right after a
change as settled except after off, where the draft is cold for the positions
decoded while off. Only the tables' tokens are covered, so depth_accept.py
replays the check prompts (``--replay-check-prompts``).

Needs torch and safetensors (the device's SGLang install) only for writing;
the table itself is standard library.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SEED = 1234  # sglang.srt.model_loader.weight_utils.initialize_dummy_weights' default
DUMMY_LOW, DUMMY_HIGH = -1e-3, 1e-3
SCORE = 40.0  # attention logit between two positions of one table token (after 1/sqrt(head_dim))
GAIN = 100.0  # the output row's scale, against a residual of zero
SLOW_PAIRS = 16  # RoPE's slowest frequency pairs used for the table's coordinates (2 dims each)
CANCEL_Q = 4  # the eraser's q head: the first of the second kv head's group (32 q heads on 8 kv heads)


class Refused(Exception):
    """Input this tool will not build from; its message is the one line the user sees."""


def next_token_table(outputs: list[list[int]]) -> dict[int, int]:
    """token -> the token that followed it in every output where it was followed.

    A token followed by two different tokens is left out (its next token depends
    on more than itself), as is one never followed.
    """
    seen: dict[int, set[int]] = {}
    for ids in outputs:
        for a, b in zip(ids, ids[1:]):
            seen.setdefault(a, set()).add(b)
    return {a: next(iter(bs)) for a, bs in sorted(seen.items()) if len(bs) == 1}


def read_outputs(path: str) -> list[list[int]]:
    """The output token ids of correctness.py's JSON (a no-spec run)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise Refused(f"{path}: cannot read it ({exc.__class__.__name__}: {exc})") from None
    outs = data.get("outputs") if isinstance(data, dict) else None
    ids = [o.get("ids") for o in outs or [] if isinstance(o, dict)]
    if not ids or not all(isinstance(x, list) and len(x) > 1 for x in ids):
        raise Refused(f"{path}: not correctness.py's output of a run (outputs[].ids)")
    return ids


def slots(n: int, head_dim: int) -> list[int]:
    """n head dimensions in RoPE's slowest pairs (neox layout: pair i is dims i and i + head_dim / 2)."""
    half = head_dim // 2
    pairs = range(half - SLOW_PAIRS, half)
    dims = [*pairs, *(p + half for p in pairs)]
    if n > len(dims):
        raise Refused(f"{n} table tokens; the head has room for {len(dims)} (SLOW_PAIRS)")
    return dims[:n]


def target_rows(cfg: dict[str, Any], dev: str = "cuda") -> Any:
    """The dummy target's embedding (= its LM head), drawn as initialize_dummy_weights draws it."""
    import torch

    gen = torch.Generator(device=dev)
    gen.manual_seed(SEED)
    lm = torch.empty((cfg["vocab_size"], cfg["hidden_size"]), dtype=torch.bfloat16, device=dev)
    return lm.uniform_(DUMMY_LOW, DUMMY_HIGH, generator=gen)


def rms_norm(x: Any, eps: float) -> Any:
    """SGLang's RMSNorm with weight 1, in float32 (the head's norms are all 1)."""
    import torch

    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def draft_weights(table: dict[int, int], cfg: dict[str, Any], lm: Any) -> dict[str, Any]:
    """The head's tensors by checkpoint name; see the module doc. ``lm``: the target's rows (target_rows)."""
    import torch

    hidden, head_dim = cfg["hidden_size"], cfg["head_dim"]
    heads, kv_heads, inter = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"]
    dev = lm.device
    keys = sorted(table)
    coords = torch.linalg.pinv(rms_norm(lm[keys], cfg["rms_norm_eps"]))  # (hidden, n): input_layernorm'd rows -> I
    succ = sorted(set(table.values()))
    written = unit_rows(lm, succ)  # what the table head adds to the residual, per GAIN
    back = torch.linalg.pinv(written)  # (hidden, m): hidden_norm(GAIN * row) = row -> its one-hot
    dims = torch.tensor(slots(max(len(keys), len(succ)), head_dim), device=dev)
    scale = (SCORE * head_dim ** 0.5) ** 0.5
    z = dict(device=dev, dtype=torch.float32)
    q = torch.zeros(heads * head_dim, 2 * hidden, **z)
    k = torch.zeros(kv_heads * head_dim, 2 * hidden, **z)
    v = torch.zeros(kv_heads * head_dim, 2 * hidden, **z)
    o = torch.zeros(hidden, heads * head_dim, **z)
    # the table: q head 0 / kv head 0 read the embedding half, and write next(t)'s row
    n = len(keys)
    q[dims[:n], :hidden] = scale * coords.T
    k[dims[:n], :hidden] = scale * coords.T
    v[:n, :hidden] = coords.T  # the one-hot, unrotated
    o[:, :n] = GAIN * unit_rows(lm, [table[t] for t in keys]).T
    # the eraser: q head CANCEL_Q / its kv head read the hidden half, which is zero wherever the
    # target's hidden state came in (fc is zero) and the last draft's row at a draft step, so it
    # attends to the query's own position and takes that row back out of the residual
    m, qh, kvh = len(succ), CANCEL_Q, CANCEL_Q // (heads // kv_heads)
    q[qh * head_dim + dims[:m], hidden:] = scale * back.T
    k[kvh * head_dim + dims[:m], hidden:] = scale * back.T
    v[kvh * head_dim + torch.arange(m, device=dev), hidden:] = back.T
    o[:, qh * head_dim:qh * head_dim + m] = -GAIN * written.T
    ones = torch.ones(hidden, **z)
    tensors = {
        "midlayer.self_attn.q_proj.weight": q, "midlayer.self_attn.k_proj.weight": k,
        "midlayer.self_attn.v_proj.weight": v, "midlayer.self_attn.o_proj.weight": o,
        "midlayer.mlp.gate_proj.weight": torch.zeros(inter, hidden, **z),
        "midlayer.mlp.up_proj.weight": torch.zeros(inter, hidden, **z),
        "midlayer.mlp.down_proj.weight": torch.zeros(hidden, inter, **z),
        "midlayer.input_layernorm.weight": ones, "midlayer.hidden_norm.weight": ones,
        "midlayer.post_attention_layernorm.weight": ones, "norm.weight": ones,
        "fc.weight": torch.zeros(hidden, 3 * hidden, **z),
    }
    return {name: t.to(torch.bfloat16).contiguous().cpu() for name, t in tensors.items()}


def unit_rows(lm: Any, tokens: list[int]) -> Any:
    """The target's LM-head rows of ``tokens`` at RMS 1, in float32."""
    rows = lm[tokens].float()
    return rows / rows.pow(2).mean(-1, keepdim=True).sqrt()


def self_check(weights: dict[str, Any], cfg: dict[str, Any], runs: list[tuple[list[int], list[int]]],
               lm: Any, every: int = 17, depth: int = 3) -> str:
    """The head's forward, emulated: how often its drafts 1..depth are the target's next tokens.

    ``runs``: (prompt ids, no spec's output ids) pairs. At every ``every``-th
    output position the head drafts ``depth`` tokens as SGLang's chain does: the
    first from the committed tokens with a zero hidden state (fc is zero), each
    next one from the last draft with the head's own last output as its hidden
    state and residual; every head attends with neox RoPE and causal softmax, and
    the target's LM head reads the result. A draft counts where every draft
    before it was right too (as a verify accepts). What SGLang's kernels do
    differently, depth_accept.py measures on the server.
    """
    import torch

    hidden, hd, heads = cfg["hidden_size"], cfg["head_dim"], cfg["num_attention_heads"]
    group = heads // cfg["num_key_value_heads"]
    eps, dev = cfg["rms_norm_eps"], lm.device
    lm = lm.float()
    w = {k: t.to(dev).float() for k, t in weights.items() if "self_attn" in k}
    inv = cfg.get("rope_theta", 10000.0) ** (-torch.arange(0, hd, 2, device=dev).float() / hd)

    def rope(x: Any, n: int) -> Any:
        ang = torch.arange(n, device=dev).float()[:, None] * inv[None]
        c, s_ = torch.cos(ang), torch.sin(ang)
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return torch.cat([x1 * c - x2 * s_, x2 * c + x1 * s_], -1)

    def draft(tokens: list[int], chain: list[Any]) -> tuple[int, Any]:
        """Next draft after ``tokens``, whose last len(chain) positions had those hidden states."""
        hid = torch.zeros(len(tokens), hidden, device=dev)
        for i, h in enumerate(chain):
            hid[len(tokens) - len(chain) + i] = rms_norm(h, eps)
        inp = torch.cat([rms_norm(lm[tokens], eps), hid], -1)
        n = len(tokens)
        q = rope((inp[-1:] @ w["midlayer.self_attn.q_proj.weight"].T).view(1, heads, hd).transpose(0, 1), n)[:, -1]
        k = rope((inp @ w["midlayer.self_attn.k_proj.weight"].T).view(n, -1, hd).transpose(0, 1), n)
        v = (inp @ w["midlayer.self_attn.v_proj.weight"].T).view(n, -1, hd).transpose(0, 1)
        kv = torch.arange(heads, device=dev) // group
        att = torch.softmax((k[kv] @ q[:, :, None]).squeeze(-1) / hd ** 0.5, -1)  # (heads, n)
        out_heads = (att[:, None, :] @ v[kv]).reshape(heads * hd)
        residual = chain[-1] if chain else torch.zeros(hidden, device=dev)
        out = residual + out_heads @ w["midlayer.self_attn.o_proj.weight"].T
        return int((rms_norm(out, eps) @ lm.T).argmax()), out

    right, total = [0] * depth, 0
    for prompt, ids in runs:
        for j in range(0, len(ids) - depth, every):
            tokens, chain, ok = prompt + ids[:j + 1], [], True
            for step in range(depth):
                y, out = draft(tokens, chain)
                ok = ok and y == ids[j + 1 + step]
                right[step] += ok
                tokens, chain = tokens + [y], chain + [out]
            total += 1
    counts = ", ".join(f"draft {i + 1} {r}/{total}" for i, r in enumerate(right))
    return f"self-check (emulated, a draft counted where those before it were right): {counts}"


def write(corr: str, draft_dir: str) -> str:
    """Build the head into ``draft_dir`` (beside its config.json, which models.py writes)."""
    cfg_path = Path(draft_dir) / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, ValueError) as exc:
        raise Refused(f"{cfg_path}: cannot read it ({exc.__class__.__name__})") from None
    needed = ("hidden_size", "head_dim", "num_attention_heads", "num_key_value_heads", "intermediate_size",
              "rms_norm_eps", "vocab_size")
    if not isinstance(cfg, dict) or (missing := [k for k in needed if k not in cfg]):
        raise Refused(f"{cfg_path}: not a Llama EAGLE-3 config (missing {', '.join(missing) if cfg else 'all'})")
    if cfg.get("draft_vocab_size") not in (None, cfg.get("vocab_size")):
        raise Refused(f"{cfg_path}: the head needs the target's LM head (no draft_vocab_size)")
    outputs = read_outputs(corr)
    table = next_token_table(outputs)
    if not table:
        raise Refused(f"{corr}: no token is followed by one token only")
    slots(len(table), cfg["head_dim"])
    if cfg["num_attention_heads"] // cfg["num_key_value_heads"] > CANCEL_Q or cfg["num_key_value_heads"] < 2:
        raise Refused(f"{cfg_path}: the eraser needs q head {CANCEL_Q} on a kv head of its own "
                      f"({cfg['num_attention_heads']} q heads on {cfg['num_key_value_heads']} kv heads)")
    from safetensors.torch import save_file

    lm = target_rows(cfg)  # drawn once: 1 GB on the GPU, for the weights and the check alike
    weights = draft_weights(table, cfg, lm)
    save_file(weights, str(Path(draft_dir) / "model.safetensors"))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import correctness  # the prompts whose outputs these are (correctness.py's defaults: 8, seed 1)

    runs = [(p["input_ids"], ids) for p, ids in zip(correctness.prompts(len(outputs), 1), outputs)]
    return f"table head: {len(table)} tokens -> {draft_dir}/model.safetensors; " + self_check(weights, cfg, runs, lm)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: table_head.py CORR_NOSPEC.json DRAFT_DIR", file=sys.stderr)
        return 2
    try:
        print(write(*argv))
    except Refused as exc:
        print(f"table_head.py: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
