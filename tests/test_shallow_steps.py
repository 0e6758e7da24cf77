"""One draft step, as an operator meets it: the default acceptance floor (1.3 accepted draft tokens a
verify) is more than a 1-step verify can accept, so `specctl run` and `specctl sglang-args` refuse it in
one line that says the floor was not theirs and names the value to give (`--set min_accept=0.4`), and
take that value when it is given back. Real processes throughout: the CLI, the simulator, the stand-in
SGLang launcher. The hypothesis test drives the same parsing in-process, over every depth."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specctl.console.cli.main import build_parser
from specctl.console.cli.main import main as specctl_main
from specctl.runtime.core.settings import PolicySettings, floor_for_steps
from specctl.runtime.core.thresholds import BY_BACKEND
from specctl.runtime.sim.presets import PRESETS
from specctl.runtime.supervisor.config import ConfigError, SupervisorConfig

from support.headless import Headless, wait_for

STANDIN = Path(__file__).parent / "standin_sglang"
HINT = "give --set min_accept=0.4 (the default scaled to 1 draft step"


def specctl(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "empty.toml"  # an empty config: not the user's
    config.touch()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SPECCTL_CONFIG": str(config),
           "SPECCTL_STATE_DIR": str(tmp_path / "state")}
    return subprocess.run([sys.executable, "-m", "specctl.console.cli.main", *argv], capture_output=True,
                          text=True, env=env, timeout=60, cwd=tmp_path)


def model_dirs(tmp_path: Path) -> list[str]:
    for name in ("target", "draft"):
        (tmp_path / name).mkdir(exist_ok=True)
    return ["--model", str(tmp_path / "target"), "--draft", str(tmp_path / "draft")]


@pytest.mark.parametrize("backend", ["launch", "sim", "sim-rtx-8gpu-report", "sim-h200-qwen3moe"])
def test_run_at_one_step_names_the_floor_to_give_and_starts_nothing(tmp_path: Path, backend: str) -> None:
    argv = model_dirs(tmp_path) if backend == "launch" else []
    if backend.startswith("sim-"):
        argv = ["--sim-preset", backend.removeprefix("sim-")]
    out = specctl(tmp_path, "run", "--headless", "--socket", str(tmp_path / "s.sock"), "--log", "j.jsonl",
                  *argv, "--speculative-num-steps", "1")
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("specctl run: at 1 draft step the default acceptance floor min_accept 1.3 ")
    assert HINT in out.stderr, out.stderr
    assert not (tmp_path / "s.sock").exists() and not (tmp_path / "j.jsonl").exists(), "nothing started"


def test_run_at_two_steps_keeps_the_default_floor(tmp_path: Path) -> None:
    """1.3 is within reach of a 2-step verify: no refusal, and the floor stays the operator's default."""
    h = Headless(tmp_path, "--sim-load", "steady:c=1", "--speculative-num-steps", "2")
    try:
        spec = h.ready_sample()["spec"]
        assert (spec["settings"]["steps"], spec["settings"]["min_accept"]) == (2, 1.3)
    finally:
        h.stop()


@pytest.mark.parametrize("command", ["run", "sglang-args"])
def test_a_floor_the_operator_gave_too_high_is_refused_as_theirs(tmp_path: Path, command: str) -> None:
    argv = (["run", "--headless", "--socket", str(tmp_path / "s.sock"), *model_dirs(tmp_path),
             "--speculative-num-steps", "1"] if command == "run" else ["sglang-args", "--steps", "1"])
    out = specctl(tmp_path, *argv, "--set", "min_accept=1.5")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "min_accept: must be between 0 and steps (1), got 1.5" in out.stderr, out.stderr
    assert "default" not in out.stderr, "the operator typed this floor: it is not called the default"


def test_sglang_args_at_one_step_picks_the_floor_one_step_can_meet_and_says_so(tmp_path: Path) -> None:
    out = specctl(tmp_path, "sglang-args", "--steps", "1", "--format", "json")
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and "min_accept 0.4: the default acceptance floor 1.3" in out.stderr
    printed = json.loads(out.stdout)
    started = json.loads(printed["env"]["SPECCTL_SETTINGS"])
    assert (started["steps"], started["min_accept"]) == (1, 0.4)
    assert printed["args"][printed["args"].index("--speculative-num-steps") + 1] == "1"


@pytest.mark.parametrize("backend", sorted(BY_BACKEND))
def test_sglang_args_at_one_step_takes_a_measured_rows_floor(tmp_path: Path, backend: str) -> None:
    """Every measured row's floor is within reach of one draft step: printed as it is, no refusal."""
    out = specctl(tmp_path, "sglang-args", "--steps", "1", "--backend", backend, "--gpu", "NVIDIA H200",
                  "--experts", "0", "--format", "json")
    assert out.returncode == 0, out.stderr
    started = json.loads(json.loads(out.stdout)["env"]["SPECCTL_SETTINGS"])
    assert (started["steps"], started["min_accept"]) == (1, BY_BACKEND[backend]["min_accept"])


def test_a_launch_at_one_step_with_the_hinted_floor_runs_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past config, through the SGLang backend (which built PolicySettings(steps=1) on its own and failed
    there), to a server running one draft step with the floor given."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(STANDIN), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("STANDIN_STEP_S", "0.02")
    h = Headless(tmp_path, *model_dirs(tmp_path), "--speculative-num-steps", "1", "--set", "min_accept=0.4")
    try:
        h.ready_sample()
        wait_for(lambda: h.status()["spec"]["settings"]["steps"] == 1, "one draft step running")
        assert h.status()["spec"]["settings"]["min_accept"] == 0.4
        assert "Traceback" not in h.told()
    finally:
        assert h.stop() == 0


