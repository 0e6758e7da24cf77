"""bench/gpu/table_head.py: the head written from no spec's outputs, in the parts that run without a GPU.

The tensors need the device's torch and GPU (the target's dummy rows are
drawn again there); what decides which tokens the head covers, and every
refusal, runs here, on the GPU's own outputs and on small ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench  # tests a bench/ script: the second tier

GPU = Path(__file__).resolve().parent.parent / "bench" / "gpu"
OUTPUTS = GPU / "results" / "depth" / "triton-nospec-outputs.json"
sys.path.insert(0, str(GPU))
import table_head  # noqa: E402  (bench/gpu is not a package)


def tool(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(GPU / "table_head.py"), *argv], capture_output=True, text=True,
                          timeout=60)


def test_the_gpus_outputs_loop_over_two_tokens_and_the_table_covers_every_one() -> None:
    # the premise: the dummy target's greedy outputs settle into A B A B, so the next token is a function of one
    outputs = table_head.read_outputs(str(OUTPUTS))
    assert len(outputs) == 8
    for ids in outputs:
        tail = ids[2:]
        assert all(a == b for a, b in zip(tail, tail[2:])), ids[:8]
    table = table_head.next_token_table(outputs)
    assert len(table) == 18
    loop = {t for ids in outputs for t in ids[2:]}
    assert all(table[table[t]] == t for t in loop)  # the loops' pairs answer each other (A -> B -> A)
    assert {b for ids in outputs for b in ids[1:]} <= set(table.values())  # every drafted position is covered
    dims = table_head.slots(len(table), 128)
    assert len(set(dims)) == 18 and all(48 <= d < 64 or 112 <= d < 128 for d in dims)  # RoPE's slowest pairs


def test_a_token_followed_by_two_tokens_is_left_out() -> None:
    table = table_head.next_token_table([[5, 6, 5, 6], [7, 6, 9], [5, 6]])
    assert table == {5: 6, 7: 6}  # 6 was followed by 5 and by 9; 9 by nothing


def test_more_tokens_than_the_slow_pairs_hold_are_refused() -> None:
    with pytest.raises(table_head.Refused, match="33 table tokens; the head has room for 32"):
        table_head.slots(33, 128)


@pytest.mark.parametrize(("content", "said"), [
    (None, "cannot read it"),
    ("{not json", "cannot read it"),
    (json.dumps({"outputs": [{"error": "timeout"}]}), "not correctness.py's output of a run"),
    (json.dumps({"outputs": [{"ids": [1]}]}), "not correctness.py's output of a run"),
])
def test_outputs_it_cannot_build_from_are_one_line(tmp_path: Path, content: str | None, said: str) -> None:
    corr = tmp_path / "corr.json"
    if content is not None:
        corr.write_text(content)
    draft = tmp_path / "draft"
    subprocess.run([sys.executable, str(GPU / "models.py"), "llama8b-table", str(tmp_path / "t"), str(draft)],
                   check=True)
    done = tool(str(corr), str(draft))
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and [p.name for p in draft.iterdir()] == ["config.json"]


def test_a_head_with_its_own_vocabulary_is_refused(tmp_path: Path) -> None:
    # models.py's llama8b head maps 32,000 draft ids; the rows written here are the target's LM head's
    draft = tmp_path / "draft"
    subprocess.run([sys.executable, str(GPU / "models.py"), "llama8b", str(tmp_path / "t"), str(draft)], check=True)
    done = tool(str(OUTPUTS), str(draft))
    assert done.returncode == 2 and "needs the target's LM head (no draft_vocab_size)" in done.stderr
    assert not (draft / "model.safetensors").exists()


def test_usage_is_one_line() -> None:
    done = tool("only-one")
    assert done.returncode == 2 and done.stderr == "usage: table_head.py CORR_NOSPEC.json DRAFT_DIR\n"


def test_a_config_without_the_heads_shapes_is_refused(tmp_path: Path) -> None:
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps({"vocab_size": 128256}))
    done = tool(str(OUTPUTS), str(draft))
    assert done.returncode == 2 and "not a Llama EAGLE-3 config (missing hidden_size, head_dim" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("heads,kv_heads", [(32, 1), (32, 4)])
def test_a_head_whose_eraser_would_share_the_tables_kv_head_is_refused(tmp_path: Path, heads: int,
                                                                        kv_heads: int) -> None:
    draft = tmp_path / "draft"
    draft.mkdir()
    cfg = {**toy_config(), "num_attention_heads": heads, "num_key_value_heads": kv_heads}
    (draft / "config.json").write_text(json.dumps(cfg))
    done = tool(str(OUTPUTS), str(draft))
    assert done.returncode == 2, done.stderr
    assert f"the eraser needs q head 4 on a kv head of its own ({heads} q heads on {kv_heads} kv heads)" in done.stderr
    assert not (draft / "model.safetensors").exists()


def toy_config() -> dict[str, object]:
    """A Llama EAGLE-3 head's shapes, small enough for a CPU: 8 q heads on 2 kv heads, as the real 32 on 8."""
    return {"hidden_size": 256, "head_dim": 32, "num_attention_heads": 8, "num_key_value_heads": 2,
            "intermediate_size": 64, "rms_norm_eps": 1e-5, "vocab_size": 3000, "rope_theta": 500000.0}


def test_the_eraser_keeps_every_draft_of_a_chain_right() -> None:
    """The fourth sitting's head drafted its second token right at one parity only (depth 2 read 1.000).

    Needs torch (the device's SGLang install has it; CI does not, so this skips there). With the
    eraser every draft of a three-step chain is right; without it, only those whose bonus token
    has the larger row, which is the GPU's depth-2 reading.
    """
    torch = pytest.importorskip("torch")
    cfg = toy_config()
    pairs = [(11, 12), (500, 901), (1400, 2999), (77, 2500)]
    runs = []
    for n, (a, b) in enumerate(pairs):
        prompt = [100 + 37 * n + 5 * i for i in range(40)]
        runs.append((prompt, [a, b] * 30))
    table = table_head.next_token_table([ids for _, ids in runs])
    lm = table_head.target_rows(cfg, "cpu")
    weights = table_head.draft_weights(table, cfg, lm)
    assert table_head.self_check(weights, cfg, runs, lm, every=5).endswith(
        "draft 1 48/48, draft 2 48/48, draft 3 48/48")
    hd = cfg["head_dim"]
    weights["midlayer.self_attn.o_proj.weight"][:, table_head.CANCEL_Q * hd:(table_head.CANCEL_Q + 1) * hd] = 0
    without = table_head.self_check(weights, cfg, runs, lm, every=5)
    second = int(without.split("draft 2 ")[1].split("/")[0])
    assert 0 < second < 48, without  # the parity trap: right at one of each pair's two phases
    assert torch.is_tensor(lm)
