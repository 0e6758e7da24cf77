"""The launch command, its environment, and start-up progress from SGLang's log."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from specctl.runtime.core.settings import PolicySettings
from specctl.runtime.sglang_plugin.plugin import settings_from_env
from specctl.runtime.sglang_plugin.switch_warmup import warm
from specctl.runtime.supervisor import launcher
from specctl.runtime.supervisor.launcher import StartupProgress, build_command, launch_env

from support.sglang_source import SglangSource, class_fields
from support.sim_process import sim_process


def command(**overrides) -> list[str]:
    args = dict(model="/models/llama-8b", draft="/models/eagle3", tp=2, spec_steps=3, port=30001,
                host="127.0.0.1", adaptive_config_path="/run/specctl/adaptive.json",
                extra_args=["--attention-backend", "fa3"], python="/venv/bin/python")
    args.update(overrides)
    return build_command(**args)


def flag_value(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def test_command_runs_eagle3_with_topk_1_under_the_adaptive_controller() -> None:
    cmd = command()
    assert cmd[:3] == ["/venv/bin/python", "-m", "sglang.launch_server"]
    assert flag_value(cmd, "--model-path") == "/models/llama-8b"
    assert flag_value(cmd, "--speculative-algorithm") == "EAGLE3"
    assert flag_value(cmd, "--speculative-draft-model-path") == "/models/eagle3"
    assert flag_value(cmd, "--speculative-eagle-topk") == "1"
    assert flag_value(cmd, "--speculative-num-steps") == "3"
    assert flag_value(cmd, "--speculative-num-draft-tokens") == "4"
    assert "--speculative-adaptive" in cmd
    assert flag_value(cmd, "--speculative-adaptive-config") == "/run/specctl/adaptive.json"
    assert flag_value(cmd, "--tp-size") == "2"
    assert (flag_value(cmd, "--host"), flag_value(cmd, "--port")) == ("127.0.0.1", "30001")
    assert "--enable-metrics" in cmd
    assert cmd[-2:] == ["--attention-backend", "fa3"]


def test_draft_tokens_follow_the_steps() -> None:
    assert flag_value(command(spec_steps=7), "--speculative-num-draft-tokens") == "8"


@pytest.mark.parametrize(("field", "value"), [("spec_steps", 0), ("tp", 0)])
def test_command_refuses_impossible_sizes(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=field):
        command(**{field: value})


def test_every_flag_is_a_server_arg_of_each_release(sglang_source: SglangSource) -> None:
    fields: set[str] = set()
    for rel in sglang_source.release.args_field_files:
        fields |= class_fields(sglang_source.tree(f"sglang/srt/{rel}"))
    flags = [a for a in command(extra_args=[]) if a.startswith("--")]
    assert [f for f in flags if f[2:].replace("-", "_") not in fields] == []
    assert sglang_source.module_path("sglang.launch_server") is not None


def test_env_turns_the_plugin_on_with_the_settings() -> None:
    settings = PolicySettings(mode="off", steps=4, off_at=40, on_at=20)
    env = launch_env(settings)
    assert env["SPECCTL_PLUGIN"] == "1"
    assert "SGLANG_PLUGINS" not in env  # every installed plugin loads by default
    assert settings_from_env(env) == settings  # what the plugin reads back
    assert json.loads(env["SPECCTL_SETTINGS"])["mode"] == "off"


@pytest.mark.parametrize(
    ("allowed", "expected"),
    [("", None), ("xpu_hooks", "xpu_hooks,specctl"), ("a, specctl", None)],
)
def test_env_adds_specctl_to_an_existing_plugin_whitelist(allowed: str, expected: str | None) -> None:
    env = launch_env(PolicySettings(), {"SGLANG_PLUGINS": allowed})
    assert env.get("SGLANG_PLUGINS") == expected


def test_env_sizes_flashinfers_workspace_for_the_verify_graphs_unless_the_operator_did() -> None:
    """SGLang's 384 MiB default killed an EAGLE-3 server on FlashInfer while capturing verify graphs."""
    assert int(launch_env(PolicySettings())["SGLANG_FLASHINFER_WORKSPACE_SIZE"]) >= 601_882_624
    mine = launch_env(PolicySettings(), {"SGLANG_FLASHINFER_WORKSPACE_SIZE": "123"})
    assert "SGLANG_FLASHINFER_WORKSPACE_SIZE" not in mine  # theirs stays in the inherited environment


