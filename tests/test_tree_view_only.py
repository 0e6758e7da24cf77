"""A server that drafts a tree (topk > 1): specctl watches it, says why it cannot steer it, and how to change that.

The report's own deployment ran EAGLE-3 at topk 4. SGLang's adaptive machinery,
which the plugin rides on, refuses trees, so such a server has no specctl state
(docs/sglang-plugin.md). Attached to it, specctl must not call it "without the plugin"
(the plugin would not help): the reason is the tree, and the fix is a chain.
The simulator's report preset serves topk 4 as SGLang without the plugin does, and with the plugin
where its opt-in (SPECCTL_TREE_SWITCH=1) is in the environment, as the real plugin reads it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specctl.runtime.core.tree_drafts import SERVER_FIX, TREE_SWITCH_ENV
from specctl.runtime.core.view_only import HEADLINES, TREE

from support.headless import Headless, wait_for
from support.sim_process import sim_process

TREE_WORDS = HEADLINES[TREE]


@pytest.mark.slow
def test_specctl_attached_to_a_tree_server_says_tree_and_the_chain_fix(tmp_path: Path) -> None:
    with sim_process(tmp_path, "--no-plugin", "--preset", "rtx-8gpu-report", "--load", "steady:c=4") as url:
        h = Headless(tmp_path, "--attach", url)
        try:
            said = h.wait_event("view_only")
            assert said["reason"] == TREE and said["why"].startswith(TREE_WORDS), said
            assert SERVER_FIX in said["why"], "the chain's flags, not 'relaunch with the plugin'"
            sample = wait_for(lambda: h.ready_sample(), "a ready sample")
            assert sample["server"]["topk"] == 4 and sample["server"]["speculative"] is True
            status = h.cli("status")
            assert status.returncode == 0 and f"spec       {TREE_WORDS}" in status.stdout, status.stdout
            out = h.cli("force-off")
            assert out.returncode == 1 and TREE_WORDS in out.stderr and "Traceback" not in out.stderr
            assert "without the specctl plugin" not in out.stderr
        finally:
            assert h.stop() == 0
        assert h.told().count('view_only reason="tree"') == 1


def test_a_chain_server_without_the_plugin_still_reads_without_the_plugin(tmp_path: Path) -> None:
    with sim_process(tmp_path, "--no-plugin", "--load", "steady:c=2") as url:
        h = Headless(tmp_path, "--attach", url)
        try:
            said = h.wait_event("view_only")
            assert said["reason"] == "no_plugin", said
            assert wait_for(lambda: h.ready_sample(), "a ready sample")["server"]["topk"] == 1
        finally:
            assert h.stop() == 0


@pytest.mark.slow
def test_a_tree_under_the_switch_is_steered_between_its_depth_and_off(tmp_path: Path, monkeypatch) -> None:
    # the plugin's opt-in in the server's environment, as `specctl sglang-args --topk 4` prints it: the report's
    # topk-4 tree (2 steps, 16 draft tokens) then runs with the plugin, and specctl steers it like a chain
    monkeypatch.setenv(TREE_SWITCH_ENV, "1")
    with sim_process(tmp_path, "--preset", "rtx-8gpu-report", "--load", "steady:c=4") as url:
        h = Headless(tmp_path, "--attach", url)
        try:
            sample = wait_for(lambda: (s := h.ready_sample())["spec"] and s, "a sample with specctl's state")
            assert sample["server"]["topk"] == 4 and sample["spec"]["steps"] == 2
            status = h.cli("status")
            assert "spec       ON (2 steps, a tree of topk 4)  mode auto" in status.stdout, status.stdout
            out = h.cli("force-off")
            assert out.returncode == 0, out.stderr
            switched = h.wait_event("spec_switch", to=0)
            assert switched["from"] == 2 and switched["reason"] == "forced", switched
            deeper = h.cli("force-on", "--steps", "3")
            assert deeper.returncode != 0 and "Traceback" not in deeper.stderr
            assert "drafts a tree (topk 4) under specctl's switch, which has its launch depth (2) and off only" \
                in deeper.stderr and "nothing changed" in deeper.stderr, deeper.stderr
            assert h.cli("force-on").returncode == 0
            h.wait_event("spec_switch", to=2)
        finally:
            assert h.stop() == 0
        assert not h.records("event", "view_only"), "a tree with the plugin in charge is not view only"


@pytest.mark.parametrize(("args", "said"), [
    (("--set", "candidates=0,1,2"),
     "switches between its launch depth and off only: --set candidates must be 0,2 or left out"),
    (("--steps", "3"), "drafts at its launch's --speculative-num-steps (2), got steps 3"),
])
def test_the_simulated_tree_refuses_other_depths_as_the_plugin_does(args: tuple[str, ...], said: str) -> None:
    out = subprocess.run([sys.executable, "-m", "specctl.runtime.sim", "--preset", "rtx-8gpu-report", "--port", "0",
                          *args], capture_output=True, text=True, timeout=60,
                         env={**os.environ, TREE_SWITCH_ENV: "1"})
    assert out.returncode == 2 and said in out.stderr and "Traceback" not in out.stderr, out.stderr
