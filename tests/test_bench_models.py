"""The models a GPU run loads (bench/gpu/models.py) and run_fast_off.sh's MODEL knob.

The GPU machine reaches no model hub, so the target and the EAGLE-3 draft are
config files this repository writes and SGLang fills with random weights; a
field SGLang reads and the file lacks costs a device call to find out. These
tests read what SGLang's model classes read from its release wheels' source
(tests/support/sglang_source.py), and run run_fast_off.sh's phases themselves
against the stand-in SGLang (tests/standin_sglang: SGLang's start-up, then the
simulator's API) in a private mount and network namespace, so that the
script's /root folders and port 30000 are the test's own.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from support.sglang_source import SglangSource

pytestmark = pytest.mark.bench  # tests a bench/ script: the second tier

REPO = Path(__file__).resolve().parent.parent
GPU = REPO / "bench" / "gpu"
STANDIN = REPO / "tests" / "standin_sglang" / "sglang"
RUN_TIMEOUT_S = 240  # stops a hung run only; a run here takes 10-40 s


def write_configs(tmp_path: Path, model: str) -> tuple[dict, dict]:
    """models.py's target and draft configs for ``model``, read back as JSON."""
    target, draft = tmp_path / "target", tmp_path / "draft"
    done = subprocess.run([sys.executable, str(GPU / "models.py"), model, str(target), str(draft)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads((target / "config.json").read_text()), json.loads((draft / "config.json").read_text())


def config_reads(tree: ast.Module, classes: set[str]) -> tuple[set[str], set[str]]:
    """The config fields ``classes`` read: (directly as ``config.X``, with a default or a guard).

    A direct read of a field the file lacks stops the server at start-up; a
    read through getattr/hasattr takes a default instead, which may not be the
    real model's (``head_dim`` defaults to hidden_size / heads).
    """
    direct: set[str] = set()
    guarded: set[str] = set()
    for cls in tree.body:
        if not (isinstance(cls, ast.ClassDef) and cls.name in classes):
            continue
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute) and is_config(node.value):
                direct.add(node.attr)
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
                    and is_config(node.args[0]) and isinstance(node.args[1], ast.Constant)):
                guarded.add(node.args[1].value)
    return direct, guarded


def is_config(node: ast.expr) -> bool:
    """``config`` or ``self.config``."""
    return (isinstance(node, ast.Name) and node.id == "config") or (
        isinstance(node, ast.Attribute) and node.attr == "config"
        and isinstance(node.value, ast.Name) and node.value.id == "self")


def class_def(tree: ast.Module, name: str) -> ast.ClassDef:
    found = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    assert found, f"no class {name}"
    return found[0]


def method_names(cls: ast.ClassDef) -> set[str]:
    return {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}


# ------------------------------------------------------------------ the configs


def test_llama8b_configs_are_the_ones_every_llama_figure_ran_on(tmp_path: Path) -> None:
    """Byte for byte what run_fast_off.sh wrote before MODEL existed (its heredoc at 7f2469e)."""
    write_configs(tmp_path, "llama8b")
    digests = {name: hashlib.sha256((tmp_path / name / "config.json").read_bytes()).hexdigest()
               for name in ("target", "draft")}
    assert digests == {"target": "100b247396889c8581bceb2c36ec406a9c4a2c9ca3d0c61acff13fcba473a3ff",
                       "draft": "14244ac9191c5391e0ebb14ad318df036e59fba66c9e567fc18fbb15bb795bf8"}


