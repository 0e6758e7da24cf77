"""The site config file: strict, overridden by flags, and never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specctl.console.cli.main import build_parser
from specctl.runtime.supervisor.config import ConfigError, SupervisorConfig
from specctl.runtime.supervisor.config_file import ConfigFileError, load


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "specctl.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_absent_file_is_an_empty_config(tmp_path: Path) -> None:
    assert load(tmp_path / "nope.toml").policy == {}


def test_every_policy_setting_can_be_set_in_the_file(tmp_path: Path) -> None:
    assert load(write(tmp_path, "[policy]\noff_at = 48\nwarm_below = 16\n")).policy == {"off_at": 48,
                                                                                      "warm_below": 16}


@pytest.mark.parametrize("text, named", [
    ("[polcy]\noff_at = 4\n", "[polcy]"),
    ("[policy]\nof_at = 4\n", "of_at"),
    ("[policy]\noff_at = 8\non_at = 9\n", "on_at"),
    ("[policy]\nwarm_below = -1\n", "warm_below"),
    ("[supervisor]\ninterval = 'fast'\n", "interval"),
    ("[supervisor]\nsokcet = '/x'\n", "sokcet"),
    ("[policy\n", "specctl.toml"),
])
def test_mistakes_name_the_culprit(tmp_path: Path, text: str, named: str) -> None:
    with pytest.raises(ConfigFileError, match=named.replace("[", r"\[")):
        load(write(tmp_path, text))


def test_flags_override_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "[policy]\noff_at = 48\non_at = 16\n[supervisor]\ninterval = 2\n"
                           f"log = '{tmp_path}/run.jsonl'\nsocket = '{tmp_path}/s.sock'\n")
    monkeypatch.setenv("SPECCTL_CONFIG", str(path))
    monkeypatch.delenv("SPECCTL_SOCKET", raising=False)
    args = build_parser().parse_args(["run", "--headless", "--set", "on_at=8", "--interval", "1"])
    cfg = SupervisorConfig.from_args(args)
    assert cfg.settings == {"off_at": 48, "on_at": 8}, "checked values, not the text typed"
    assert cfg.interval == 1.0 and cfg.journal_path == tmp_path / "run.jsonl"
    assert cfg.socket_path == tmp_path / "s.sock"


def test_a_broken_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = write(tmp_path, "[policy]\nsteps = 0\n")
    env = {"SPECCTL_CONFIG": str(path), "PATH": "/usr/bin:/bin"}
    for argv in (["run", "--headless"], ["status"]):
        out = subprocess.run([sys.executable, "-m", "specctl.console.cli.main", *argv], capture_output=True,
                             text=True, env=env, timeout=60)
        assert out.returncode == 2, out.stderr
        assert "steps" in out.stderr and "Traceback" not in out.stderr


def test_from_args_turns_file_errors_into_config_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECCTL_CONFIG", str(write(tmp_path, "[supervisor]\nsim_load = 3\n")))
    with pytest.raises(ConfigError, match="sim_load"):
        SupervisorConfig.from_args(build_parser().parse_args(["run", "--headless"]))


@pytest.mark.parametrize("text, flag, named", [
    ("[supervisor]\ninterval = 0.001\n", "--interval", "[supervisor] interval must be between"),
    ("[supervisor]\nsim_load = 'nope'\n", "--sim-load", "[supervisor] sim_load: unknown load kind"),
])
def test_a_bad_value_from_the_file_is_named_as_the_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          text: str, flag: str, named: str) -> None:
    path = write(tmp_path, text)
    monkeypatch.setenv("SPECCTL_CONFIG", str(path))
    with pytest.raises(ConfigError) as caught:
        SupervisorConfig.from_args(build_parser().parse_args(["run", "--headless"]))
    assert str(caught.value).startswith(f"{path}: ") and named in str(caught.value)
    assert flag not in str(caught.value), "nobody typed that flag"


@pytest.mark.parametrize("kind", ["5000-deep", "fifo", "dev-zero", "a-folder", "2-MiB"])
def test_a_hostile_config_is_one_line_and_exit_2_never_a_hang_or_a_traceback(tmp_path: Path, kind: str) -> None:
    """The attack (issue 19 item 7): SPECCTL_CONFIG at a 5,000-deep TOML (a traceback from every verb), at
    a FIFO (every verb hung), at /dev/zero (memory eaten), or at something merely huge."""
    path = tmp_path / "specctl.toml"
    if kind == "5000-deep":
        path.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path = Path("/dev/zero")
    elif kind == "a-folder":
        path = tmp_path
    else:
        path.write_text("# " + "c" * (2 << 20) + "\n")
    for verb in (["status"], ["locate"], ["run", "--headless"]):
        out = subprocess.run([sys.executable, "-m", "specctl.console.cli.main", *verb],
                             env={**os.environ, "SPECCTL_CONFIG": str(path)}, capture_output=True, text=True,
                             timeout=60)
        if verb == ["locate"]:  # the way to find the file that is wrong: it still prints where things are
            assert str(path) in out.stdout
            continue
        assert out.returncode == 2, (verb, out.stderr)
        assert out.stderr.count("\n") == 1 and str(path) in out.stderr and "Traceback" not in out.stderr
def test_candidate_depths_in_the_file_reach_the_launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert load(write(tmp_path, "[policy]\ncandidates = [0, 1, 2, 3]\n")).policy == {"candidates": [0, 1, 2, 3]}
    monkeypatch.setenv("SPECCTL_CONFIG", str(tmp_path / "specctl.toml"))
    cfg = SupervisorConfig.from_args(build_parser().parse_args(["run", "--headless"]))
    assert cfg.settings["candidates"] == (0, 1, 2, 3)
    flag = build_parser().parse_args(["run", "--headless", "--speculative-candidate-steps", "0,3"])
    assert SupervisorConfig.from_args(flag).settings["candidates"] == (0, 3), "the flag wins over the file"
    with pytest.raises(ConfigFileError, match="candidates"):
        load(write(tmp_path, "[policy]\ncandidates = [1, 2, 3]\n"))
