"""`specctl run` refuses a bad simulator choice at once, in one line, instead of restarting it forever."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def run(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "empty.toml"  # an empty config: not the user's (a missing one would be an error)
    config.touch()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SPECCTL_CONFIG": str(config)}
    return subprocess.run([sys.executable, "-m", "specctl.console.cli.main", *argv], capture_output=True,
                          text=True, env=env, timeout=60)


@pytest.mark.parametrize(("flag", "value", "named"), [
    ("--sim-load", "none", "unknown load kind 'none'"),
    ("--sim-load", "steady:c=-3", "--sim-load"),
    ("--sim-preset", "h100", "--sim-preset must be one of"),
    ("--port", "99999", "--port must be between 0 (any free port) and 65535"),
    ("--port", "-5", "--port must be between 0"),
    ("--speculative-num-steps", "0", "--speculative-num-steps must be between 1 and 16"),
])
def test_a_bad_simulator_choice_is_one_line_and_exit_2(tmp_path: Path, flag: str, value: str, named: str) -> None:
    out = run(tmp_path, "run", "--headless", "--socket", str(tmp_path / "s.sock"), flag, value)
    assert out.returncode == 2, out.stderr
    assert named in out.stderr and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1, out.stderr  # no warnings, no restart loop
    assert not (tmp_path / "s.sock").exists()


@pytest.mark.parametrize(("url", "named"), [
    ("", "--attach needs a URL"),
    ("ftp://127.0.0.1:30000", "needs an http:// or https:// URL"),
    ("http://:30000", "names no host"),
    ("127.0.0.1:300000", "the port must be a number between 1 and 65535"),
    ("http://127.0.0.1:port", "the port must be a number"),
    ("[::1", "an IPv6 host goes in brackets"),
    ("http://[foo]:80", "an IPv6 host goes in brackets"),
])
def test_an_attach_url_that_cannot_answer_is_one_line_and_exit_2(tmp_path: Path, url: str, named: str) -> None:
    out = run(tmp_path, "run", "--headless", "--socket", str(tmp_path / "s.sock"), "--attach", url)
    assert out.returncode == 2, out.stderr
    assert named in out.stderr and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1, out.stderr
    assert not (tmp_path / "s.sock").exists()


def test_launcher_arguments_without_a_launcher_are_refused(tmp_path: Path) -> None:
    out = run(tmp_path, "run", "--headless", "--socket", str(tmp_path / "s.sock"), "--", "--mem-fraction-static", "0.8")
    assert out.returncode == 2 and "the simulator has none: --mem-fraction-static 0.8" in out.stderr, out.stderr
    assert not (tmp_path / "s.sock").exists()


def test_a_socket_that_cannot_be_bound_names_its_path(tmp_path: Path) -> None:
    out = run(tmp_path, "run", "--headless", "--socket", "/proc/specctl-test.sock")
    assert out.returncode == 1, out.stderr
    assert "cannot make the control socket /proc/specctl-test.sock" in out.stderr and "[Errno" not in out.stderr


def test_without_xdg_runtime_dir_locate_prints_paths_and_no_warning(tmp_path: Path) -> None:
    out = run(tmp_path, "locate")
    assert out.returncode == 0 and "specctl.sock" in out.stdout
    assert out.stderr == ""


def test_a_model_path_that_is_not_there_is_refused_at_once(tmp_path: Path) -> None:
    out = run(tmp_path, "run", "--headless", "--socket", str(tmp_path / "s.sock"),
              "--model", str(tmp_path / "no-model"), "--draft", "org/eagle3-draft")
    assert out.returncode == 2, out.stderr
    assert "--model" in out.stderr and "no such file or directory" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "s.sock").exists()


@pytest.mark.parametrize(("flag", "named"), [("--log", "cannot write the journal"),
                                             ("--socket", "for the control socket")])
def test_a_journal_or_socket_that_cannot_be_made_is_one_line(tmp_path: Path, flag: str, named: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # nothing can be made inside a file, not even by root
    paths = {"--log": str(tmp_path / "j.jsonl"), "--socket": str(tmp_path / "s.sock")}
    paths[flag] = str(blocker / "x")
    out = run(tmp_path, "run", "--headless", "--log", paths["--log"], "--socket", paths["--socket"])
    assert out.returncode == 1, out.stderr
    assert named in out.stderr and str(blocker) in out.stderr and "Traceback" not in out.stderr
    assert "[Errno" not in out.stderr


@pytest.mark.parametrize("verb", ["run", "tui"])
@pytest.mark.parametrize("topk", [["--speculative-eagle-topk", "4"], ["--speculative-eagle-topk=8"]])
def test_a_tree_draft_in_the_launch_line_is_refused_with_what_to_change(tmp_path: Path, verb: str,
                                                                        topk: list[str]) -> None:
    extra = ["--headless"] if verb == "run" else []
    out = run(tmp_path, verb, *extra, "--socket", str(tmp_path / "s.sock"), "--model", "zai-org/GLM-5-NVFP4",
              "--draft", "org/glm-5-eagle3", "--tp", "8", "--", "--attention-backend", "flashinfer", *topk)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    assert "--speculative-eagle-topk must be 1, got" in out.stderr
    assert "can only watch (specctl tui --attach URL)" in out.stderr
    # all three of the tree's flags: a --speculative-num-steps left after -- overrides specctl's own
    assert ("drop --speculative-eagle-topk, --speculative-num-steps and --speculative-num-draft-tokens after -- "
            "(specctl launches topk 1 at its own --speculative-num-steps N, before --)") in out.stderr
    assert not (tmp_path / "s.sock").exists()


@pytest.mark.parametrize(("extra", "named"), [
    (["--speculative-num-steps", "2"], "specctl's own --speculative-num-steps, before --"),
    (["--speculative-num-draft-tokens=5"], "specctl's own --speculative-num-steps, before --"),
    (["--speculative-eagle-topk", "1"], "specctl's own --speculative-eagle-topk, before --"),
    (["--tp-size", "8"], "specctl's own --tp, before --"),
    (["--port", "30000"], "specctl's own --port, before --"),
    (["--model-path", "other/model"], "specctl's own --model, before --"),
    (["--speculative-adaptive-config", "/tmp/a.json"], "specctl sets it for the plugin"),
])
def test_a_flag_specctl_gives_sglang_itself_is_refused_after_the_dashes(tmp_path: Path, extra: list[str],
                                                                       named: str) -> None:
    """After -- a flag comes last and wins: the server would run what the config, journal and URL do not say."""
    out = run(tmp_path, "run", "--headless", "--socket", str(tmp_path / "s.sock"), "--model", "m", "--draft", "d",
              "--", "--attention-backend", "fa3", *extra)
    assert out.returncode == 2, out.stderr
    flag = extra[0].split("=", 1)[0]
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    assert f"{flag} after --: specctl gives SGLang this flag itself" in out.stderr and named in out.stderr
    assert not (tmp_path / "s.sock").exists()


def test_listening_for_other_hosts_is_left_to_the_operator() -> None:
    from specctl.runtime.supervisor.launcher import owned_arg

    assert owned_arg(["--host", "0.0.0.0", "--mem-fraction-static", "0.8", "--attention-backend", "fa3"]) is None


def test_topk_1_in_the_launch_line_is_not_refused_for_it() -> None:
    from specctl.runtime.core.tree_drafts import tree_args_problem

    assert tree_args_problem(["--speculative-eagle-topk", "1"]) is None
    assert tree_args_problem(["--mem-fraction-static", "0.8"]) is None
    assert tree_args_problem(["--speculative-eagle-topk", "4", "--speculative-eagle-topk", "1"]) is None  # last wins
    assert "got 2" in (tree_args_problem(["--speculative-eagle-topk=1", "--speculative-eagle-topk", "2"]) or "")
def test_candidate_steps_that_miss_the_launch_steps_are_one_line(tmp_path: Path) -> None:
    out = run(tmp_path, "run", "--headless", "--socket", str(tmp_path / "s.sock"),
              "--speculative-candidate-steps", "0,1,2")
    assert out.returncode == 2, out.stderr
    assert "--speculative-num-steps (default 3): must be one of the candidates [1, 2], got 3" in out.stderr
    assert "Traceback" not in out.stderr
