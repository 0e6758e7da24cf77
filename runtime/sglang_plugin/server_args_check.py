"""The start-up check of the resolved server args: where specctl cannot steer this server, say why.

Run by plugin.check_server_args in the launcher process, after SGLang's own
check and before any GPU work; the message names the flag to change. The
per-release names it reads (the args view, the attention-DP field) are
compat.Release data.
"""

from __future__ import annotations

from typing import Any

from specctl.runtime.core.adaptive_config import read_candidate_steps
from specctl.runtime.core.tree_drafts import topk_refusal
from specctl.runtime.sglang_plugin import tree_switch
from specctl.runtime.sglang_plugin.compat import ADAPTIVE_UNSUPPORTED
from specctl.runtime.sglang_plugin.release_types import Release
from specctl.runtime.sglang_plugin.sglang_access import resolve

# Server-args attributes the start-up check reads, in every release (plus Release.dp_attr).
ARGS_READ = (
    "speculative_algorithm",
    "speculative_eagle_topk",
    "speculative_num_steps",
    "speculative_num_draft_tokens",
    "page_size",
    "speculative_adaptive",
    "speculative_adaptive_config",
)


def server_args_problem(release: Release, server_args: Any, steps: int,
                        depths: tuple[int, ...] = ()) -> str | None:
    """Why specctl cannot run under these (resolved) server args, naming the flag; None if it can.

    ``steps`` is the policy's draft step count and ``depths`` its candidates
    setting: each must have a runtime state.
    """
    view = resolve(release.args_view)(server_args)
    algorithm = view.speculative_algorithm
    if algorithm not in ("EAGLE", "EAGLE3"):
        return f"--speculative-algorithm must be EAGLE or EAGLE3, got {algorithm!r}"
    tree = tree_switch.is_tree(view.speculative_eagle_topk) and tree_switch.enabled()
    if view.speculative_eagle_topk not in (None, 1) and not tree:
        return topk_refusal(view.speculative_eagle_topk, steps=getattr(view, "speculative_num_steps", None) or "N",
                            tokens=getattr(view, "speculative_num_draft_tokens", None) or "T")
    if int(getattr(view, release.dp_attr) or 0) > release.dp_above:
        return "attention data parallelism (--enable-dp-attention / --dp-size) is not supported"
    reason = resolve(ADAPTIVE_UNSUPPORTED)(server_args)
    if reason is not None:
        return f"SGLang refuses adaptive speculation here: {reason}"
    if not view.speculative_adaptive:
        return "--speculative-adaptive is required (specctl drives SGLang's adaptive controller)"
    if not view.speculative_adaptive_config:
        return "--speculative-adaptive-config is required (the file specctl's launcher writes)"
    candidates = read_candidate_steps(view.speculative_adaptive_config)
    if 0 not in candidates:
        return "--speculative-adaptive-config must list candidate step 0 (speculation off)"
    if steps not in candidates:
        return f"the settings' steps ({steps}) must be a candidate of --speculative-adaptive-config {candidates}"
    missing = [d for d in depths if d not in candidates]
    if missing:
        return f"the settings' candidates {missing} have no runtime state in --speculative-adaptive-config {candidates}"
    return tree_switch.tree_problem(release, server_args, view, candidates) if tree else None
