"""How specctl starts an SGLang server, and what its start-up log says.

``build_command`` and ``launch_env`` give runtime/supervisor/backends.py the command
line and environment of an SGLang server with EAGLE-3 under specctl's
plugin; ``StartupProgress`` turns the server's log into the
``server.progress`` phases of a sample (docs/architecture.md). Process
supervision itself lives in runtime/supervisor/backends.py.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from specctl.runtime.core.settings import PolicySettings
from specctl.runtime.core.tree_drafts import TREE_SWITCH_ENV, tree_launch_problem
from specctl.runtime.core.wire import COSTS_ENV, ENABLE_ENV, PLUGINS_ENV, SETTINGS_ENV

PLUGIN_NAME = "specctl"  # the entry point's name in pyproject.toml


def build_command(
    model: str,
    draft: str,
    tp: int,
    spec_steps: int,
    port: int,
    host: str,
    adaptive_config_path: str,
    extra_args: Sequence[str] = (),
    python: str = sys.executable,
    key_config: str | None = None,
    topk: int = 1,
    draft_tokens: int | None = None,
) -> list[str]:
    """``python -m sglang.launch_server`` with EAGLE-3, a chain (topk 1) or a tree, and the adaptive controller on.

    The adaptive controller is what lets the plugin choose 0 or N draft steps
    per batch; ``adaptive_config_path`` is the file adaptive_config.write_config
    wrote with the same ``spec_steps``. ``extra_args`` come last, so an operator
    can add flags (attention backend, memory fraction, CUDA-graph sizes).
    ``key_config`` is the 0600 YAML that gives SGLang ``--admin-api-key`` through
    ``--config``: a secret on the command line is anyone's to read in ``ps``.
    ``topk`` > 1 with its ``draft_tokens`` is a tree, which the plugin switches only
    with launch_env's ``tree`` (the opt-in) and an adaptive config of {0, spec_steps}.
    """
    if spec_steps < 1:
        raise ValueError(f"spec_steps must be at least 1, got {spec_steps}")
    if tp < 1:
        raise ValueError(f"tp must be at least 1, got {tp}")
    if problem := tree_launch_problem(spec_steps, topk, draft_tokens):
        raise ValueError(problem)
    return [
        python, "-m", "sglang.launch_server",
        "--model-path", model,
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", draft,
        "--speculative-num-steps", str(spec_steps),
        "--speculative-eagle-topk", str(topk),
        "--speculative-num-draft-tokens", str(spec_steps + 1 if topk == 1 else draft_tokens),
        "--speculative-adaptive",
        "--speculative-adaptive-config", str(adaptive_config_path),
        "--tp-size", str(tp),
        "--host", host,
        "--port", str(port),
        "--enable-metrics",
        *(["--config", key_config] if key_config else []),
        *extra_args,
    ]


# SGLang sizes FlashInfer's workspace at 384 MiB (SGLANG_FLASHINFER_WORKSPACE_SIZE),
# enough for decode but not for capturing EAGLE-3's target-verify CUDA graphs at
# 4 tokens a request up to batch 256: on an H200 (SGLang 0.5.17, Llama-8B shapes)
# the capture asked for 574 MiB and the server died at start-up. 2 GiB is what
# SGLang itself sets for deterministic inference and is what came up there
# (docs/benchmarks.md). Only FlashInfer's backend reads the variable, so
# it is set whatever backend SGLang picks (FlashInfer is its default below Hopper);
# an operator's own value is kept.
FLASHINFER_WORKSPACE_ENV = "SGLANG_FLASHINFER_WORKSPACE_SIZE"
FLASHINFER_WORKSPACE_BYTES = 2 * 1024**3
RESERVED_ARGS = ("--config", "--admin-api-key")  # specctl gives these itself (the admin key)


def reserved_arg(extra_args: Sequence[str]) -> str | None:
    """The first of RESERVED_ARGS among an operator's extra arguments (``--flag`` or ``--flag=value``)."""
    for arg in extra_args:
        name = arg.split("=", 1)[0]
        if name in RESERVED_ARGS:
            return name
    return None


#: SGLang flags build_command sets from specctl's own options: after -- they would come last and win,
#: so the server would run other steps, model or port than the adaptive config, the journal and the
#: supervisor's URL say (a --speculative-num-steps 2 against a config built for 0 and 3 stops the server).
#: (--host is not here: SGLang listening on 0.0.0.0 for clients elsewhere still answers on 127.0.0.1.)
OWNED_ARGS = {
    "--model-path": "--model", "--speculative-draft-model-path": "--draft",
    "--tp-size": "--tp", "--tensor-parallel-size": "--tp", "--port": "--port",
    "--speculative-num-steps": "--speculative-num-steps", "--speculative-num-draft-tokens": "--speculative-num-steps",
    "--speculative-eagle-topk": "--speculative-eagle-topk",
    "--speculative-algorithm": "", "--speculative-adaptive-config": "",
}


def owned_arg(extra_args: Sequence[str]) -> tuple[str, str] | None:
    """The first flag among an operator's extra arguments that specctl sets itself, with the option that sets it."""
    for arg in extra_args:
        name = arg.split("=", 1)[0]
        if name in OWNED_ARGS:
            return name, OWNED_ARGS[name]
    return None


