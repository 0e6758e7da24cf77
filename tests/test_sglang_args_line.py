"""`specctl sglang-args -- <your launch line>`: the line printed edited, nothing twice, nothing of theirs lost."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specctl.console.cli.sglang_args import edit_line

TP8 = ["python", "-m", "sglang.launch_server", "--model-path", "M", "--tp-size", "8",
       "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "D",
       "--speculative-num-steps=3", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "16",
       "--enable-metrics", "--mem-fraction-static", "0.8", "--attention-backend", "flashinfer"]


def sglang_args(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specctl.console.cli.main", "sglang-args", *args],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, SPECCTL_STATE_DIR=str(tmp_path / "state")))


def flags_of(words: list[str]) -> list[str]:
    return [w.split("=", 1)[0] for w in words if w.startswith("--")]


def test_a_tp8_line_keeps_its_tp_size_once_and_every_flag_once(tmp_path: Path) -> None:
    out = sglang_args(tmp_path, "--format", "json", "--", *TP8)
    assert out.returncode == 0, out.stderr
    command = json.loads(out.stdout)["command"]
    assert command[:3] == ["python", "-m", "sglang.launch_server"]
    assert command.count("--tp-size") == 1 and command[command.index("--tp-size") + 1] == "8"
    flags = flags_of(command)
    assert len(flags) == len(set(flags)), f"a flag twice: {flags}"
    assert command[command.index("--speculative-eagle-topk") + 1] == "1", "the chain, in place of their tree"
    assert command[command.index("--speculative-num-draft-tokens") + 1] == "4"
    assert "--speculative-num-steps=3" not in command and "--speculative-adaptive" in command
    for kept in (("--model-path", "M"), ("--mem-fraction-static", "0.8"), ("--attention-backend", "flashinfer"),
                 ("--speculative-draft-model-path", "D")):
        assert command[command.index(kept[0]) + 1] == kept[1], kept


def test_the_shell_line_runs_with_the_environment_in_front(tmp_path: Path) -> None:
    out = sglang_args(tmp_path, "--", *TP8)
    assert out.returncode == 0, out.stderr
    [line] = [x for x in out.stdout.splitlines() if not x.startswith("#")]
    words = shlex.split(line)
    assert words[0].startswith("SPECCTL_PLUGIN=") and "SGLANG_FLASHINFER_WORKSPACE_SIZE=2147483648" in words
    env = {w.split("=", 1)[0]: w.split("=", 1)[1] for w in words if "=" in w and not w.startswith("-")}
    assert json.loads(env["SPECCTL_SETTINGS"])["steps"] == 3
    assert words.count("--tp-size") == 1


def test_the_line_names_its_backend_for_the_thresholds_and_a_disagreement_is_refused(tmp_path: Path) -> None:
    line = ["python", "-m", "sglang.launch_server", "--model-path", "M", "--attention-backend=fa3"]
    out = sglang_args(tmp_path, "--gpu", "NVIDIA H200", "--format", "json", "--", *line)
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    assert "SGLANG_FLASHINFER_WORKSPACE_SIZE" not in printed["env"], "FlashInfer's variable for FlashInfer only"
    assert json.loads(printed["env"]["SPECCTL_SETTINGS"])["off_at"] == 1 << 20
    assert printed["policy"].startswith("policy: never off for load")
    assert printed["command"].count("--attention-backend=fa3") == 1 and "--attention-backend" not in printed["command"]
    bad = sglang_args(tmp_path, "--backend", "triton", "--", *line)
    assert bad.returncode == 2 and "disagree" in bad.stderr and bad.stderr.count("\n") == 1


def test_without_a_line_only_what_specctl_needs(tmp_path: Path) -> None:
    out = sglang_args(tmp_path, "--backend", "fa3", "--format", "json")
    printed = json.loads(out.stdout)
    assert "--tp-size" not in printed["args"], "no --tp-size unless --tp is given"
    assert "SGLANG_FLASHINFER_WORKSPACE_SIZE" not in printed["env"]
    with_tp = json.loads(sglang_args(tmp_path, "--tp", "8", "--format", "json").stdout)["args"]
    assert with_tp[with_tp.index("--tp-size") + 1] == "8"


def test_steps_1_picks_a_floor_one_step_can_meet(tmp_path: Path) -> None:
    out = sglang_args(tmp_path, "--steps", "1", "--format", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(json.loads(out.stdout)["env"]["SPECCTL_SETTINGS"])["min_accept"] == 0.4
    assert "min_accept 0.4" in out.stderr


@pytest.mark.parametrize("theirs", [["--speculative-num-steps", "5"], ["--speculative-num-steps=5"],
                                    ["--speculative-adaptive", "--enable-metrics"]])
def test_edit_line_drops_both_forms_and_switches(theirs: list[str]) -> None:
    ours = ["--speculative-num-steps", "3", "--speculative-adaptive", "--enable-metrics", "--tp-size", "1"]
    edited = edit_line(["python", "--tp-size", "8", *theirs, "--x", "y"], ours)
    assert edited[:5] == ["python", "--tp-size", "8", "--x", "y"]
    assert sorted(flags_of(edited)) == sorted({*flags_of(edited)})
    assert "5" not in edited and "--speculative-num-steps=5" not in edited


OTHER = st.sampled_from(["--mem-fraction-static", "--max-running-requests", "--context-length", "--dtype"])
SPEC = st.sampled_from(["--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens",
                        "--speculative-algorithm", "--speculative-adaptive-config"])
VALUES = st.text(alphabet="abc0123456789.", min_size=1, max_size=6)


@given(st.lists(st.tuples(st.one_of(OTHER, SPEC), VALUES, st.booleans()), max_size=8), st.booleans())
def test_edit_line_never_repeats_a_flag_and_keeps_every_other_flag(pairs: list[tuple[str, str, bool]],
                                                                    tp: bool) -> None:
    ours = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", "4", "--speculative-adaptive", "--speculative-adaptive-config", "F",
            "--tp-size", "1", "--enable-metrics"]
    line = ["python", "-m", "sglang.launch_server", *(["--tp-size", "8"] if tp else [])]
    seen: dict[str, str] = {}
    for flag, value, joined in pairs:
        if flag in seen:  # one of each in their line: SGLang's last-wins would make "kept" ambiguous
            continue
        seen[flag] = value
        line += [f"{flag}={value}"] if joined else [flag, value]
    edited = edit_line(line, ours)
    flags = flags_of(edited)
    assert len(flags) == len(set(flags))
    assert edited.count("--tp-size") == 1 and edited[edited.index("--tp-size") + 1] == ("8" if tp else "1")
    for flag, value in seen.items():
        if flag.startswith("--speculative"):
            assert f"{flag}={value}" not in edited
        else:
            assert f"{flag}={value}" in edited or edited[edited.index(flag) + 1] == value
