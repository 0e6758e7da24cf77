"""Simulated GPUs under full load read busy, as real ones do (issue 20, item 2).

Before: a tick in which no simulated step finished reported busy 0, so the 8-GPU
preset read 0 % util, idle power and idle clocks in 9 of 10 samples with 155
requests running. Here the simulator is a real process driven to saturation.
"""

from __future__ import annotations

import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_sim_server import DEADLINE_S, start_sim  # noqa: F401  (the fixture)

SAMPLES = 12


def running(client: httpx.Client) -> float:
    for family in text_string_to_metric_families(client.get("/metrics").text):
        if family.name == "sglang:num_running_reqs":
            return sum(s.value for s in family.samples)
    return 0.0


# the eight-GPU preset takes ~20 s to fill its batch; the H200 one shows the same in ~5 s
@pytest.mark.parametrize("preset", [pytest.param("rtx-8gpu-report", marks=pytest.mark.slow), "h200-llama8b"])
def test_gpus_read_busy_at_saturation(start_sim, preset: str) -> None:  # noqa: F811
    _, url = start_sim("--preset", preset, "--load", "steady:c=200")
    with httpx.Client(base_url=url, timeout=10.0) as client:
        deadline = time.monotonic() + DEADLINE_S
        while running(client) < 100:  # the batch has filled
            assert time.monotonic() < deadline, "the load never filled the batch"
            time.sleep(0.2)
        time.sleep(1.2)  # one utilisation window of steady load
        samples = []
        for _ in range(SAMPLES):
            samples.append(client.get("/sim/gpus").json())
            time.sleep(0.15)  # off the engine's 25 ms tick, so samples land between steps too
    gpus = samples[0]
    limit, idle_clock = gpus[0]["power_limit_w"], min(g["sm_clock_mhz"] for s in samples for g in s)
    busy = [all(g["util"] > 80 for g in sample) for sample in samples]
    assert sum(busy) >= SAMPLES * 0.8, [[g["util"] for g in s] for s in samples]
    for sample in samples:
        for g in sample:
            if g["util"] > 80:
                assert g["power_w"] > 0.5 * limit, g  # power follows the load
    assert idle_clock == max(g["sm_clock_mhz"] for g in gpus), "clocks at their busy speed throughout"
