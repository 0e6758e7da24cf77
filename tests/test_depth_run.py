"""Draft depths as an operator of `specctl run` meets them: bad values at start, the steps and the cost
table reaching the server, the note that auto cannot price middle depths without a table, and what
`specctl status`, `force-on`, `set` and `auto` say about depths. Real processes and sockets throughout."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.headless import Headless, wait_for

STANDIN = Path(__file__).parent / "standin_sglang"
NO_TABLE = ("without --depth-costs FILE auto chooses between 0 and 3 steps only; `specctl force-on --steps N` "
            "still pins any of [1, 2, 3]")


def run(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "empty.toml"  # an empty config: not the user's
    config.touch()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SPECCTL_CONFIG": str(config)}
    return subprocess.run([sys.executable, "-m", "specctl.console.cli.main", *argv], capture_output=True,
                          text=True, env=env, timeout=60, cwd=tmp_path)


def write_table(path: Path, depths: list[int], preset: str = "h200-llama8b") -> Path:
    out = subprocess.run([sys.executable, "-m", "specctl.runtime.sim.depth", "--preset", preset,
                          "--depths", ",".join(map(str, depths)), "--out", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return path


@pytest.fixture
def table(tmp_path: Path) -> Path:
    return write_table(tmp_path / "costs.json", [0, 1, 2, 3], "h200-llama8b-fa3")


@pytest.mark.parametrize(("argv", "said"), [
    (["--speculative-candidate-steps", "1,2,3"],
     "--speculative-candidate-steps: must hold 0 (off) and at least one depth, got [1, 2, 3]"),
    (["--speculative-candidate-steps", "0,1,2"],
     "--speculative-num-steps (default 3): must be one of the candidates [1, 2], got 3"),
    (["--speculative-num-steps", "2", "--speculative-candidate-steps", "0,1,3"],
     "--speculative-num-steps: must be one of the candidates [1, 3], got 2"),
    (["--speculative-candidate-steps", "0,1,17"], "--speculative-candidate-steps: depths must be between 0 and 16"),
    (["--speculative-candidate-steps", "0,1,2,3", "--depth-costs", "missing.json"],
     "--depth-costs missing.json: No such file or directory"),
    (["--speculative-candidate-steps", "0,1,2,3", "--depth-costs", "bad.json"], "--depth-costs bad.json: "),
    (["--speculative-candidate-steps", "0,1,2,3,4", "--speculative-num-steps", "4", "--depth-costs", "costs.json"],
     "--depth-costs costs.json: no column for depth 4 (it prices 0, 1, 2, 3; the candidates are 0,1,2,3,4)"),
    (["--speculative-candidate-steps", "0,1,2,3,4", "--speculative-num-steps", "4", "--depth-costs", "costs.json",
      "--model", "org/target", "--draft", "org/draft"], "--depth-costs costs.json: no column for depth 4"),
    (["--attach", "127.0.0.1:30000", "--depth-costs", "costs.json"],
     "--depth-costs is for a server specctl starts: a server started elsewhere reads its table from "
     "SPECCTL_DEPTH_COSTS"),
])
def test_bad_depth_choices_are_one_line_exit_2_and_nothing_starts(tmp_path: Path, table: Path, argv: list[str],
                                                                  said: str) -> None:
    (tmp_path / "bad.json").write_text("not json\n")
    out = run(tmp_path, "run", "--headless", "--socket", str(tmp_path / "s.sock"), "--log", "j.jsonl", *argv)
    assert out.returncode == 2, out.stderr
    assert said in out.stderr and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "s.sock").exists() and not (tmp_path / "j.jsonl").exists(), "nothing started"


def test_the_steps_flag_reaches_the_simulator(tmp_path: Path) -> None:
    h = Headless(tmp_path, "--sim-load", "steady:c=1", "--speculative-num-steps", "2", "--set", "mode=on")
    try:
        spec = h.ready_sample()["spec"]
        assert spec["settings"]["steps"] == 2, "the simulator used to run its preset's 3 steps"
        wait_for(lambda: h.status()["spec"]["steps"] == 2, "2 draft steps running")
    finally:
        h.stop()


def test_a_cost_table_given_to_run_prices_the_simulators_depths(tmp_path: Path) -> None:
    """A table in which depths 2 and 3 cost ten times depth 1's step: auto settles at 1 where the
    simulator's own model (depth 3 is cheap at one request) keeps 3."""
    costs = write_table(tmp_path / "costs.json", [0, 1, 2, 3])
    raw = json.loads(costs.read_text())
    raw["step_ms"] = [[row[0], row[1], row[1] * 10, row[1] * 10] for row in raw["step_ms"]]
    costs.write_text(json.dumps(raw))
    h = Headless(tmp_path, "--sim-load", "steady:c=1", "--speculative-candidate-steps", "0,1,2,3",
                 "--depth-costs", str(costs), "--set", "dwell=4")
    try:
        switch = h.wait_event("spec_switch", to=1)
        assert switch["reason"] == "depth" and switch["from"] == 3
        assert h.status()["spec"]["depth_model"] is True
        assert not h.records("event", "depth_costs_missing")
    finally:
        h.stop()


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """A stand-in SGLang on PATH's Python: the plugin's view of depths and tables, served by the simulator."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(STANDIN), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("STANDIN_STEP_S", "0.02")
    for name in ("target", "draft"):
        (tmp_path / name).mkdir()
    return ["--model", str(tmp_path / "target"), "--draft", str(tmp_path / "draft"),
            "--speculative-candidate-steps", "0,1,2,3"]


@pytest.mark.slow
def test_a_launch_with_middle_depths_and_no_table_says_once_that_auto_will_not_choose_them(
        tmp_path: Path, standin: list[str]) -> None:
    h = Headless(tmp_path, *standin)
    try:
        said = h.wait_event("depth_costs_missing")
        assert said["why"].startswith(NO_TABLE) and said["steps"] == 3 and said["depths"] == [1, 2, 3]
        h.ready_sample()
        names = [r["event"] for r in h.records("event")]
        assert names.index("server_start") < names.index("depth_costs_missing") < names.index("server_ready"), \
            "said at the launch, not once the model has loaded (minutes, on a GPU)"
        # on stderr, where the operator of run looks (printed just after the journal has it)
        wait_for(lambda: NO_TABLE in h.told().replace('\\"', '"'), "the note on stderr")
        seen = len(h.records("sample"))
        wait_for(lambda: len(h.records("sample")) > seen + 5, "more samples")
        assert len(h.records("event", "depth_costs_missing")) == 1, "said once, not every sample"
        assert h.status()["spec"]["depth_model"] is False
    finally:
        h.stop()


def test_a_launch_with_a_table_or_the_simulators_own_model_is_not_told(tmp_path: Path, standin: list[str],
                                                                        table: Path) -> None:
    (tmp_path / "launch").mkdir()
    (tmp_path / "sim").mkdir()
    launched = Headless(tmp_path / "launch", *standin, "--depth-costs", str(table))
    sim = Headless(tmp_path / "sim", "--speculative-candidate-steps", "0,1,2,3")  # prices with its own model
    try:
        for h in (launched, sim):
            h.ready_sample()
            wait_for(lambda h=h: h.status()["spec"]["depth_model"] is True, "a priced depth choice")
            assert not h.records("event", "depth_costs_missing") and "depth_costs_missing" not in h.told()
    finally:
        launched.stop()
        sim.stop()


def test_status_force_on_set_and_auto_say_the_depths(tmp_path: Path) -> None:
    h = Headless(tmp_path, "--sim-load", "steady:c=1", "--speculative-candidate-steps", "0,1,2,3")
    try:
        h.ready_sample()
        out = h.cli("force-on", "--steps", "2")
        assert out.returncode == 0, out.stderr
        wait_for(lambda: "ON (depth 2 of 0,1,2)  mode on" in h.cli("status").stdout, "the pinned depth in status")
        assert re.search(r"last switch  at step \d+ \(forced\), \d+ steps ago", h.cli("status").stdout)

        out = h.cli("set", "candidates=0,1")  # steps (2) would fall outside them
        assert out.returncode == 1 and "specctl set candidates=0,1 steps=1 min_accept=0.4)" in out.stderr, out.stderr
        out = h.cli("set", "candidates=0,1,2,3,4")  # depth 4 was not built
        assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
        assert "needs a relaunch (specctl run --speculative-candidate-steps 0,1,2,3,4" in out.stderr
        out = h.cli("force-on", "--steps", "1")  # the default floor (1.3) is above what depth 1 can accept
        assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
        assert "min_accept" in out.stderr and "specctl set mode=on steps=1 min_accept=0.4," in out.stderr
        out = h.cli("set", "mode=on", "steps=1", "min_accept=0.8")
        assert out.returncode == 0, out.stderr
        wait_for(lambda: "ON (depth 1 of 0,1)  mode on" in h.cli("status").stdout, "depth 1 pinned")

        out = h.cli("auto")
        assert out.returncode == 0, out.stderr
        assert "depths 0,1, up to steps 1: `specctl set steps=3` lets it use all of 0,1,2,3" in out.stdout
        out = h.cli("set", "steps=3", "min_accept=1.3")
        assert out.returncode == 0, out.stderr
        out = h.cli("auto")
        assert out.returncode == 0 and out.stdout.rstrip().endswith("on at <= 24; depths 0,1,2,3)"), out.stdout
        cmds = [(r["cmd"], r["ok"], r["args"]) for r in h.records("command")]
        assert cmds == [("mode", True, {"mode": "on", "steps": 2}),
                        ("set", False, {"settings": {"candidates": [0, 1]}}),
                        ("set", False, {"settings": {"candidates": [0, 1, 2, 3, 4]}}),
                        ("mode", False, {"mode": "on", "steps": 1}),
                        ("set", True, {"settings": {"mode": "on", "steps": 1, "min_accept": 0.8}}),
                        ("mode", True, {"mode": "auto"}),
                        ("set", True, {"settings": {"steps": 3, "min_accept": 1.3}}), ("mode", True, {"mode": "auto"})]
    finally:
        h.stop()
