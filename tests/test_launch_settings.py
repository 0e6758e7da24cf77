"""What specctl prints or launches is what it says: the policy's depth is a depth the server builds,
`sglang-args` prints the settings `run` would use (a measured row's pairs whole or not at all), and a
config file's refused floor names the file and the fix in its words; the report's tree (topk 4, 2 steps,
16 draft tokens) given to run's own flags launches under the plugin's switch, or is one line where it
cannot run. Real processes throughout: the CLI, the simulator, the stand-in SGLang launcher (which exits
unless the launch drafts the tree its preset serves)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specctl.runtime.core.adaptive_config import read_candidate_steps
from specctl.runtime.core.settings import PolicySettings
from specctl.runtime.core.thresholds import BY_BACKEND

from support.headless import Headless, wait_for

STANDIN = Path(__file__).parent / "standin_sglang"


def specctl(tmp_path: Path, *argv: str, config: str = "") -> subprocess.CompletedProcess[str]:
    """The CLI as an operator runs it, with a config file of ``config``'s text (not the user's)."""
    path = tmp_path / "specctl.toml"
    path.write_text(config)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SPECCTL_CONFIG": str(path),
           "SPECCTL_STATE_DIR": str(tmp_path / "state")}
    return subprocess.run([sys.executable, "-m", "specctl.console.cli.main", *argv], capture_output=True,
                          text=True, env=env, timeout=60, cwd=tmp_path)


def one_line_refusal(out: subprocess.CompletedProcess[str], command: str) -> str:
    assert out.returncode == 2 and out.stdout == "", (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith(f"specctl {command}: "), out.stderr
    return out.stderr


def model_dirs(tmp_path: Path) -> list[str]:
    for name in ("target", "draft"):
        (tmp_path / name).mkdir(exist_ok=True)
    return ["--model", str(tmp_path / "target"), "--draft", str(tmp_path / "draft")]


def printed(out: subprocess.CompletedProcess[str]) -> tuple[dict[str, Any], list[str], Path]:
    """sglang-args --format json: the settings the server starts with, its flags, its adaptive config."""
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    return json.loads(doc["env"]["SPECCTL_SETTINGS"]), doc["args"], Path(doc["adaptive_config"])


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


# -- 1. the policy's depth is one the launch builds ----------------------------------------------------

def test_sglang_args_refuses_a_steps_setting_the_launch_does_not_build(tmp_path: Path) -> None:
    """--steps 3 builds 0 and 3: a policy told 2 would run a depth the server does not have."""
    said = one_line_refusal(specctl(tmp_path, "sglang-args", "--steps", "3", "--set", "steps=2"), "sglang-args")
    assert "--set steps=2: the launch builds depths 0 and 3 only (--steps 3)" in said, said
    assert "give --steps 2 to launch at 2 draft steps" in said, said
    assert not (tmp_path / "state").exists() or not list((tmp_path / "state").iterdir()), "nothing written"
    # the flag it names, given, prints one depth everywhere
    settings, args, config = printed(specctl(tmp_path, "sglang-args", "--steps", "2", "--format", "json"))
    assert settings["steps"] == 2 and flag(args, "--speculative-num-steps") == "2"
    assert read_candidate_steps(config) == [0, 2]


def test_sglang_args_refuses_one_step_by_its_depth_before_its_floor(tmp_path: Path) -> None:
    """--set steps=1 under --steps 3 is the depth's mistake first: the floor hint would only lead to it."""
    said = one_line_refusal(specctl(tmp_path, "sglang-args", "--set", "steps=1"), "sglang-args")
    assert "give --steps 1 to launch at 1 draft step " in said and "min_accept" not in said, said


def test_sglang_args_keeps_a_steps_among_the_candidates_as_the_deepest_auto_uses(tmp_path: Path) -> None:
    """docs/policy.md: steps is the deepest depth auto may use, one of the candidates."""
    settings, args, config = printed(specctl(tmp_path, "sglang-args", "--steps", "3", "--set", "steps=2",
                                             "--speculative-candidate-steps", "0,2,3", "--format", "json"))
    assert (settings["steps"], settings["candidates"]) == (2, [0, 2, 3])
    assert flag(args, "--speculative-num-steps") == "3" and read_candidate_steps(config) == [0, 2, 3]


@pytest.mark.parametrize("command", ["sglang-args", "run"])
def test_a_launch_depth_outside_the_candidates_is_one_line_not_a_traceback(tmp_path: Path, command: str) -> None:
    """SGLang starts only at a depth it built: the adaptive config could not even be written."""
    argv = (["sglang-args"] if command == "sglang-args"
            else ["run", "--headless", "--socket", str(tmp_path / "s.sock"), *model_dirs(tmp_path)])
    said = one_line_refusal(specctl(tmp_path, *argv, "--set", "steps=2", "--speculative-candidate-steps", "0,1,2"),
                            command)
    launch = "--steps" if command == "sglang-args" else "--speculative-num-steps"
    assert f"{launch} 3 is not one of the candidate depths 0,1,2" in said and f"give {launch} 2 " in said, said
    assert not (tmp_path / "s.sock").exists(), "nothing started"


