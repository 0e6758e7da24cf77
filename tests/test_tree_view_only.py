"""A server that drafts a tree (topk > 1): specctl watches it, says why it cannot steer it, and how to change that.

The report's own deployment ran EAGLE-3 at topk 4. SGLang's adaptive machinery,
which the plugin rides on, refuses trees, so such a server has no specctl state
(docs/topk.md). Attached to it, specctl must not call it "without the plugin"
(the plugin would not help): the reason is the tree, and the fix is a chain.
The simulator's report preset serves topk 4 as SGLang without the plugin does.
"""

from __future__ import annotations

from pathlib import Path

from specctl.runtime.core.tree_drafts import SERVER_FIX
from specctl.runtime.core.view_only import HEADLINES, TREE

from support.headless import Headless, wait_for
from support.sim_process import sim_process

TREE_WORDS = HEADLINES[TREE]


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
