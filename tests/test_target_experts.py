"""The target's model class: as the plugin reads it from the HF config, and as the supervisor reads the
plugin's ``experts`` from /server_info."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from specctl.runtime.probes.server_info import target_experts
from specctl.runtime.sglang_plugin.plugin import routed_experts


def info(**block: Any) -> dict[str, Any]:
    """A /server_info whose first rank's specctl block holds ``block``."""
    return {"attention_backend": "triton", "internal_states": [{"specctl": {"mode": "auto", **block}}]}


@pytest.mark.parametrize(("block", "experts"), [({"experts": 128}, 128), ({"experts": 0}, 0), ({"experts": 8}, 8)])
def test_the_count_the_plugin_says(block: dict[str, Any], experts: int) -> None:
    assert target_experts(info(**block)) == experts


@pytest.mark.parametrize("server_info", [
    None, {}, {"internal_states": []}, {"internal_states": [{}]},  # no answer; a server without the plugin
    info(),  # a plugin older than the count
    info(experts=True), info(experts=-1), info(experts="128"), info(experts=1.5), info(experts=None),
])
def test_anything_else_is_unknown_not_a_guess(server_info: dict[str, Any] | None) -> None:
    assert target_experts(server_info) is None


# -- the plugin's count, from the HF config SGLang loaded (without SGLang; the contract tests run
# the same reading inside each release's get_internal_state) ------------------------------------


@pytest.mark.parametrize("ffn_config", [SimpleNamespace(moe_num_experts=16, moe_top_k=4, ffn_hidden_size=10752),
                                        {"moe_num_experts": 16, "moe_top_k": 4, "ffn_hidden_size": 10752}],
                         ids=["object", "dict"])
def test_dbrx_counts_its_experts_from_its_ffn_config(ffn_config: Any) -> None:
    # DBRX keeps its 16 routed experts in ffn_config.moe_num_experts, a DbrxFFNConfig or a dict
    dbrx = SimpleNamespace(d_model=6144, n_layers=40, ffn_config=ffn_config)
    assert routed_experts(dbrx) == 16


@pytest.mark.parametrize("ffn_config", [None, {}, SimpleNamespace(), {"moe_num_experts": None},
                                        {"moe_num_experts": "16"}, {"moe_num_experts": True}, {"moe_num_experts": 0}])
def test_a_sub_config_without_a_count_is_dense(ffn_config: Any) -> None:
    assert routed_experts(SimpleNamespace(ffn_config=ffn_config)) == 0


def test_the_flat_keys_come_first_in_their_order_then_the_nested() -> None:
    nested = {"ffn_config": {"moe_num_experts": 16}}
    assert routed_experts(SimpleNamespace(num_experts=128, num_local_experts=8, **nested)) == 128
    assert routed_experts(SimpleNamespace(num_experts=None, num_local_experts=8, **nested)) == 8
    assert routed_experts(SimpleNamespace(n_routed_experts=256, **nested)) == 256
    assert routed_experts(SimpleNamespace(num_experts=None, **nested)) == 16
    assert routed_experts(SimpleNamespace(hidden_size=4096)) == 0  # Llama-3.1-8B