def test_run_refuses_a_launch_whose_policy_would_be_told_another_depth(tmp_path: Path) -> None:
    out = specctl(tmp_path, "run", "--headless", "--socket", str(tmp_path / "s.sock"), "--log", "j.jsonl",
                  *model_dirs(tmp_path), "--set", "steps=2")
    said = one_line_refusal(out, "run")
    assert "--set steps=2: the launch builds depths 0 and 3 only (--speculative-num-steps 3)" in said, said
    assert "give --speculative-num-steps 2 to launch at 2 draft steps" in said, said
    assert not (tmp_path / "s.sock").exists() and not (tmp_path / "j.jsonl").exists(), "nothing started"


def test_run_refuses_a_config_files_steps_the_launch_does_not_build(tmp_path: Path) -> None:
    out = specctl(tmp_path, "run", "--headless", "--socket", str(tmp_path / "s.sock"), *model_dirs(tmp_path),
                  config="[policy]\nsteps = 2\n")
    said = one_line_refusal(out, "run")
    assert said.startswith(f"specctl run: {tmp_path / 'specctl.toml'}: [policy] steps = 2: "), said
    assert "give --speculative-num-steps 2 " in said and "or take steps = 2 out of [policy]" in said, said


def test_a_launch_with_steps_among_its_candidates_runs_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Launched at 3 with candidates 0,2,3 and steps 2: the server starts, the policy caps auto at 2."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(STANDIN), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("STANDIN_STEP_S", "0.02")
    (tmp_path / "empty.toml").touch()
    monkeypatch.setenv("SPECCTL_CONFIG", str(tmp_path / "empty.toml"))
    h = Headless(tmp_path, *model_dirs(tmp_path), "--speculative-candidate-steps", "0,2,3", "--set", "steps=2")
    try:
        h.ready_sample()
        wait_for(lambda: h.status()["spec"]["settings"]["steps"] == 2, "the policy at steps 2")
        assert h.status()["spec"]["settings"]["candidates"] == [0, 2, 3]
        assert "Traceback" not in h.told()
    finally:
        assert h.stop() == 0


def test_the_simulator_builds_any_depth_a_steps_setting_names(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "empty.toml").touch()
    monkeypatch.setenv("SPECCTL_CONFIG", str(tmp_path / "empty.toml"))
    h = Headless(tmp_path, "--sim-load", "steady:c=1", "--set", "steps=2")
    try:
        assert h.ready_sample()["spec"]["settings"]["steps"] == 2
    finally:
        h.stop()


# -- 2. sglang-args applies a measured row's pairs whole, as the supervisor does ------------------------

DEFAULTS = PolicySettings()


@pytest.mark.parametrize(("backend", "given", "row_keeps", "defaults"), [
    ("triton", {"accept_slope": 0.01}, ("off_at", "on_at"), ("min_accept",)),
    ("triton", {"min_accept": 0.2}, ("off_at", "on_at"), ("accept_slope",)),
    ("flashinfer", {"off_at": 100}, ("min_accept", "accept_slope"), ("on_at",)),
    ("flashinfer", {"on_at": 8}, ("min_accept", "accept_slope"), ("off_at",)),
])
def test_sglang_args_never_prints_half_a_measured_pair(tmp_path: Path, backend: str, given: dict[str, float],
                                                       row_keeps: tuple[str, ...], defaults: tuple[str, ...]) -> None:
    """The operator's half of a pair goes with the policy's default for the other half, not the row's."""
    pairs = [f"{k}={v}" for k, v in given.items()]
    settings, _, _ = printed(specctl(tmp_path, "sglang-args", "--backend", backend, "--gpu", "NVIDIA H200",
                                     "--experts", "0", "--format", "json", *[a for p in pairs for a in ("--set", p)]))
    row = BY_BACKEND[backend]
    assert {k: settings[k] for k in given} == given
    assert {k: settings[k] for k in row_keeps} == {k: row[k] for k in row_keeps}, "the untouched pair is the row's"
    assert {k: settings[k] for k in defaults} == {k: getattr(DEFAULTS, k) for k in defaults}, settings


def test_sglang_args_at_one_step_names_the_default_floor_once_the_row_is_set_aside(tmp_path: Path) -> None:
    """--set accept_slope leaves the triton floor out, so the floor out of reach at one step is the default,
    and the one printed instead is the default scaled to one step."""
    out = specctl(tmp_path, "sglang-args", "--steps", "1", "--backend", "triton", "--gpu", "NVIDIA H200",
                  "--experts", "0", "--set", "accept_slope=0.01", "--format", "json")
    assert out.returncode == 0, out.stderr
    assert "min_accept 0.4: the default acceptance floor 1.3" in out.stderr, out.stderr
    assert json.loads(json.loads(out.stdout)["env"]["SPECCTL_SETTINGS"])["min_accept"] == 0.4


# -- 3. a config file's floor: named as the file's, fixed in its words ---------------------------------