def test_the_workspace_variable_is_sglangs_own(sglang_source: SglangSource) -> None:
    environ = sglang_source.srt("environ.py")
    assert "SGLANG_FLASHINFER_WORKSPACE_SIZE = EnvInt(" in environ


# A start-up log of an EAGLE-3 server, composed from SGLang 0.5.17's log
# statements (see test_log_markers_are_sglangs_own): target weights, KV pool,
# target-verify graphs with tqdm's carriage-return updates, then the draft
# model, the adaptive states, and the ready line.
STARTUP_LOG = [
    "[2026-11-29 10:00:00] server_args=ServerArgs(model_path='/models/llama-8b', ...)",
    "[2026-11-29 10:00:05 TP0] Load weight begin. avail mem=139.12 GB",
    "Loading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]"
    "\rLoading safetensors checkpoint shards:  25% Completed | 1/4 [00:01<00:03,  1.02s/it]"
    "\rLoading safetensors checkpoint shards:  50% Completed | 2/4 [00:02<00:02,  1.01s/it]",
    "Loading safetensors checkpoint shards: 100% Completed | 4/4 [00:04<00:00,  1.00s/it]",
    "[2026-11-29 10:00:09 TP0] Load weight end. elapsed=4.02 s, type=LlamaForCausalLM, "
    "avail mem=123.50 GB, mem usage=15.62 GB.",
    "[2026-11-29 10:00:10 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 806123, "
    "K size: 49.20 GB, V size: 49.20 GB",
    "[2026-11-29 10:00:10 TP0] Memory pool end. avail mem=22.10 GB",
    "[2026-11-29 10:00:11 TP0] Capture target verify CUDA graph begin. backend=full, "
    "num_tokens_per_req=4, bs=[1, 2, 4, 8], avail mem=21.90 GB",
    "  0%|          | 0/4 [00:00<?, ?it/s]"
    "\rCapturing batches (bs=8 avail_mem=21.85 GB):   0%|          | 0/4 [00:00<?, ?it/s]"
    "\rCapturing batches (bs=8 avail_mem=21.85 GB):  25%|██▌       | 1/4 [00:00<00:02,  1.20it/s]",
    "Capturing batches (bs=1 avail_mem=21.60 GB): 100%|██████████| 4/4 [00:02<00:00,  1.60it/s]",
    "[2026-11-29 10:00:14 TP0] Capture target verify CUDA graph end. elapsed=3.10 s, "
    "mem usage=0.50 GB, avail mem=21.40 GB.",
    "[2026-11-29 10:00:15 TP0] Load weight begin. avail mem=21.40 GB",
    "[2026-11-29 10:00:16 TP0] Load weight end. elapsed=0.80 s, type=LlamaForCausalLMEagle3, "
    "avail mem=20.30 GB, mem usage=1.10 GB.",
    "[2026-11-29 10:00:20 TP0] Built adaptive runtime state steps=0: elapsed=2.05s, mem=0.65GB",
    "[2026-11-29 10:00:31] INFO:     Uvicorn running on http://127.0.0.1:30001 (Press CTRL+C to quit)",
    "[2026-11-29 10:00:33] The server is fired up and ready to roll!",
]


def test_startup_log_becomes_phases_with_fractions() -> None:
    progress = StartupProgress()
    seen = [p for p in (progress.feed(line) for line in STARTUP_LOG) if p is not None]
    assert seen == [
        {"phase": "weights", "fraction": 0.0},
        {"phase": "weights", "fraction": 0.5},
        {"phase": "weights", "fraction": 1.0},
        {"phase": "kv_cache", "fraction": None},
        {"phase": "kv_cache", "fraction": 1.0},
        {"phase": "cuda_graphs", "fraction": 0.0},
        {"phase": "cuda_graphs", "fraction": 0.25},
        {"phase": "cuda_graphs", "fraction": 1.0},
        {"phase": "ready", "fraction": 1.0},
    ]
    assert progress.progress == {"phase": "ready", "fraction": 1.0}


def test_no_progress_before_sglang_says_anything() -> None:
    progress = StartupProgress()
    assert progress.feed("[2026-11-29 10:00:00] server_args=ServerArgs(...)") is None
    assert progress.progress is None


def test_a_phase_never_goes_back() -> None:
    progress = StartupProgress()
    progress.feed("Capture target verify CUDA graph begin. backend=full")
    assert progress.feed("Load weight begin. avail mem=21.40 GB") is None
    assert progress.progress == {"phase": "cuda_graphs", "fraction": 0.0}


