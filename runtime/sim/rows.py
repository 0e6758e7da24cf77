"""Which thresholds a preset's server would run with, as specctl's supervisor chooses them.

The supervisor applies a backend's measured row only on the GPU and to the model class
it was measured on (``thresholds.for_server``). A preset says both, its GPU as NVML
names it and its routed experts, so every bench that runs auto on a preset asks here:
a MoE preset gets the backend's MoE row where one was measured (h200-qwen3moe: Triton),
a tree preset (topk > 1, under the switch) the tree's row where one was measured
(h200-llama8b-tree: Triton), and one without a row for its class, or on another GPU,
keeps the defaults there as it would on a server.
"""

from __future__ import annotations

from typing import Any

from specctl.runtime.core.thresholds import for_backend, for_server, for_tree_server, is_moe, unset_groups
from specctl.runtime.sim.preset_model import Preset


def supervised_settings(preset: Preset, settings: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Auto's settings for ``preset`` as the supervisor would choose them, and a line that says which.

    The operator's ``settings`` win, group by group; the line gives ``for_server``'s
    reason where the row stays out.
    """
    experts, tree = preset.params.moe_experts, preset.topk > 1
    rows = for_tree_server if tree else for_server  # a tree under the switch has rows of its own
    row, why = rows(preset.attention_backend, [preset.gpu.name] * preset.tp_size, settings, experts=experts)
    applied = unset_groups(row or {}, settings)
    said = f"preset {preset.name} ({preset.attention_backend}, {preset.gpu.name}, {_model_class(preset)}): "
    if applied:
        which = f"the {preset.attention_backend} row" + (" for a MoE" if is_moe(experts) else "") \
            + (" for a tree" if tree else "")
        return {**applied, **settings}, said + f"{which} applies: {applied}"
    if why is not None:
        return dict(settings), said + why
    if for_backend(preset.attention_backend) is None:
        return dict(settings), said + (f"no row was measured for {preset.attention_backend}: "
                                       "the policy's defaults stay")
    return dict(settings), said + "every group of the row is set by hand (--set), so none of it is used"


def _model_class(preset: Preset) -> str:
    experts = preset.params.moe_experts
    return f"a MoE of {experts} experts" if is_moe(experts) else "dense"
