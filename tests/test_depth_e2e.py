"""Draft depth end to end: `specctl run --headless` on a simulator built with depths 0-3, pinned from the CLI."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.headless import Headless, wait_for


@pytest.fixture
def sup(tmp_path: Path):
    h = Headless(tmp_path, "--sim-load", "steady:c=4", "--speculative-candidate-steps", "0,1,2,3",
                 "--set", "min_accept=0.3", "--set", "dwell=4")
    yield h
    h.stop()


def test_force_on_steps_pins_a_depth_and_the_journal_says_from_and_to(sup: Headless) -> None:
    sample = sup.ready_sample()
    assert sample["spec"]["candidates"] == [0, 1, 2, 3] and sample["spec"]["depth"] == 3
    assert sample["spec"]["settings"]["candidates"] == [0, 1, 2, 3]

    out = sup.cli("force-on", "--steps", "2")
    assert out.returncode == 0, out.stderr
    assert "forced ON at 2 draft steps" in out.stdout
    switch = sup.wait_event("spec_switch", reason="forced", to=2)
    assert switch["from"] == 3 and switch["on"] is True
    cmd = [r for r in sup.records("command") if r["cmd"] == "mode"][-1]
    assert cmd["ok"] is True and cmd["uid"] == os.getuid() and cmd["args"] == {"mode": "on", "steps": 2}
    wait_for(lambda: sup.status()["spec"]["depth"] == 2, "depth 2 in the sample")

    out = sup.cli("set", "steps=1")  # forced on: the new steps is the pinned depth
    assert out.returncode == 0, out.stderr
    assert sup.wait_event("spec_switch", to=1)["from"] == 2
    wait_for(lambda: sup.status()["spec"]["steps"] == 1, "depth 1 in the sample")


def test_a_depth_the_server_did_not_build_is_refused_and_changes_nothing(sup: Headless) -> None:
    sup.ready_sample()
    before = sup.status()["spec"]["settings"]
    out = sup.cli("force-on", "--steps", "5")
    assert out.returncode == 1 and "steps" in out.stderr and "Traceback" not in out.stderr
    out = sup.cli("set", "candidates=0,1,4")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert sup.status()["spec"]["settings"] == before, "nothing applied"
    out = sup.cli("set", "candidates=0,1,3")  # a subset of what was built is fine
    assert out.returncode == 0, out.stderr
    wait_for(lambda: sup.status()["spec"]["candidates"] == [0, 1, 3], "the narrower candidates")