def test_log_markers_are_sglangs_own(sglang_source: SglangSource) -> None:
    """Each string the parser looks for, as SGLang's source writes it."""
    srt = sglang_source.srt
    runner = srt("model_executor/model_runner.py")
    assert 'f"Load weight begin. ' in runner and 'f"Load weight end. "' in runner
    assert launcher._WEIGHTS_BEGIN == "Load weight begin." and launcher._WEIGHTS_END == "Load weight end."
    assert '"{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} ' in srt("utils/common.py")
    assert 'desc="Loading safetensors checkpoint shards"' in srt("model_loader/weight_utils.py")
    pool = srt("mem_cache/memory_pool.py")
    assert 'else "KV Cache"' in pool and "is allocated" in pool and ". dtype: {self.dtype}, " in pool
    assert launcher._KV_ALLOCATED.search("Draft KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1")
    assert 'f"Memory pool end. "' in srt("mem_cache/kv_cache_configurator.py")
    setup = srt("model_executor/model_runner_components/cuda_graph_setup.py")
    assert " begin. " in setup and ('CUDA graph begin. "' in setup or '"cuda": "CUDA graph"' in setup)
    runner = srt("model_executor/runner/decode_cuda_graph_runner.py")
    assert 'f"Capturing batches ({bs=} {avail_mem=:.2f} GB)"' in runner
    assert f'logger.info("{launcher._READY}")' in srt("entrypoints/http_server.py")


# An excerpt of a real start-up (SGLang 0.5.17, H200, dummy Llama-3-8B + EAGLE-3
# draft, 2026-11-29): target and draft weights, both KV pools, the target-verify
# capture (tqdm's bar interleaved with a Triton warning, updates joined by "\r",
# the line ended only when the bar is done), the steps-0 state, ready. Trimmed to
# a few of the bar's 54 updates.
REAL_0517 = (
    "[2026-11-29 09:48:56] Load weight begin. avail mem=139.09 GB\n"
    "[2026-11-29 09:48:56] Load weight end. elapsed=0.26 s, type=LlamaForCausalLM, avail mem=124.07 GB, "
    "mem usage=15.02 GB.\n"
    "[2026-11-29 09:48:56] Load weight begin. avail mem=124.07 GB\n"
    "[2026-11-29 09:48:56] Load weight end. elapsed=0.01 s, type=LlamaForCausalLMEagle3, avail mem=121.91 GB, "
    "mem usage=2.16 GB.\n"
    "[2026-11-29 09:48:58] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 805547, K size: 49.17 GB, "
    "V size: 49.17 GB\n"
    "[2026-11-29 09:48:58] Memory pool end. avail mem=23.91 GB\n"
    "[2026-11-29 09:48:58] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 805547, K size: 1.54 GB, "
    "V size: 1.54 GB\n"
    "[2026-11-29 09:48:58] Memory pool end. avail mem=20.84 GB\n"
    "[2026-11-29 09:48:59] Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=4, "
    "bs=[1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 40, 44, 48, 52, 56, 60, 64], "
    "avail mem=21.68 GB\n"
    "\r  0%|          | 0/27 [00:00<?, ?it/s]"
    "\rCapturing batches (bs=64 avail_mem=21.51 GB):   0%|          | 0/27 [00:00<?, ?it/s]"
    "/opt/torch/.venv/lib/python3.12/site-packages/triton/language/semantic.py:1670: UserWarning: tl.where "
    "with a non-boolean condition is deprecated and will error out in a future triton release. Got uint8\n"
    "  warnings.warn(\n"
    "\rCapturing batches (bs=64 avail_mem=21.51 GB):   4%|▎         | 1/27 [00:34<14:44, 34.03s/it]"
    "\rCapturing batches (bs=60 avail_mem=21.33 GB):   7%|▋         | 2/27 [00:34<05:52, 14.10s/it]"
    "\rCapturing batches (bs=1 avail_mem=21.31 GB):  96%|█████████▋| 26/27 [00:37<00:00,  6.40it/s]"
    "\rCapturing batches (bs=1 avail_mem=21.31 GB): 100%|██████████| 27/27 [00:37<00:00,  1.40s/it]\n"
    "[2026-11-29 09:49:38] Capture target verify CUDA graph end. elapsed=38.99 s, mem usage=0.37 GB, "
    "avail mem=21.31 GB.\n"
    "[2026-11-29 09:49:51] Built adaptive runtime state steps=0: elapsed=3.65s, mem=0.24GB\n"
    "[2026-11-29 09:49:58] The server is fired up and ready to roll!\n"
)