def test_the_simulator_at_one_step_with_the_hinted_floor_runs_it(tmp_path: Path) -> None:
    h = Headless(tmp_path, "--sim-load", "steady:c=1", "--speculative-num-steps", "1", "--set", "min_accept=0.4")
    try:
        spec = h.ready_sample()["spec"]
        assert (spec["settings"]["steps"], spec["settings"]["min_accept"]) == (1, 0.4)
        out = h.cli("set", "min_accept=1.3")  # the operator's own floor, out of reach: refused as it is
        assert out.returncode == 1 and "min_accept: must be between 0 and steps (1), got 1.3" in out.stderr
        assert "default" not in out.stderr, out.stderr
    finally:
        h.stop()


def test_force_on_one_step_on_a_server_built_for_three_names_the_relaunch_and_its_floor(tmp_path: Path) -> None:
    """Built for {0, 3}: pinning another depth is refused in one line that names the launch flag that builds
    depths; `set mode=on steps=1 min_accept=0.4`, refused by the server, names the relaunch and its floor."""
    h = Headless(tmp_path, "--sim-load", "steady:c=1")
    try:
        h.ready_sample()
        out = h.cli("force-on", "--steps", "1")
        assert out.returncode == 1 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr == ("specctl force-on: refused: steps: this server built depth 3 only; pinning depth 1 "
                              "needs a relaunch with --speculative-candidate-steps 0,1,3\n")
        out = h.cli("set", "mode=on", "steps=1", "min_accept=0.4")  # the depth, refused by the server
        assert out.returncode == 1 and "specctl run --speculative-num-steps 1 --set min_accept=0.4," in out.stderr
        out = h.cli("set", "mode=on", "steps=2")  # 1.3 is within reach of 2: the relaunch needs no floor
        assert out.returncode == 1 and "specctl run --speculative-num-steps 2, or" in out.stderr, out.stderr
    finally:
        h.stop()


# -- every depth, the floor given or not -------------------------------------------------------------

FLOORS = st.none() | st.integers(min_value=0, max_value=170).map(lambda tenths: tenths / 10)


def run_config(steps: int, floor: float | None, launch: bool, preset: str) -> SupervisorConfig:
    """`specctl run`'s own parsing and config, as far as it goes before anything starts."""
    argv = ["run", "--headless", "--speculative-num-steps", str(steps)]
    argv += ["--model", "org/target", "--draft", "org/draft"] if launch else ["--sim-preset", preset]
    argv += [] if floor is None else ["--set", f"min_accept={floor}"]
    return SupervisorConfig.from_args(build_parser().parse_args(argv))


def sglang_args(steps: int, floor: float | None, backend: str | None, out_dir: Path) -> tuple[int, str]:
    argv = ["sglang-args", "--steps", str(steps), "--config", str(out_dir / "adaptive.json"), "--format", "json"]
    argv += [] if backend is None else ["--backend", backend, "--gpu", "NVIDIA H200", "--experts", "0"]
    argv += [] if floor is None else ["--set", f"min_accept={floor}"]
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = specctl_main(argv)
    return rc, err.getvalue()


def hinted(message: str) -> float:
    found = re.search(r"give --set min_accept=([0-9.]+) ", message)
    assert found, message
    return float(found.group(1))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.integers(min_value=1, max_value=16), floor=FLOORS, launch=st.booleans(),
       preset=st.sampled_from(sorted(PRESETS)))
def test_run_refuses_iff_the_floor_is_out_of_reach_and_takes_the_hint(
        steps: int, floor: float | None, launch: bool, preset: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "empty.toml").touch()
    monkeypatch.setenv("SPECCTL_CONFIG", str(tmp_path / "empty.toml"))
    effective = PolicySettings.min_accept if floor is None else floor
    try:
        config = run_config(steps, floor, launch, preset)  # anything but ConfigError would be a traceback
    except ConfigError as exc:
        assert effective > steps, f"refused a floor within reach: {exc}"
        if floor is None:
            assert "the default acceptance floor" in str(exc) and hinted(str(exc)) == floor_for_steps(steps)
            run_config(steps, hinted(str(exc)), launch, preset)  # the hint, given back, is taken
        else:
            assert f"must be between 0 and steps ({steps}), got {floor}" in str(exc)
        return
    assert effective <= steps
    assert config.start_settings().steps == steps and config.start_settings().min_accept == effective


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.integers(min_value=1, max_value=16), floor=FLOORS,
       backend=st.sampled_from([None, *sorted(BY_BACKEND)]))
def test_sglang_args_refuses_only_a_floor_the_operator_gave_out_of_reach_and_picks_one_otherwise(
        steps: int, floor: float | None, backend: str | None, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECCTL_STATE_DIR", str(tmp_path / "state"))
    row_floor = PolicySettings.min_accept if backend is None else BY_BACKEND[backend]["min_accept"]
    rc, err = sglang_args(steps, floor, backend, tmp_path)  # a traceback would raise out of here
    assert rc in (0, 2) and "Traceback" not in err
    assert (rc == 2) == (floor is not None and floor > steps), err
    if rc == 2:
        assert f"must be between 0 and steps ({steps}), got {floor}" in err, err
    elif floor is None and row_floor > steps:  # the floor nobody gave, out of reach: the scaled default, said
        assert f"min_accept {floor_for_steps(steps):g}:" in err, err


@pytest.mark.parametrize(("steps", "floor"), [(1, 0.4), (2, 0.9), (3, 1.3), (16, 6.9)])
def test_the_hinted_floor_is_the_default_scaled_to_the_depth(steps: int, floor: float) -> None:
    assert floor_for_steps(steps) == floor
    assert PolicySettings(steps=steps, min_accept=floor_for_steps(steps)).min_accept <= steps
