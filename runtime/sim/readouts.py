"""What a simulated server reports about itself: SGLang's /server_info and its internal state.

The internal state is what SGLang's scheduler reports per DP rank, with the specctl
plugin's block where the plugin is on; /server_info adds the launch's arguments as
SGLang 0.5.17 resolves them and the simulator's own ``specctl_sim`` block.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specctl.runtime.core.wire import EXPERTS_KEY
from specctl.runtime.sim import nospec
from specctl.runtime.sim.costs import tree_tokens

if TYPE_CHECKING:
    from specctl.runtime.sim.server import SimServer

SGLANG_VERSION = "0.5.17"  # the SGLang release whose endpoints the simulator answers like


def internal_state(server: SimServer) -> dict[str, Any]:
    """What SGLang's scheduler reports per DP rank, plus the specctl policy's state."""
    e = server.engine
    state: dict[str, Any] = {
        "avg_spec_accept_length": round(e.accept_len(), 4),
        "last_gen_throughput": round(e.gen_throughput(), 2),
        "num_running_reqs": len(e.running),
        "num_queue_reqs": len(e.queue),
        "token_usage": round(e.token_usage(), 4),
    }
    if not server.cfg.speculation:  # SGLang adds it only for a speculative server
        del state["avg_spec_accept_length"]
    if server.cfg.plugin:  # the plugin adds its block; a server without it has none
        # the plugin says the target's routed experts (0: dense), as it reads SGLang's HF config
        block = {**server.policy.state(), "held": server.engine.held, "built": list(server.built_depths),
                 "off_state": off_state(server), EXPERTS_KEY: experts(server)}
        state = {"specctl": block, **state}
    return state


def experts(server: SimServer) -> int:
    """The preset's routed experts, 0 for a dense target (the report's GLM-5: 256, Qwen3-30B-A3B: 128)."""
    return int(server.cfg.preset.params.moe_experts or 0)


def off_state(server: SimServer) -> dict[str, Any]:
    """As the plugin reports it (fast_off.summary): whether "off" costs what no speculation costs."""
    if server.cfg.slow_off:
        return {"fast": False, "why_not": "simulated (--slow-off): SGLang's own steps-0 state"}
    return {"fast": True, "why_not": None}


def cuda_graph_args(server: SimServer) -> dict[str, Any]:
    """SGLang 0.5.17's resolved CUDA-graph arguments: prefill graphs ("breakable") unless launched eager."""
    prefill = "disabled" if server.cfg.eager_prefill else "breakable"
    return {"disable_cuda_graph": False, "disable_prefill_cuda_graph": server.cfg.eager_prefill,
            "cuda_graph_config": {"decode": {"backend": "full", "max_bs": server.cfg.preset.max_running},
                                  "prefill": {"backend": prefill, "max_bs": None}}}


def server_info(server: SimServer) -> dict[str, Any]:
    p = server.cfg.preset
    steps = server.policy.settings.steps
    return {
        "model_path": server.model_path,
        "served_model_name": server.served_model_name,
        "context_length": server.context_length,
        "max_queued_requests": server.cfg.max_queued_requests,
        "tp_size": p.tp_size,
        "dp_size": 1,
        "attention_backend": p.attention_backend,
        "speculative_algorithm": "EAGLE3",
        "speculative_draft_model_path": p.draft_model_path,
        "speculative_num_steps": steps,
        "speculative_eagle_topk": p.topk,
        "speculative_num_draft_tokens": tree_tokens(steps, p.topk, p.draft_tokens),
        "max_running_requests": p.max_running,
        "max_total_num_tokens": p.kv_pool_tokens,
        "mem_fraction_static": p.mem_fraction_static,
        **({} if server.cfg.speculation else nospec.server_args()),
        **cuda_graph_args(server),
        "version": SGLANG_VERSION,
        "internal_states": [internal_state(server)],
        "specctl_sim": {
            "preset": p.name,
            "description": p.description,
            "gpus": server.cfg.gpus,
            "failed_gpus": sorted(server.cfg.failed_gpus),
            "load": str(server.driver.spec),
            "load_target": server.driver.target(server.engine.now),
            "seed": server.cfg.seed,
            "sim_time_s": round(server.engine.now, 3),
            "lag_dropped_s": round(server.pacer.lag_dropped_s, 3),
            "health_checks": server.health_checks,
        },
    }