def test_a_real_startup_read_line_by_line() -> None:
    progress = StartupProgress()
    seen = [p for p in (progress.feed(line) for line in REAL_0517.split("\n")) if p]  # not splitlines: it splits on \r
    assert [p["phase"] for p in seen] == [
        "weights", "weights", "weights", "weights",  # target, then draft: each 0 then 1
        "kv_cache", "kv_cache", "kv_cache", "kv_cache",
        "cuda_graphs", "cuda_graphs", "ready",
    ]
    assert seen[-3:] == [{"phase": "cuda_graphs", "fraction": 0.0}, {"phase": "cuda_graphs", "fraction": 1.0},
                         {"phase": "ready", "fraction": 1.0}]


def test_a_real_startup_read_on_carriage_returns_shows_the_bar_grow() -> None:
    progress = StartupProgress()
    pieces = REAL_0517.replace("\r", "\n").split("\n")
    graphs = [p["fraction"] for p in map(progress.feed, pieces) if p and p["phase"] == "cuda_graphs"]
    assert graphs == [0.0, 1 / 27, 2 / 27, 26 / 27, 1.0]


def test_env_names_the_depth_cost_table_for_every_rank() -> None:
    assert "SPECCTL_DEPTH_COSTS" not in launch_env(PolicySettings())
    assert launch_env(PolicySettings(), depth_costs="/srv/costs.json")["SPECCTL_DEPTH_COSTS"] == "/srv/costs.json"


def test_a_launch_with_candidate_depths_builds_each_and_names_the_table(tmp_path: Path) -> None:
    """--speculative-candidate-steps 0,1,2,3: the adaptive config lists exactly those, steps stays the launch's."""
    from specctl.runtime.core.adaptive_config import read_candidate_steps
    from specctl.runtime.supervisor.config import SupervisorConfig
    from specctl.runtime.supervisor.sglang_backend import SGLangBackend

    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"buckets": [1, 64], "depths": [0, 1, 2, 3],
                                 "step_ms": [[6, 7, 8, 9], [14, 19, 26, 32]]}))
    cfg = SupervisorConfig(backend="sglang", model="/m", draft="/d", settings={"candidates": "0,1,2,3"},
                           depth_costs=costs)
    backend = SGLangBackend(cfg)
    argv = backend.argv
    adaptive = argv[argv.index("--speculative-adaptive-config") + 1]
    assert read_candidate_steps(adaptive) == [0, 1, 2, 3]
    assert argv[argv.index("--speculative-num-steps") + 1] == "3"
    assert backend.env["SPECCTL_DEPTH_COSTS"] == str(costs.resolve())
    assert settings_from_env(backend.env).candidates == (0, 1, 2, 3)


def test_a_bad_cost_table_or_candidate_set_is_refused_before_the_launch(tmp_path: Path) -> None:
    from specctl.runtime.supervisor.config import ConfigError, SupervisorConfig

    bad = tmp_path / "costs.json"
    bad.write_text("[]")
    with pytest.raises(ConfigError, match="--depth-costs .*costs.json"):
        SupervisorConfig(backend="sglang", model="/m", draft="/d", depth_costs=bad)
    with pytest.raises(ConfigError, match=r"--speculative-num-steps \(default 3\): must be one of the candidates"):
        SupervisorConfig(backend="sglang", model="/m", draft="/d", settings={"candidates": "0,1,2"})


def test_the_switch_warm_up_is_a_phase_between_the_captures_and_ready() -> None:
    progress = StartupProgress()
    progress.feed("Capture target verify CUDA graph begin. backend=full")
    assert progress.feed("[2026-12-03 10:00:01] specctl: switch warm-up 5/20: off at batch 16, 0.31 s") == {
        "phase": "warmup", "fraction": 0.25}
    assert progress.feed("Capture draft CUDA graph begin.") is None  # never back
    assert progress.feed("The server is fired up and ready to roll!") == {"phase": "ready", "fraction": 1.0}


def test_the_warm_up_log_line_is_the_one_the_progress_reads(caplog: pytest.LogCaptureFixture,
                                                            tmp_path: Path) -> None:
    """The plugin's own line, as it logs it against a simulator, moves the supervisor's progress."""



    progress = StartupProgress()
    with sim_process(tmp_path, "--load", "idle", "--gpus", "1") as url, \
            caplog.at_level(logging.INFO, logger="specctl.plugin"):
        asyncio.run(warm(url, cap=2))
    seen = [progress.feed(r.getMessage()) for r in caplog.records]
    assert [s for s in seen if s] == [{"phase": "warmup", "fraction": f / 4} for f in (1, 2, 3, 4)]
