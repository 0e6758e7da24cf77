"""Reading a server's /server_info: the plugin's (or simulator's) policy state and what its resolved
arguments say about how it runs. Plain functions over the decoded JSON; the supervisor decides what
to journal from them."""

from __future__ import annotations

from typing import Any

from specctl.runtime.core.records import whole
from specctl.runtime.core.wire import EXPERTS_KEY


def spec_state(info: dict[str, Any] | None) -> dict[str, Any] | None:
    """The plugin's (or simulator's) policy state from /server_info, if it reports one."""
    if not info:
        return None
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        spec = states[0].get("specctl")
        return spec if isinstance(spec, dict) else None
    return None


def target_experts(info: dict[str, Any] | None) -> int | None:
    """The target's routed experts as the plugin reads them from SGLang's model config (0: dense).

    None where the server does not say: no specctl block (a server without the
    plugin), or a plugin older than the count; runtime/core/thresholds.py says what
    None then means for the measured thresholds. A value that is not a count is None too.
    """
    return whole((spec_state(info) or {}).get(EXPERTS_KEY), least=0)


EAGER_PREFILL_WHY = ("prefill CUDA graphs are off, so every prefill runs op by op on the scheduler's CPU; with "
                     "prompts arriving the off state then measured about 5 % under a server without "
                     "speculation on Triton (docs/sglang-plugin.md); SGLang's default keeps them on")


# The resolved server arguments prefill_graphs reads (tests/test_plugin_contract.py checks each release has them)
PREFILL_GRAPH_ARGS = ("cuda_graph_config", "disable_cuda_graph", "disable_prefill_cuda_graph")


def prefill_graphs(info: dict[str, Any] | None) -> bool | None:
    """Whether the server replays its prefills from CUDA graphs, from /server_info's resolved arguments.

    SGLang 0.5.17 captures "breakable" prefill graphs unless told not to
    (``--disable-prefill-cuda-graph``, ``--disable-cuda-graph``) or unless the
    model cannot take them; its resolved ``cuda_graph_config`` says which.
    None when the server does not say (an older SGLang, or no answer).
    """
    if not info:
        return None
    config = info.get("cuda_graph_config")
    prefill = config.get("prefill") if isinstance(config, dict) else None
    if isinstance(prefill, dict) and isinstance(prefill.get("backend"), str):
        return bool(prefill["backend"] != "disabled")
    if info.get("disable_cuda_graph") is True or info.get("disable_prefill_cuda_graph") is True:
        return False
    return None


def public_spec(spec: dict[str, Any] | None) -> dict[str, Any] | None:
    """The sample's ``spec``: the policy state without its switch history (events carry that) and its step
    meter (calibration reads it; a ``calibrated`` event carries what it made of it)."""
    if spec is None:
        return None
    return {k: v for k, v in spec.items() if k not in ("recent_switches", "meter")}


def is_simulator(info: dict[str, Any] | None) -> bool:
    """specctl's simulator says so in a ``specctl_sim`` block; SGLang never sends one."""
    return isinstance(info, dict) and "specctl_sim" in info


def draft_topk(info: dict[str, Any] | None) -> int | None:
    """The draft's tree width (``--speculative-eagle-topk``) as SGLang resolved it; None where it does not say.

    Above 1 the server drafts a tree, which SGLang's adaptive machinery, and so specctl, cannot switch off.
    """
    return whole(info.get("speculative_eagle_topk"), least=1) if isinstance(info, dict) else None


def sglang_version(info: dict[str, Any] | None) -> str | None:
    """The SGLang release the server runs, as its /server_info says (``version``); None where it does not.

    An operator reading a status across hosts, or a journal weeks later, needs it: what the
    off state costs, and which hooks the plugin holds, depend on the release.
    """
    version = info.get("version") if isinstance(info, dict) else None
    return version if isinstance(version, str) and version.strip() else None


def speculative(info: dict[str, Any] | None) -> bool | None:
    """Whether the server was launched with speculation, from its resolved ``speculative_algorithm``.

    SGLang reports the argument on every server: null (its default) when launched without
    ``--speculative-algorithm``. None when the server does not say (no answer, another server).
    """
    if not isinstance(info, dict) or "speculative_algorithm" not in info:
        return None
    algorithm = info["speculative_algorithm"]
    return isinstance(algorithm, str) and algorithm.upper() not in ("", "NONE")
