"""`specctl run --model ... --speculative-eagle-topk 4 --speculative-num-draft-tokens 16`: a tree under the switch.

The report's launch line (topk 4, 2 steps, 16 draft tokens) given to specctl's own
flags: it launches SGLang with the tree and the plugin's opt-in (SPECCTL_TREE_SWITCH=1),
and steers it between its depth and off. Real processes: the CLI, the stand-in
SGLang launcher (which exits unless the launch line drafts the tree its preset
serves), the simulator as its rank. What cannot run is one line, exit 2, nothing started.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.headless import Headless, wait_for
from test_launch_settings import STANDIN, model_dirs, one_line_refusal, specctl

TREE = ("--speculative-num-steps", "2", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "16")


def test_run_launches_the_tree_under_the_switch_and_steers_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(STANDIN), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("STANDIN_STEP_S", "0.02")
    monkeypatch.setenv("STANDIN_PRESET", "rtx-8gpu-report")  # SGLang serving the report's tree
    monkeypatch.delenv("SPECCTL_TREE_SWITCH", raising=False)  # the launch must ask for it itself
    (tmp_path / "empty.toml").touch()
    monkeypatch.setenv("SPECCTL_CONFIG", str(tmp_path / "empty.toml"))
    h = Headless(tmp_path, *model_dirs(tmp_path), *TREE)
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
    ((*TREE[:4], "--speculative-num-draft-tokens", "30"), "--speculative-num-draft-tokens must be between 2 and 21"),
    (("--speculative-num-draft-tokens", "5"), "--speculative-num-draft-tokens is for a tree"),
    ((*TREE, "--speculative-candidate-steps", "0,1,2"), "switches between its launch depth and off only"),
    ((*TREE, "--set", "candidates=0,1,2"), "switches between its launch depth and off only"),
])
def test_a_tree_launch_that_cannot_run_is_one_line(tmp_path: Path, extra: tuple[str, ...], said: str) -> None:
    out = specctl(tmp_path, "run", "--headless", *model_dirs(tmp_path), *extra)
    assert said in one_line_refusal(out, "run")


@pytest.mark.parametrize("where", [(), ("--attach", "http://127.0.0.1:9")])
def test_the_tree_flags_shape_only_a_server_specctl_launches(tmp_path: Path, where: tuple[str, ...]) -> None:
    out = specctl(tmp_path, "run", "--headless", *where, *TREE[2:])
    assert "shape a server specctl launches (--model)" in one_line_refusal(out, "run")
