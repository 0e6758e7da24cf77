"""Two sources of one setting, as an operator meets them, through real processes.

1. The simulator's depth from two command-line sources (`--speculative-num-steps 2` and `--set steps=3`)
   is refused in one line naming both, unless they agree; the config file's `[policy] steps` is
   overridden by the flag, as the command line overrides the file everywhere.
2. `specctl sglang-args` reads the config file's `[policy]` where `specctl run` reads it (the XDG config
   dir's specctl.toml, or $SPECCTL_CONFIG), under the same precedence (file < --set), so the policy it
   prints is the one run starts with; stderr names the file once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.headless import Headless, wait_for

STANDIN = Path(__file__).parent / "standin_sglang"
FILE = "[policy]\noff_at = 40\nmin_accept = 1.0\n"


def site_config(tmp_path: Path, text: str) -> Path:
    """A config file at the default location under a temp XDG config dir (no $SPECCTL_CONFIG)."""
    path = tmp_path / "xdg" / "specctl" / "specctl.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def env_for(tmp_path: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
            "SPECCTL_STATE_DIR": str(tmp_path / "state")}


def specctl(tmp_path: Path, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specctl.console.cli.main", *argv], capture_output=True,
                          text=True, env=env or env_for(tmp_path), timeout=60, cwd=tmp_path)


def one_line_refusal(out: subprocess.CompletedProcess[str], command: str) -> str:
    assert out.returncode == 2 and out.stdout == "", (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith(f"specctl {command}: "), out.stderr
    return out.stderr


def printed_settings(out: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert out.returncode == 0, out.stderr
    return json.loads(json.loads(out.stdout)["env"]["SPECCTL_SETTINGS"])


def model_dirs(tmp_path: Path) -> list[str]:
    for name in ("target", "draft"):
        (tmp_path / name).mkdir(exist_ok=True)
    return ["--model", str(tmp_path / "target"), "--draft", str(tmp_path / "draft")]


# -- 1. the simulator's depth, named twice on one command line --------------------------------------------

@pytest.mark.parametrize("verb", ["run", "tui"])
def test_the_simulator_refuses_two_depths_on_one_command_line(tmp_path: Path, verb: str) -> None:
    site_config(tmp_path, "")
    headless = ["--headless"] if verb == "run" else []
    out = specctl(tmp_path, verb, *headless, "--socket", str(tmp_path / "s.sock"), "--log", str(tmp_path / "j.jsonl"),
                  "--speculative-num-steps", "2", "--set", "steps=3")
    assert out.returncode == 2 and out.stdout == "", (out.stdout, out.stderr)
    prefix = "specctl run: " if verb == "run" else "specctl: "  # the console's refusals carry no verb
    assert out.stderr == (f"{prefix}--speculative-num-steps 2 and --set steps=3 name two depths for the "
                    "simulator: give one\n")
    assert not (tmp_path / "s.sock").exists() and not (tmp_path / "j.jsonl").exists(), "nothing started"


def test_a_set_steps_that_is_no_number_beside_the_flag_is_refused_as_such(tmp_path: Path) -> None:
    """The flag no longer hides the --set value: a bad one is said, not overwritten."""
    site_config(tmp_path, "")
    out = specctl(tmp_path, "run", "--headless", "--socket", str(tmp_path / "s.sock"),
                  "--speculative-num-steps", "2", "--set", "steps=two")
    assert one_line_refusal(out, "run") == "specctl run: --set steps: must be an integer, got 'two'\n"


def test_the_simulator_runs_a_depth_both_sources_agree_on_over_the_files(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Flag and --set agree: no refusal. The file's `[policy] steps = 3` is overridden, as flags override it."""
    site_config(tmp_path, "[policy]\nsteps = 3\n")
    monkeypatch.delenv("SPECCTL_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    h = Headless(tmp_path, "--sim-load", "steady:c=1", "--speculative-num-steps", "2", "--set", "steps=2")
    try:
        assert h.ready_sample()["spec"]["settings"]["steps"] == 2
        assert "Traceback" not in h.told()
    finally:
        h.stop()


def test_a_launch_still_refuses_a_set_steps_it_does_not_build(tmp_path: Path) -> None:
    site_config(tmp_path, "")
    out = specctl(tmp_path, "run", "--headless", "--socket", str(tmp_path / "s.sock"), *model_dirs(tmp_path),
                  "--speculative-num-steps", "2", "--set", "steps=3")
    said = one_line_refusal(out, "run")
    assert said.startswith("specctl run: --set steps=3: the launch builds depths 0 and 2 only"), said


# -- 2. sglang-args prints the policy run would start with ---------------------------------------------

def test_sglang_args_reads_the_default_config_file_and_says_so_once(tmp_path: Path) -> None:
    path = site_config(tmp_path, FILE)
    out = specctl(tmp_path, "sglang-args", "--format", "json")
    settings = printed_settings(out)
    assert (settings["off_at"], settings["min_accept"]) == (40, 1.0)
    assert out.stderr == (f"specctl sglang-args: [policy] read from {path}, as specctl run reads it "
                          "(--set overrides it)\n")


def test_sglang_args_reads_the_file_specctl_config_names(tmp_path: Path) -> None:
    site_config(tmp_path, "[policy]\noff_at = 99\n")  # the default place, which $SPECCTL_CONFIG overrides
    named = tmp_path / "elsewhere.toml"
    named.write_text(FILE)
    out = specctl(tmp_path, "sglang-args", "--format", "json", env={**env_for(tmp_path), "SPECCTL_CONFIG": str(named)})
    assert printed_settings(out)["off_at"] == 40
    assert f"read from {named}," in out.stderr and out.stderr.count("\n") == 1, out.stderr


def test_sglang_args_set_overrides_the_file_and_its_config_flag_is_still_the_adaptive_config(tmp_path: Path) -> None:
    site_config(tmp_path, FILE)
    adaptive = tmp_path / "out" / "adaptive.json"
    out = specctl(tmp_path, "sglang-args", "--format", "json", "--set", "off_at=44", "--config", str(adaptive))
    settings = printed_settings(out)
    assert (settings["off_at"], settings["min_accept"]) == (44, 1.0), "--set over the file, the rest the file's"
    assert json.loads(out.stdout)["adaptive_config"] == str(adaptive) and adaptive.is_file()


def test_sglang_args_without_a_policy_table_says_nothing(tmp_path: Path) -> None:
    site_config(tmp_path, "[supervisor]\ninterval = 0.5\n")
    out = specctl(tmp_path, "sglang-args", "--format", "json")
    assert out.returncode == 0 and out.stderr == "", out.stderr


def test_sglang_args_refuses_a_files_steps_its_launch_does_not_build_as_run_does(tmp_path: Path) -> None:
    path = site_config(tmp_path, "[policy]\nsteps = 2\n")
    said = one_line_refusal(specctl(tmp_path, "sglang-args", "--format", "json"), "sglang-args")
    assert said.startswith(f"specctl sglang-args: {path}: [policy] steps = 2: the launch builds depths 0 and 3 only "
                           "(--steps 3)"), said
    assert "give --steps 2 " in said and said.endswith("or take steps = 2 out of [policy]\n"), said
    assert not (tmp_path / "state").exists() or not list((tmp_path / "state").iterdir()), "no adaptive config"


def test_sglang_args_names_a_broken_file_in_one_line(tmp_path: Path) -> None:
    path = site_config(tmp_path, "[policy]\noff_att = 40\n")
    said = one_line_refusal(specctl(tmp_path, "sglang-args"), "sglang-args")
    assert said.startswith(f"specctl sglang-args: {path}: [policy] "), said


def test_sglang_args_prints_the_policy_a_launch_by_run_starts_with(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The same file and --set: what sglang-args prints is what `specctl run` runs (the stand-in SGLang)."""
    site_config(tmp_path, FILE)
    printed = printed_settings(specctl(tmp_path, "sglang-args", "--format", "json", "--set", "on_at=20"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(STANDIN), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("STANDIN_STEP_S", "0.02")
    monkeypatch.delenv("SPECCTL_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    # calibration off: its probes force a mode for a few steps, which is not what this compares
    h = Headless(tmp_path, *model_dirs(tmp_path), "--set", "on_at=20", "--set", "calibrate=off")
    try:
        h.ready_sample()
        running = wait_for(lambda: h.status()["spec"]["settings"], "the running settings")
        assert {k: running[k] for k in printed} == printed
        assert (printed["off_at"], printed["on_at"], printed["min_accept"]) == (40, 20, 1.0)
    finally:
        assert h.stop() == 0
