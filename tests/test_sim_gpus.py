"""Simulated GPUs report NVML-shaped readings; a failed one keeps index and name only."""

from __future__ import annotations

import pytest

from specctl.runtime.sim.gpus import SimGpus
from specctl.runtime.sim.presets import get_preset

KEYS = {"index", "name", "uuid", "state", "error", "util", "mem_used", "mem_total", "power_w",
        "power_limit_w", "temp_c", "sm_clock_mhz", "mem_clock_mhz", "processes"}


def _gpus(count: int = 2, failed: frozenset[int] = frozenset()) -> SimGpus:
    preset = get_preset("h200-llama8b")
    return SimGpus(preset.gpu, count, mem_fraction_static=preset.mem_fraction_static, failed=failed)


def test_readings_have_the_sample_shape_and_follow_load() -> None:
    gpus = _gpus()
    idle = gpus.snapshot()
    assert [g["index"] for g in idle] == [0, 1]
    assert all(set(g) == KEYS and g["state"] == "ok" and g["error"] is None for g in idle)
    assert idle[0]["uuid"] != idle[1]["uuid"]
    gpus.update(5.0, 1.0, 200)
    busy = gpus.snapshot()[0]
    assert busy["util"] == 100.0
    assert busy["power_w"] > idle[0]["power_w"]
    assert busy["power_w"] <= busy["power_limit_w"]
    assert idle[0]["temp_c"] < busy["temp_c"]
    assert 0 < busy["mem_used"] < busy["mem_total"]


def test_temperature_lags_towards_its_target() -> None:
    gpus = _gpus(1)
    temps = []
    for _ in range(5):
        gpus.update(10.0, 1.0, 256)
        temps.append(gpus.snapshot()[0]["temp_c"])
    assert temps == sorted(temps)
    assert temps[1] - temps[0] > temps[4] - temps[3]  # first-order: the approach slows down


def test_failed_gpu_reports_nulls() -> None:
    snap = _gpus(4, frozenset({3})).snapshot()
    failed = snap[3]
    assert failed["state"] == "failed" and failed["error"]
    assert failed["index"] == 3 and failed["name"] == "NVIDIA H200"
    assert all(failed[k] is None for k in KEYS - {"index", "name", "state", "error"})
    assert snap[2]["state"] == "ok"


@pytest.mark.parametrize(("count", "failed"), [(0, frozenset()), (17, frozenset()), (2, frozenset({2}))])
def test_bad_counts_are_refused(count: int, failed: frozenset[int]) -> None:
    with pytest.raises(ValueError):
        _gpus(count, failed)


def test_each_gpu_runs_its_tp_ranks_scheduler_holding_most_of_its_memory() -> None:
    """As SGLang runs under tensor parallelism: one scheduler process per rank, owned by a real process."""
    import os

    gpus = _gpus(4)
    gpus.update(5.0, 1.0, 64)
    for gpu in gpus.snapshot():
        [proc] = gpu["processes"]
        assert proc["command"] == f"sglang::scheduler_TP{gpu['index']}"
        assert proc["pid"] == os.getpid() and proc["user"]
        assert 0.9 * gpu["mem_used"] < proc["mem_used"] < gpu["mem_used"]
        assert gpu["mem_clock_mhz"] == 3201.0
    assert _gpus(4, frozenset({1})).snapshot()[1]["processes"] is None  # a lost GPU lists nothing