def api_key_of(extra_args: Sequence[str]) -> str | None:
    """SGLang's ``--api-key`` among the extra arguments: with it, /server_info needs that key too."""
    for i, arg in enumerate(extra_args):
        if arg == "--api-key" and i + 1 < len(extra_args):
            return extra_args[i + 1]
        if arg.startswith("--api-key="):
            return arg.split("=", 1)[1]
    return None


def launch_env(settings: PolicySettings, base_env: Mapping[str, str] | None = None,
               depth_costs: str | None = None, tree: bool = False) -> dict[str, str]:
    """Variables to add to the server's environment so the plugin takes charge.

    ``depth_costs``: the step-time table the policy's depth choice reads at
    start (every rank the same file); without it the policy is on/off.
    ``tree``: the launch drafts a tree, so the plugin's tree hooks are asked for.

    SGLang loads every installed general plugin unless ``SGLANG_PLUGINS``
    lists some; only then must ``specctl`` be added to that list. FlashInfer's
    workspace is raised unless ``base_env`` already sizes it.
    """
    env = {
        ENABLE_ENV: "1",
        SETTINGS_ENV: json.dumps(settings.as_dict(), separators=(",", ":")),
    }
    if depth_costs:
        env[COSTS_ENV] = str(depth_costs)
    if tree:
        env[TREE_SWITCH_ENV] = "1"
    if FLASHINFER_WORKSPACE_ENV not in (base_env or {}):
        env[FLASHINFER_WORKSPACE_ENV] = str(FLASHINFER_WORKSPACE_BYTES)
    allowed = (base_env or {}).get(PLUGINS_ENV, "")
    names = [n.strip() for n in allowed.split(",") if n.strip()]
    if names and PLUGIN_NAME not in names:
        env[PLUGINS_ENV] = ",".join([*names, PLUGIN_NAME])
    return env


PHASES = ("weights", "kv_cache", "cuda_graphs", "warmup", "ready")

# Log strings of SGLang 0.5.17 and 0.5.23 (model_runner.py, memory_pool.py,
# kv_cache_configurator.py, cuda_graph_setup.py, decode_cuda_graph_runner.py,
# weight_utils.py, http_server.py); tests/test_launcher.py checks each
# against the wheels' source.
_WEIGHTS_BEGIN = "Load weight begin."
_WEIGHTS_END = "Load weight end."
_WEIGHTS_BAR = re.compile(r"Loading \S+ checkpoint shards:\s+(\d+)% Completed \| (\d+)/(\d+)")
# 0.5.23 says "VA upper bound" instead of "is allocated" while it reserves for post-capture sizing.
_KV_ALLOCATED = re.compile(r"KV Cache (?:is allocated|VA upper bound)\. dtype:")
_KV_END = "Memory pool end."
_GRAPHS_BEGIN = re.compile(r"Capture .* (?:CUDA|CPU) graph begin\.")
_GRAPHS_BAR = re.compile(r"Capturing batches \([^)]*\):\s+\d+%\|[^|]*\|\s*(\d+)/(\d+)")
_READY = "The server is fired up and ready to roll!"
# The plugin's switch warm-up (runtime/sglang_plugin/switch_warmup.py), between the captures and "ready".
_WARMUP_BAR = re.compile(r"specctl: switch warm-up (\d+)/(\d+):")


class StartupProgress:
    """Start-up phase from SGLang's log lines; phases only move forward.

    A speculative server loads, sizes and captures twice (target, then draft)
    and builds one runtime state per candidate step count, so the log goes
    back to "Load weight begin" after graphs were captured; the phase stays
    at the furthest one reached, and the fraction is that of the latest
    progress bar seen in it (each capture has its own bar, so it restarts).
    tqdm rewrites its bar with carriage returns and ends the line only when
    the bar is done: a reader that splits the output on "\r" as well as "\n"
    sees the fraction grow; a whole line counts by its last update.
    """

    def __init__(self) -> None:
        self._phase: str | None = None
        self._fraction: float | None = None

    @property
    def progress(self) -> dict[str, Any] | None:
        if self._phase is None:
            return None
        return {"phase": self._phase, "fraction": self._fraction}

    def feed(self, line: str) -> dict[str, Any] | None:
        """Read one log line; the new progress if it changed, else None."""
        before = self.progress
        for part in line.split("\r"):
            self._read(part)
        after = self.progress
        return after if after != before else None

    def _read(self, text: str) -> None:
        if _READY in text:
            self._move("ready", 1.0)
        elif match := _WARMUP_BAR.search(text):
            self._move("warmup", int(match[1]) / int(match[2]))
        elif match := _GRAPHS_BAR.search(text):
            self._move("cuda_graphs", int(match[1]) / int(match[2]))
        elif _GRAPHS_BEGIN.search(text):
            self._move("cuda_graphs", 0.0)
        elif _KV_END in text:
            self._move("kv_cache", 1.0)
        elif _KV_ALLOCATED.search(text):
            self._move("kv_cache", None)
        elif _WEIGHTS_END in text:
            self._move("weights", 1.0)
        elif match := _WEIGHTS_BAR.search(text):
            self._move("weights", int(match[2]) / int(match[3]))
        elif _WEIGHTS_BEGIN in text:
            self._move("weights", 0.0)

    def _move(self, phase: str, fraction: float | None) -> None:
        current = -1 if self._phase is None else PHASES.index(self._phase)
        if PHASES.index(phase) < current:
            return
        self._phase = phase
        self._fraction = fraction
