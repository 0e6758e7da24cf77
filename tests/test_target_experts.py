"""The target's model class as the supervisor reads it from /server_info (the plugin's ``experts``)."""

from __future__ import annotations

from typing import Any

import pytest

from specctl.runtime.probes.server_info import target_experts


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