def test_models_py_refuses_a_model_it_does_not_know(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(GPU / "models.py"), "mixtral", str(tmp_path / "t"),
                           str(tmp_path / "d")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr == "usage: models.py {llama8b|qwen3moe|llama8b-table} TARGET_DIR DRAFT_DIR\n"
    assert not (tmp_path / "t").exists()


def test_the_table_head_is_llama8bs_with_the_targets_lm_head(tmp_path: Path) -> None:
    target, draft = write_configs(tmp_path / "table", "llama8b-table")
    plain_target, plain_draft = write_configs(tmp_path / "plain", "llama8b")
    assert target == plain_target, "the same target: its outputs are every other run's"
    assert {**plain_draft, "draft_vocab_size": None} == draft
    # null, not absent: SGLang reads config.draft_vocab_size, and transformers 5 raises on a
    # missing attribute (the head's first GPU start failed so)
    assert "draft_vocab_size" in draft
    assert "eagle_config" not in draft  # three auxiliary states, as SGLang's default, so fc (zero) applies


def test_sglang_gives_a_head_without_a_draft_vocabulary_the_targets_lm_head(sglang_source: SglangSource) -> None:
    """What table_head.py relies on, read from the release's own code."""
    eagle3 = sglang_source.text("sglang/srt/models/llama_eagle3.py")
    assert "if config.draft_vocab_size is None:\n                self.load_lm_head_from_target = True" in eagle3
    assert '"midlayer": "layers.0"' in eagle3  # the checkpoint names table_head.py writes
    worker = sglang_source.text("sglang/srt/speculative/eagle_worker_v2.py")
    assert "self.draft_runner.model.set_embed_and_head(embed, head)" in worker
    loader = sglang_source.text("sglang/srt/model_loader/weight_utils.py")
    dummy = loader[loader.index("def initialize_dummy_weights"):]
    assert "seed: int = 1234" in dummy[:300]  # table_head.SEED: the target's rows are drawn again, not read
    assert "generator = torch.Generator(device=param.data.device)" in dummy


def test_qwen3moe_target_has_every_field_sglangs_qwen3moe_reads(tmp_path: Path,
                                                               sglang_source: SglangSource) -> None:
    target, _ = write_configs(tmp_path, "qwen3moe")
    qwen3 = sglang_source.tree("sglang/srt/models/qwen3_moe.py")
    entry = [n for n in qwen3.body if isinstance(n, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == "EntryClass" for t in n.targets)]
    assert entry and ast.unparse(entry[0].value) == target["architectures"][0] == "Qwen3MoeForCausalLM"
    direct, guarded = config_reads(qwen3, {"Qwen3MoeForCausalLM", "Qwen3MoeModel", "Qwen3MoeDecoderLayer",
                                           "Qwen3MoeSparseMoeBlock", "Qwen3MoeAttention"})
    base, _ = config_reads(sglang_source.tree("sglang/srt/models/qwen2_moe.py"), {"Qwen2MoeModel"})
    assert {"num_experts", "num_experts_per_tok", "moe_intermediate_size"} <= direct
    assert direct | base <= target.keys(), f"read without a default, missing: {(direct | base) - target.keys()}"
    # read with a default that is not Qwen3-30B-A3B's (head_dim would be 2048 / 32 = 64)
    assert {"head_dim", "max_position_embeddings", "norm_topk_prob"} <= guarded & target.keys()
    assert "rope_theta" in target  # get_rope_config's fallback (transformers 5 turns it into rope_parameters)
    assert target["mlp_only_layers"] == [] and target["decoder_sparse_step"] == 1  # every layer sparse, as
    # SGLang builds it ("Qwen3MoE all layers are sparse")
    assert "Qwen3MoE all layers are sparse" in sglang_source.text("sglang/srt/models/qwen3_moe.py")


def test_qwen3moe_captures_eagle3s_hidden_states(sglang_source: SglangSource) -> None:
    """The target must hand EAGLE-3 its auxiliary hidden states, as LlamaForCausalLM does."""
    qwen3 = sglang_source.tree("sglang/srt/models/qwen3_moe.py")
    causal = class_def(qwen3, "Qwen3MoeForCausalLM")
    assert "set_eagle3_layers_to_capture" in method_names(causal)
    assert "capture_aux_hidden_states" in {n.attr for n in ast.walk(causal) if isinstance(n, ast.Attribute)}
    base = class_def(sglang_source.tree("sglang/srt/models/qwen2_moe.py"), "Qwen2MoeModel")
    assert "set_eagle3_layers_to_capture" in method_names(base)  # what Qwen3MoeModel inherits and is called


def test_qwen3moe_draft_fits_the_target_as_sglang_joins_them(tmp_path: Path, sglang_source: SglangSource) -> None:
    target, draft = write_configs(tmp_path, "qwen3moe")
    assert draft["architectures"] == ["LlamaForCausalLMEagle3"] and draft["num_hidden_layers"] == 1
    eagle3 = sglang_source.tree("sglang/srt/models/llama_eagle3.py")
    direct, guarded = config_reads(eagle3, {"LlamaDecoderLayer", "LlamaModel", "LlamaForCausalLMEagle3"})
    layer, layer_guarded = config_reads(sglang_source.tree("sglang/srt/models/llama.py"),
                                        {"LlamaDecoderLayer", "LlamaAttention"})
    needed = (direct - guarded - {"intermediate_size_mlp"}) | (layer - layer_guarded)  # _mlp: llama4_text only
    assert needed <= draft.keys(), f"missing: {needed - draft.keys()}"
    assert {"head_dim", "rope_theta"} <= draft.keys()
    # SGLang's EAGLE worker gives the draft the target's embedding (init_lm_head -> set_embed) and
    # feeds it the target's hidden states, so both must match the target; the draft's own LM head
    # is draft_vocab_size wide
    assert (draft["hidden_size"], draft["vocab_size"]) == (target["hidden_size"], target["vocab_size"])
    assert draft["draft_vocab_size"] == 32000 < target["vocab_size"]
    assert draft["num_key_value_heads"] == target["num_key_value_heads"]


def test_the_fused_moe_kernel_finds_a_tuned_config_for_this_shape_on_an_h200(
        tmp_path: Path, sglang_source: SglangSource) -> None:
    """docs/benchmarks.md says the Triton fused-MoE kernel runs on a tuned config, not its default.

    SGLang looks for E={experts},N={intermediate per rank},device_name=... in
    configs/triton_<its Triton>/ and then in the other versions' folders,
    newest first (with a warning); without any it takes a default and warns.
    """
    target, _ = write_configs(tmp_path, "qwen3moe")
    config_py = "sglang/srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py"
    assert 'return f"E={E},N={N},device_name={device_name}{dtype_selector}' in sglang_source.text(config_py)
    name = f"E={target['num_experts']},N={target['moe_intermediate_size']},device_name=NVIDIA_H200.json"
    folder = config_py.rsplit("/", 1)[0] + "/configs/"
    found = [f for f in sglang_source.files(folder) if f.endswith("/" + name)]
    assert any("/triton_3_6_0/" in f for f in found), found  # the device's Triton (docs/benchmarks.md)


# ------------------------------------------------------------------ run_fast_off.sh


def namespaces_work() -> str:
    """Why run_fast_off.sh cannot run in a private namespace here, or "" where it can."""
    if os.geteuid() != 0:
        return "needs root (a private mount namespace over /root)"
    for tool in ("unshare", "ip", "bash"):
        if shutil.which(tool) is None:
            return f"needs {tool}"
    probe = subprocess.run(["unshare", "-m", "-n", "true"], capture_output=True, text=True, timeout=30)
    return "" if probe.returncode == 0 else f"unshare -m -n refused: {probe.stderr.strip()}"


ISOLATED = r"""
set -e
ip link set lo up
mount -t tmpfs tmpfs "$LAYER"
mkdir "$LAYER/upper" "$LAYER/work"
mount -t overlay overlay -o "lowerdir=/root,upperdir=$LAYER/upper,workdir=$LAYER/work" /root
mkdir -p /root/site/bin
ln -s "$SPECCTL_BIN" /root/site/bin/specctl
[ -z "$STANDIN" ] || ln -s "$STANDIN" /root/site/sglang
set +e
bash bench/gpu/run_fast_off.sh "$@" > "$OUT/log.txt" 2>&1
echo "rc=$?" >> "$OUT/log.txt"
cp -r /root/models /root/keep "$OUT/"
"""


def run_isolated(tmp_path: Path, env: dict[str, str], *phases: str) -> tuple[str, Path]:
    """run_fast_off.sh PHASES with /root a throw-away layer over the real one and a network of its own.

    The script's servers are the stand-in SGLang (on its PYTHONPATH, /root/site) and
    specctl's own entry point; what it left under /root comes back in OUT.
    Returns the script's output and OUT.
    """
    why = namespaces_work()
    if why:
        pytest.skip(why)
    out, layer = tmp_path / "out", tmp_path / "layer"
    out.mkdir()
    layer.mkdir()
    specctl_bin = Path(sys.executable).parent / "specctl"
    assert specctl_bin.exists(), "the project is installed in this Python's environment (specctl's entry point)"
    full_env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "OUT": str(out),
                "LAYER": str(layer), "SPECCTL_BIN": str(specctl_bin), "STANDIN": str(STANDIN),
                "STANDIN_STEP_S": "0.02", "BUDGET_S": "200", **env}
    proc = subprocess.Popen(["unshare", "-m", "-n", "bash", "-c", ISOLATED, "isolated", *phases], cwd=REPO,
                            env=full_env, start_new_session=True)
    try:
        proc.wait(timeout=RUN_TIMEOUT_S)
    finally:
        if proc.poll() is None:  # hung: the script's EXIT trap stops its servers on TERM
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
    return (out / "log.txt").read_text(), out