def test_a_config_file_at_one_step_names_the_floor_to_write_there(tmp_path: Path) -> None:
    out = specctl(tmp_path, "run", "--headless", "--socket", str(tmp_path / "s.sock"), config="[policy]\nsteps = 1\n")
    said = one_line_refusal(out, "run")
    assert said.startswith(f"specctl run: {tmp_path / 'specctl.toml'}: [policy] steps = 1: the default "
                           "acceptance floor min_accept 1.3 "), said
    assert "add min_accept = 0.4 under [policy]" in said and "--set" not in said, said
    assert not (tmp_path / "s.sock").exists(), "nothing started"


def test_the_floor_written_as_told_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "specctl.toml"
    config.write_text("[policy]\nsteps = 1\nmin_accept = 0.4\n")
    monkeypatch.setenv("SPECCTL_CONFIG", str(config))
    h = Headless(tmp_path, "--sim-load", "steady:c=1")
    try:
        settings = h.ready_sample()["spec"]["settings"]
        assert (settings["steps"], settings["min_accept"]) == (1, 0.4)
    finally:
        h.stop()


@pytest.mark.parametrize("backend", ["launch", "sim"])
def test_a_config_files_floor_refused_at_runs_steps_is_the_files(tmp_path: Path, backend: str) -> None:
    argv = model_dirs(tmp_path) if backend == "launch" else []
    out = specctl(tmp_path, "run", "--headless", "--socket", str(tmp_path / "s.sock"), *argv,
                  "--speculative-num-steps", "1", config="[policy]\nmin_accept = 1.5\n")
    said = one_line_refusal(out, "run")
    assert said.startswith(f"specctl run: {tmp_path / 'specctl.toml'}: [policy] min_accept: must be between 0 "
                           "and steps (1), got 1.5; "), said
    assert "write min_accept = 0.4 under [policy]" in said and "--set min_accept:" not in said, said
    # overridden on the command line, the value is the operator's --set again
    out = specctl(tmp_path, "run", "--headless", "--socket", str(tmp_path / "s.sock"), *argv,
                  "--speculative-num-steps", "1", "--set", "min_accept=1.2", config="[policy]\nmin_accept = 1.5\n")
    said = one_line_refusal(out, "run")
    assert "--set min_accept: must be between 0 and steps (1), got 1.2" in said and "[policy]" not in said, said


# -- 4. a tree under the switch, launched by specctl run ----------------------------------------------

TREE_LAUNCH = ("--speculative-num-steps", "2", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "16")


@pytest.mark.slow
def test_run_launches_the_tree_under_the_switch_and_steers_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(STANDIN), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("STANDIN_STEP_S", "0.02")
    monkeypatch.setenv("STANDIN_PRESET", "rtx-8gpu-report")  # SGLang serving the report's tree
    monkeypatch.delenv("SPECCTL_TREE_SWITCH", raising=False)  # the launch must ask for it itself
    (tmp_path / "empty.toml").touch()
    monkeypatch.setenv("SPECCTL_CONFIG", str(tmp_path / "empty.toml"))
    h = Headless(tmp_path, *model_dirs(tmp_path), *TREE_LAUNCH)
    try:
        sample = wait_for(lambda: (s := h.ready_sample())["spec"] and s, "a sample with specctl's state")
        assert sample["server"]["topk"] == 4 and sample["spec"]["candidates"] == [0, 2]
        assert h.cli("force-off").returncode == 0
        assert h.wait_event("spec_switch", to=0)["from"] == 2
        assert h.cli("auto").returncode == 0
        assert not h.records("event", "view_only") and "Traceback" not in h.told()
    finally:
        assert h.stop() == 0


@pytest.mark.parametrize(("extra", "said"), [
    (("--speculative-num-steps", "2", "--speculative-eagle-topk", "4"),
     "a tree (--speculative-eagle-topk 4) needs --speculative-num-draft-tokens (2 to 21 at 2 steps)"),
    ((*TREE_LAUNCH[:4], "--speculative-num-draft-tokens", "30"),
     "--speculative-num-draft-tokens must be between 2 and 21"),
    (("--speculative-num-draft-tokens", "5"), "--speculative-num-draft-tokens is for a tree"),
    ((*TREE_LAUNCH, "--speculative-candidate-steps", "0,1,2"), "switches between its launch depth and off only"),
    ((*TREE_LAUNCH, "--set", "candidates=0,1,2"), "switches between its launch depth and off only"),
])
def test_a_tree_launch_that_cannot_run_is_one_line(tmp_path: Path, extra: tuple[str, ...], said: str) -> None:
    out = specctl(tmp_path, "run", "--headless", *model_dirs(tmp_path), *extra)
    assert said in one_line_refusal(out, "run")


@pytest.mark.parametrize("where", [(), ("--attach", "http://127.0.0.1:9")])
def test_the_tree_flags_shape_only_a_server_specctl_launches(tmp_path: Path, where: tuple[str, ...]) -> None:
    out = specctl(tmp_path, "run", "--headless", *where, *TREE_LAUNCH[2:])
    assert "shape a server specctl launches (--model)" in one_line_refusal(out, "run")
