"""An operator's own MoE launch line that carries a dense model's thresholds: told once at attach, with the fix.

`specctl sglang-args --backend triton --gpu 'NVIDIA H200'` without ``--experts``
prints the Triton row (measured on a dense Llama-8B) in SPECCTL_SETTINGS, and says
on stderr to add ``--experts N`` for a MoE. An operator who misses that line and
launches their Qwen3-30B-A3B with it runs that row in the plugin. A supervisor
attached to that server reads the target's expert count from /server_info; it
says, once, what the plugin runs and how to fix it, and changes nothing itself.
The fix is the Triton row measured on a MoE (thresholds.MOE_BY_BACKEND), since the
server runs Triton on an H200; elsewhere it would be the policy's defaults.

Here the server is specctl's simulator as its own process on loopback, with the
MoE preset (h200-qwen3moe: Triton, one H200, 128 experts) and the settings the
printed line carries (``--set``, the simulator's stand-in for SPECCTL_SETTINGS);
the supervisor is a real `specctl run --headless --attach`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from specctl.runtime.supervisor.threshold_rows import dense_row_on_moe

from support.headless import Headless, wait_for
from support.sglang_args import as_sim_flags, printed_settings
from support.sim_process import sim_process

EVENT = "dense_thresholds_on_moe"
ROW_KEYS = ("off_at", "on_at", "min_accept", "accept_slope")
MOE_ROW = {"off_at": 1 << 20, "on_at": (1 << 20) - 1, "min_accept": 0.62,  # Triton, a MoE, one H200:
           "accept_slope": 0.0105}  # never off for load; the floor decides


def triton_on_h200(tmp_path: Path, *extra: str) -> dict[str, Any]:
    """SPECCTL_SETTINGS as `specctl sglang-args --backend triton --gpu 'NVIDIA H200' ...` prints it."""
    return printed_settings(tmp_path, "--backend", "triton", "--gpu", "NVIDIA H200", *extra)


def plugin_settings(url: str) -> dict[str, Any]:
    """What the policy inside the server runs, from its own /server_info."""
    info = httpx.get(f"{url}/server_info", timeout=10).json()
    settings: dict[str, Any] = info["internal_states"][0]["specctl"]["settings"]
    return settings


def settle(h: Headless, samples: int = 8) -> None:
    """Past the first answer, where the note would be said, by a few samples."""
    h.ready_sample()
    count = len(h.records("sample"))
    wait_for(lambda: len(h.records("sample")) >= count + samples, "a few more samples")


@pytest.mark.slow
def test_an_attached_moe_running_the_dense_row_is_told_once_with_both_fixes(tmp_path: Path) -> None:
    printed = triton_on_h200(tmp_path)
    row = {k: printed[k] for k in ROW_KEYS}
    assert row == {"off_at": 56, "on_at": 24, "min_accept": 0.3, "accept_slope": 0.05}, "the Triton row"
    with sim_process(tmp_path, "--preset", "h200-qwen3moe", "--load", "steady:c=4", *as_sim_flags(printed)) as url:
        assert {k: plugin_settings(url)[k] for k in ROW_KEYS} == row, "the plugin runs the dense row"
        h = Headless(tmp_path, "--attach", url)
        try:
            said = h.wait_event(EVENT)
            assert (said["backend"], said["experts"], said["settings"]) == ("triton", 128, row), said
            why = said["why"]
            assert "target is a MoE (128 experts)" in why and "triton thresholds measured on a dense model" in why
            assert "(off_at 56, on_at 24, min_accept 0.3, accept_slope 0.05)" in why, why
            relaunch = "`specctl sglang-args --experts 128` prints"
            live = "specctl set off_at=1048576 on_at=1048575 min_accept=0.62 accept_slope=0.0105"
            assert relaunch in why and f"run the triton thresholds measured on a MoE now with `{live}`" in why, why
            # the operator watching the terminal reads it, whole, once
            assert wait_for(lambda: EVENT in h.told(), "the line on stderr")
            line = next(text for text in h.told().splitlines() if EVENT in text)
            assert relaunch in line and live in line and 'experts=128' in line, line
            settle(h)
            assert len(h.records("event", EVENT)) == 1 and h.told().count(EVENT) == 1, "said once, not every poll"
            # told, not changed: the server still runs what its launch line gave it
            assert {k: plugin_settings(url)[k] for k in ROW_KEYS} == row
            assert not h.records("event", "settings") and not h.records("event", "backend_thresholds")
            # the live fix, as the line words it, works and is not taken for a new reason to say it
            out = h.cli(*live.split()[1:])
            assert out.returncode == 0, out.stderr
            assert wait_for(lambda: {k: plugin_settings(url)[k] for k in ROW_KEYS} == MOE_ROW, "the MoE row runs")
            settle(h)
            assert len(h.records("event", EVENT)) == 1
        finally:
            assert h.stop() == 0


def test_only_the_group_the_operator_left_to_the_row_is_named(tmp_path: Path) -> None:
    # their launch line had their own off_at / on_at; the acceptance floor is still the dense row's
    printed = triton_on_h200(tmp_path, "--set", "off_at=40", "--set", "on_at=20")
    assert (printed["off_at"], printed["min_accept"], printed["accept_slope"]) == (40, 0.3, 0.05)
    with sim_process(tmp_path, "--preset", "h200-qwen3moe", "--load", "idle", *as_sim_flags(printed)) as url:
        h = Headless(tmp_path, "--attach", url)
        try:
            said = h.wait_event(EVENT)
            assert said["settings"] == {"min_accept": 0.3, "accept_slope": 0.05}, said
            assert "(min_accept 0.3, accept_slope 0.05)" in said["why"], said["why"]
            assert said["why"].endswith("`specctl set min_accept=0.62 accept_slope=0.0105`"), said["why"]
        finally:
            assert h.stop() == 0


@pytest.mark.slow
@pytest.mark.parametrize(("preset", "sglang_args", "supervisor_args"), [
    # the line printed with --experts: the Triton row measured on a MoE, nothing to say
    ("h200-qwen3moe", ("--experts", "128"), ()),
    # a dense target: the row is what it was measured for
    ("h200-llama8b", (), ()),
    # the operator's own choice, given to the attached supervisor as well: theirs to keep
    ("h200-qwen3moe", (), ("--set", "off_at=56", "--set", "on_at=24", "--set", "min_accept=0.3",
                           "--set", "accept_slope=0.05")),
], ids=["moe-with-experts", "dense-with-row", "moe-row-chosen"])
def test_no_note_where_the_server_runs_what_fits_or_what_the_operator_chose(
        tmp_path: Path, preset: str, sglang_args: tuple[str, ...], supervisor_args: tuple[str, ...]) -> None:
    printed = triton_on_h200(tmp_path, *sglang_args)
    if sglang_args:
        assert {k: printed[k] for k in ROW_KEYS} == MOE_ROW
    with sim_process(tmp_path, "--preset", preset, "--load", "idle", *as_sim_flags(printed)) as url:
        info = httpx.get(f"{url}/server_info", timeout=10).json()
        assert info["attention_backend"] == "triton"
        assert info["internal_states"][0]["specctl"]["experts"] == (128 if "qwen3moe" in preset else 0)
        h = Headless(tmp_path, "--attach", url, *supervisor_args)
        try:
            settle(h)
            assert not h.records("event", EVENT) and EVENT not in h.told()
        finally:
            assert h.stop() == 0



def test_the_live_fix_is_offered_only_where_the_server_would_take_it() -> None:
    row = {"min_accept": 0.3, "accept_slope": 0.05}
    # where the MoE row fits the server (Triton on an H200) it is the fix, at one draft step too (0.62 <= 1)
    for steps in (3, 1):
        moe = dense_row_on_moe("triton", 128, row, {"steps": steps, **row}, MOE_ROW)
        assert moe.endswith("run the triton thresholds measured on a MoE now with "
                            "`specctl set min_accept=0.62 accept_slope=0.0105`"), moe
    # elsewhere (another GPU, unread GPUs) the policy's defaults are
    at_three = dense_row_on_moe("triton", 128, row, {"steps": 3, **row})
    assert at_three.endswith("run the policy's defaults now with `specctl set min_accept=1.3 accept_slope=0`"), at_three
    # at one draft step the default floor (1.3) is more than a verify accepts: no command the server refuses
    at_one = dense_row_on_moe("triton", 128, row, {"steps": 1, **row})
    assert "min_accept=1.3" not in at_one and at_one.endswith("set min_accept and accept_slope now with specctl set "
                                                              "(docs/policy.md)"), at_one
    assert "`specctl sglang-args --experts 128` prints" in at_one