def starting(log: str, name: str) -> str:
    lines = [line for line in log.splitlines() if f"] starting {name}" in line]
    assert len(lines) == 1, log[-3000:]
    return lines[0]


def test_run_fast_off_refuses_a_model_it_does_not_know(tmp_path: Path) -> None:
    env = {**os.environ, "MODEL": "mixtral", "OUT": str(tmp_path / "out")}
    done = subprocess.run(["bash", str(GPU / "run_fast_off.sh"), "nospec"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr == "MODEL must be llama8b, qwen3moe or llama8b-table, got 'mixtral'\n" and done.stdout == ""
    assert not (tmp_path / "out").exists(), "nothing made before the refusal"


def test_sweep2_stops_before_its_windows_where_the_backends_row_stayed_out(tmp_path: Path) -> None:
    """Without NVML the supervisor cannot tell the GPU, so Triton's row stays out: a sweep of auto would
    measure the defaults, not what an operator on the H200 gets, and the phase says so and stops."""
    log, _ = run_isolated(tmp_path, {"CONCS2": "2", "ROUNDS": "1", "WINDOW": "0.5", "IL_WARMUP": "0.3"}, "sweep2")
    assert log.rstrip().endswith("rc=3"), log[-3000:]
    assert "the triton row was not applied (journal above); auto would run the defaults, so it stops here" in log
    assert "done; FAILED: sweep2" in log
    assert "[interleave]" not in log, "no window ran"


def test_a_supervisor_whose_start_will_not_be_retried_ends_the_wait_at_once(tmp_path: Path) -> None:
    """With SGLang missing, `specctl run` logs server_start_failed (retry false) and stays up for
    `specctl server start`: the phase stops waiting there and shows why, rather than spending
    up to 400 s of device time on a server that will never come (the eighth sitting did)."""
    log, _ = run_isolated(tmp_path, {"STANDIN": "", "CONCS2": "2", "ROUNDS": "1", "WINDOW": "0.5"}, "sweep2")
    assert log.rstrip().endswith("rc=3"), log[-3000:]
    assert "sweep2: the supervisor's start failed and will not be retried (journal below)" in log
    assert "SGLang is not installed for" in log and "done; FAILED: sweep2" in log
    assert "[interleave]" not in log, "no window ran"


def test_moe_runs_load_moe_configs_and_keep_their_rows_apart(tmp_path: Path) -> None:
    """nospec2 and sweep2 with MODEL=qwen3moe: both servers on the MoE configs, the work folder,
    the files and every CSV label carrying the model, and report.py reading the labels as ever."""
    log, out = run_isolated(tmp_path, {"MODEL": "qwen3moe", "CONCS2": "2", "ROUNDS": "1", "WINDOW": "0.5",
                                       "IL_WARMUP": "0.3", "REQUIRE_ROW": "0"}, "nospec2", "sweep2")
    assert log.rstrip().endswith("rc=0"), log[-3000:]
    # no NVML here, so the supervisor keeps the defaults and says why; REQUIRE_ROW=0 runs on regardless
    assert '"event":"backend_thresholds_skipped"' in log and "REQUIRE_ROW=0, so auto runs the defaults" in log
    assert "SGLANG_SIMULATE_ACC_LEN=2.8, SGLANG_SIMULATE_ACC_TOKEN_MODE=real-draft-token)" in log
    assert "--model-path /root/models/qwen3-30b-a3b-shape --attention-backend triton" in starting(log, "nospec")
    assert "--load-format dummy" in starting(log, "nospec")
    assert "llama3-8b" not in log and "[fastoff" in log and " triton]" not in log
    # the configs the servers were given are models.py's
    target, draft = write_configs(tmp_path / "expected", "qwen3moe")
    assert json.loads((out / "models/qwen3-30b-a3b-shape/config.json").read_text()) == target
    assert json.loads((out / "models/eagle3-qwen3-30b-a3b-shape/config.json").read_text()) == draft
    work = out / "keep" / "triton-qwen3moe"
    assert [p.name for p in (out / "keep").iterdir()] == [work.name]
    assert (work / "corr-nospec.json").exists(), "the greedy reference of this model, in this model's folder"
    # sweep2's server came from specctl's own supervisor, pointed at the MoE target
    supervisor = (work / "supervisor-sweep2-triton-qwen3moe.log").read_text()
    assert supervisor.startswith("specctl: supervising /root/models/qwen3-30b-a3b-shape at http://127.0.0.1:30000")
    with (out / "interleave-triton-qwen3moe.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert {(r["label"], r["mode"]) for r in rows} == {("nospec-triton-qwen3moe", "-"), (
        "specctl-triton-qwen3moe", "on"), ("specctl-triton-qwen3moe", "off"), ("specctl-triton-qwen3moe", "auto")}
    report = subprocess.run([sys.executable, str(GPU / "report.py"), str(out / "interleave-triton-qwen3moe.csv")],
                            capture_output=True, text=True, timeout=60)
    assert report.returncode == 0, report.stderr
    row = next(line for line in report.stdout.splitlines() if line.startswith("| 2 |"))
    assert "-" not in [cell.strip() for cell in row.split("|")[2:-1]], f"every mode in its column: {row}"


def test_the_default_model_is_llama_as_before(tmp_path: Path) -> None:
    log, out = run_isolated(tmp_path, {"MODEL": ""}, "fixcheck")
    assert log.rstrip().endswith("rc=0"), log[-3000:]
    assert ("--model-path /root/models/llama3-8b-shape --speculative-algorithm EAGLE3 "
            "--speculative-draft-model-path /root/models/eagle3-llama3-8b-shape") in starting(log, "fixcheck")
    assert [p.name for p in (out / "keep").iterdir()] == ["triton"]
    assert sorted(p.name for p in (out / "models").iterdir()) == ["eagle3-llama3-8b-shape", "llama3-8b-shape"]


def test_which_releases_capture_the_draft_extend_graph_per_depth(sglang_source: SglangSource) -> None:
    """docs/benchmarks.md, fourth sitting: on 0.5.17 the built states 1 and 2 run the draft extend eagerly.

    The runner sizes its graph from server_args (the launch's draft tokens, 4 at three steps),
    which the adaptive override does not change, and refuses a batch of another width; 0.5.23
    reads the overridden spec, so each built depth replays its own graph. The cost tables
    measured on 0.5.17 price depths 1 and 2 with that handicap.
    """
    runner = sglang_source.text("sglang/srt/speculative/eagle_draft_extend_cuda_graph_runner.py")
    assert "spec_info.num_tokens_per_req != self.captured_req_width" in runner  # else eager
    worker = sglang_source.text("sglang/srt/speculative/eagle_worker_v2.py")
    assert "num_tokens_per_req=self.speculative_num_draft_tokens," in worker  # the state's width
    utils = sglang_source.text("sglang/srt/speculative/spec_utils.py")
    draft_extend = utils[utils.index('if phase == "draft_extend":'):][:120]
    if sglang_source.version == "0.5.17":
        assert 'phase="draft_extend", server_args=model_runner.server_args' in runner
        assert "return server_args.speculative_num_draft_tokens" in draft_extend
    else:
        assert 'resolve_num_tokens_per_req(phase="draft_extend")' in runner
        assert "return spec.speculative_num_draft_tokens" in draft_extend
        assert "spec = get_spec()" in utils
