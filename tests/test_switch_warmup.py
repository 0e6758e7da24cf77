"""The switch warm-up (runtime/sglang_plugin/switch_warmup.py) against specctl's simulator, over real HTTP.

The simulator takes the plugin's ``specctl_warmup`` key as the plugin does
(a built depth, held with the policy aside, or -1), so the warm-up's whole
conversation with a server runs here; the hook around SGLang's warm-up
thread is checked against each release in test_plugin_contract.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import types
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specctl.runtime.sglang_plugin import switch_warmup
from specctl.runtime.sglang_plugin.sglang_access import SpecctlPluginError
from specctl.runtime.sglang_plugin.switch_warmup import NEW_TOKENS, WarmupReport, batches, cap_from_env, warm

from support.sim_process import sim_process


def get(url: str, path: str) -> Any:
    with urllib.request.urlopen(url + path, timeout=10) as r:
        return json.loads(r.read())


def spec(url: str) -> dict[str, Any]:
    return get(url, "/server_info")["internal_states"][0]["specctl"]


@pytest.mark.parametrize("launch", [[], ["--set", "mode=off"], ["--set", "mode=on"]])
def test_every_built_depth_runs_at_every_bucket_and_the_policy_is_left_as_launched(
        tmp_path: Path, launch: list[str]) -> None:
    with sim_process(tmp_path, "--load", "idle", "--gpus", "1", *launch) as url:
        before = spec(url)
        most = get(url, "/server_info")["max_running_requests"]
        report = asyncio.run(warm(url, cap=1024))
        after = spec(url)
    assert report.skipped is None
    assert sorted(report.seconds) == [(d, n) for d in (0, 3) for n in batches(most)]
    assert after["held"] is None
    # the policy neither decided nor heard acceptance: its step, switches, settings are the launch's
    for key in ("mode", "step", "switches", "verifies", "steps_on", "steps_off", "settings", "accept_mean"):
        assert after[key] == before[key], key
    assert f"off at batches 1-{most}" in report.line() and f"depth 3 at batches 1-{most}" in report.line()


def test_the_cap_bounds_the_largest_batch_and_is_itself_a_batch(tmp_path: Path) -> None:
    with sim_process(tmp_path, "--load", "idle", "--gpus", "1") as url:
        report = asyncio.run(warm(url, cap=24))
    assert sorted({n for _, n in report.seconds}) == [1, 2, 4, 8, 16, 24]


def decode_tokens(url: str) -> float:
    """The simulator's decode-token counter, read from /metrics with prometheus_client's parser."""
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        families = text_string_to_metric_families(r.read().decode())
    return next(s.value for f in families for s in f.samples
                if s.name == "sglang:realtime_tokens_total" and s.labels.get("mode") == "decode")


def test_the_bursts_decode_every_prompt_on_the_server(tmp_path: Path) -> None:
    with sim_process(tmp_path, "--load", "idle", "--gpus", "1") as url:
        before = decode_tokens(url)
        report = asyncio.run(warm(url, cap=8))
        after = decode_tokens(url)
        running = get(url, "/server_info")["internal_states"][0]["num_running_reqs"]
    assert report.skipped is None and running == 0
    assert after - before == 2 * sum(batches(8)) * NEW_TOKENS  # off and depth 3, each prompt NEW_TOKENS tokens


@pytest.mark.parametrize("flag", ["--no-plugin", "--no-speculation"])
def test_a_server_without_specctls_policy_is_left_alone(tmp_path: Path, flag: str) -> None:
    with sim_process(tmp_path, "--load", "idle", "--gpus", "1", flag) as url:
        report = asyncio.run(warm(url, cap=8))
    assert report.seconds == {}
    assert report.line() == "specctl: switch warm-up skipped: the server reports no specctl policy with built depths"


def test_a_server_that_never_answers_ends_the_warm_up_with_why(tmp_path: Path) -> None:
    with pytest.raises(switch_warmup.WarmupFailed, match="did not answer /server_info within 1 s"):
        asyncio.run(warm("http://127.0.0.1:9", cap=8, ready_wait_s=1))


@pytest.mark.parametrize(("raw", "cap"), [(None, 1024), ("", 1024), ("0", 0), ("off", 0), ("No", 0), ("300", 300),
                                          (" 16 ", 16)])
def test_the_environment_caps_or_skips_the_warm_up(raw: str | None, cap: int) -> None:
    assert cap_from_env({} if raw is None else {"SPECCTL_WARMUP": raw}) == cap


@pytest.mark.parametrize("raw", ["-4", "1.5", "lots", "1e3"])
def test_a_cap_that_is_no_count_is_refused_by_name(raw: str) -> None:
    with pytest.raises(SpecctlPluginError, match=f"SPECCTL_WARMUP must be 0 .* got '{raw}'"):
        cap_from_env({"SPECCTL_WARMUP": raw})


def test_batches_are_the_power_of_two_buckets_then_the_cap() -> None:
    assert batches(1) == [1]
    assert batches(256) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert batches(300) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300]


def test_the_report_line_names_the_slowest_batch_of_each_depth() -> None:
    report = WarmupReport(seconds={(0, 1): 0.1, (0, 64): 7.5, (3, 1): 0.2, (3, 64): 0.3})
    assert report.line() == ("specctl: switch warm-up: off at batches 1-64 in 7.6 s (slowest: batch 64, 7.5 s); "
                             "depth 3 at batches 1-64 in 0.5 s (slowest: batch 64, 0.3 s) (SPECCTL_WARMUP=0 skips it)")


def test_a_warm_up_that_fails_says_why_and_sglangs_own_warm_up_still_decides(monkeypatch, caplog) -> None:
    """The launch never fails for the warm-up: SGLang's function runs and its answer is the thread's."""
    monkeypatch.setattr(switch_warmup, "READY_WAIT_S", 1.0)
    calls: list[str] = []

    def sglang_warmup(server_args: Any) -> bool:
        calls.append(server_args.url())
        return False  # SGLang's own verdict (its request failed): passed on as it is

    server_args = types.SimpleNamespace(url=lambda: "http://127.0.0.1:9", api_key=None, admin_api_key=None)
    with caplog.at_level(logging.WARNING, logger="specctl.plugin"):
        assert switch_warmup.warm_first(sglang_warmup, server_args) is False
    assert calls == ["http://127.0.0.1:9"]
    assert "specctl: switch warm-up did not finish (the server did not answer /server_info within 1 s)" in caplog.text
