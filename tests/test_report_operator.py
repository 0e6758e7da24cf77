"""The report's operator, first morning: specctl on the simulator of their own machine.

specctl exists because of one report: 8 RTX PRO 6000 Blackwell at TP 8 serving
GLM-5-NVFP4 (a MoE of 256 routed experts) with EAGLE-3 at topk 4, 2 steps, 16
draft tokens, FlashInfer. Its operator reads the README and docs/sglang-plugin.md and tries
specctl on the simulator before touching the server. Everything below is what
they would see, from real processes: a headless supervisor, the CLI, the
simulator as its own server on loopback.

- The tree (``rtx-8gpu-report``) is view only, embedded or attached, as docs/sglang-plugin.md
  says a topk-4 server is: SGLang's adaptive machinery refuses trees, so the plugin
  never runs in one. Every steering verb is refused with the fix (the chain's flags
  in place of the tree's, and ``specctl sglang-args --tp 8``: a bare sglang-args
  prints ``--tp-size 1``, which on their GLM-5 would not even load), and nothing
  changes.
- The chain (``rtx-8gpu-report-topk1``) is steerable, and the journal says why
  the FlashInfer row stays out: measured on an H200, and on a dense model.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from specctl.runtime.core.tree_drafts import CHAIN_FLAGS, topk_refusal
from specctl.runtime.core.view_only import HEADLINES, TREE

from support.headless import Headless, wait_for
from support.sim_process import sim_process

RTX = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
TREE_WORDS = HEADLINES[TREE]
VERBS = (("force-off",), ("force-on",), ("auto",), ("set", "off_at=48", "on_at=16"))
TOPK_MD = Path(__file__).resolve().parents[1] / "docs" / "sglang-plugin.md"


def quoted(starts: str) -> list[str]:
    """docs/sglang-plugin.md's quoted output lines (inside ``` blocks) that start with ``starts``."""
    blocks = re.findall(r"```\n(.*?)```", TOPK_MD.read_text(encoding="utf-8"), flags=re.S)
    found = [line for block in blocks for line in block.splitlines() if line.startswith(starts)]
    assert found, f"docs/sglang-plugin.md quotes no line starting {starts!r}"
    return found


def _check_the_gpus(sample: dict[str, Any]) -> None:
    """As that operator's nvidia-smi names them: 8 RTX PRO 6000 Blackwell, 97887 MiB, 600 W."""
    gpus = sample["gpus"]
    assert len(gpus) == 8, gpus
    for gpu in gpus:
        assert gpu["name"] == RTX and gpu["state"] == "ok", gpu
        assert gpu["mem_total"] == 97_887 * 2**20 and gpu["power_limit_w"] == 600.0, gpu


def _check_view_only_tree(h: Headless) -> str:
    """Journal, status, status --json and every verb say the tree and the fix; nothing changes.

    Returns what the operator read (status, then each refusal), for the docs' quotes.
    """
    said = h.wait_event("view_only")
    assert said["reason"] == TREE and said["why"].startswith(TREE_WORDS), said
    fix = said["why"][len(TREE_WORDS):]
    assert CHAIN_FLAGS in fix and "specctl sglang-args --tp 8" in fix, fix
    sample = wait_for(lambda: (s := h.status()) and s["server"]["state"] == "ready" and s["gpus"] and s,
                      "a ready status with its GPUs")
    assert sample["spec"] is None, "no specctl state: nothing to steer"
    assert (sample["server"]["topk"], sample["server"]["speculative"], sample["server"]["tp"]) == (4, True, 8)
    _check_the_gpus(sample)
    text = h.cli("status")
    assert text.returncode == 0, text.stderr
    assert f"spec       {TREE_WORDS}" in text.stdout and "specctl sglang-args --tp 8" in text.stdout, text.stdout
    read = text.stdout
    for verb in VERBS:
        out = h.cli(*verb)
        read += out.stderr
        assert out.returncode == 1, (verb, out.stdout, out.stderr)
        assert TREE_WORDS in out.stderr and CHAIN_FLAGS in out.stderr, (verb, out.stderr)
        assert "Traceback" not in out.stderr and "without the specctl plugin" not in out.stderr
    assert not h.records("event", "settings"), "a refused verb changes nothing"
    assert not [r for r in h.records("event", "command") if r.get("ok")], h.records("event", "command")
    assert not h.records("event", "spec_switch")
    assert h.status()["spec"] is None
    return read


def test_the_report_preset_embedded_is_view_only_with_the_chain_fix(tmp_path: Path) -> None:
    # specctl run cannot launch a topk-4 server (the plugin refuses it at start-up), so the simulator of
    # one must not pretend it can steer it: it serves the tree as SGLang without the plugin does
    h = Headless(tmp_path, "--sim-preset", "rtx-8gpu-report", "--sim-load", "steady:c=4")
    try:
        read = _check_view_only_tree(h)
    finally:
        assert h.stop() == 0
    assert h.told().count('view_only reason="tree"') == 1
    # docs/sglang-plugin.md, "What specctl says", quotes these word for word
    for line in quoted("spec       ") + quoted("fix        ") + quoted("specctl force-off: "):
        assert line in read.splitlines(), (line, read)


def test_the_report_preset_attached_says_the_same(tmp_path: Path) -> None:
    # the simulator as its own server, the way an operator's SGLang runs beside specctl
    with sim_process(tmp_path, "--preset", "rtx-8gpu-report", "--load", "steady:c=4") as url:
        info = httpx.get(f"{url}/server_info", timeout=10).json()
        assert "specctl" not in info["internal_states"][0], "a tree server has no plugin state"
        refused = httpx.post(f"{url}/set_internal_state", json={"server_args": {"specctl_mode": 0}}, timeout=10)
        assert refused.json() == [False]
        h = Headless(tmp_path, "--attach", url)
        try:
            _check_view_only_tree(h)
        finally:
            assert h.stop() == 0


def test_the_chain_preset_is_steerable_and_says_why_the_flashinfer_row_stays_out(tmp_path: Path) -> None:
    h = Headless(tmp_path, "--sim-preset", "rtx-8gpu-report-topk1", "--sim-load", "steady:c=4")
    try:
        skipped = h.wait_event("backend_thresholds_skipped")
        assert skipped["backend"] == "flashinfer" and skipped["experts"] == 256 and skipped["gpus"] == [RTX]
        why = skipped["why"]
        assert f"measured on an H200, this server runs on {RTX}" in why, why
        assert "measured on a dense model and this server's target is a MoE (256 experts)" in why, why
        assert "the policy's defaults stay" in why
        # the journal's event can come before its stderr line is read: wait for the line, then count it
        wait_for(lambda: "backend_thresholds_skipped" in h.told(), "the skip said on stderr")
        assert h.told().count("backend_thresholds_skipped") == 1
        sample = h.ready_sample()
        assert sample["spec"]["settings"]["off_at"] == 32, "the defaults, as the journal says"
        assert not h.records("event", "view_only")
        out = h.cli("set", "off_at=48", "on_at=16")
        assert out.returncode == 0, out.stderr
        assert wait_for(lambda: h.status()["spec"]["settings"]["off_at"] == 48, "the set read back")
    finally:
        assert h.stop() == 0


@pytest.mark.parametrize("preset", ["h200-llama8b-flashinfer", "h200-llama8b"])
def test_a_preset_whose_row_would_apply_keeps_the_simulators_defaults_and_says_nothing(
        tmp_path: Path, preset: str) -> None:
    # the embedded simulator runs one known policy (docs/simulator.md); only a row that would stay out on
    # the real server too is worth a line, since there the defaults are what the real server would run
    h = Headless(tmp_path, "--sim-preset", preset, "--sim-load", "idle")
    try:
        assert h.ready_sample()["spec"]["settings"]["off_at"] == 32
        wait_for(lambda: len(h.records("sample")) >= 5, "a few samples")
        assert not h.records("event", "backend_thresholds_skipped")
        assert not h.records("event", "backend_thresholds")
    finally:
        assert h.stop() == 0


def test_topk_md_quotes_the_plugin_and_sglang_args_word_for_word(tmp_path: Path) -> None:
    # the report's launch line: topk 4, 2 steps, 16 draft tokens
    assert quoted("specctl: --speculative-eagle-topk") == ["specctl: " + topk_refusal(4, steps=2, tokens=16)]
    out = subprocess.run([sys.executable, "-m", "specctl.console.cli.main", "sglang-args", "--tp", "8", "--steps", "3",
                          "--backend", "flashinfer", "--draft", str(tmp_path), "--gpu", RTX, "--experts", "256",
                          "--config", str(tmp_path / "adaptive.json")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stderr.splitlines() == quoted("specctl sglang-args: "), out.stderr
    assert "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4" in out.stdout
    # their flags after `specctl run ... --`: refused before SGLang loads anything, as quoted (with its elision)
    run = subprocess.run([sys.executable, "-m", "specctl.console.cli.main", "run", "--headless", "--model",
                          str(tmp_path), "--draft", str(tmp_path), "--tp", "8", "--socket", str(tmp_path / "s.sock"),
                          "--", "--speculative-eagle-topk", "4", "--speculative-num-steps", "2",
                          "--speculative-num-draft-tokens", "16"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    [line] = quoted("specctl run: ")
    head, elided, tail = line.partition(" ... ")
    assert elided and run.stderr.startswith(head) and run.stderr.rstrip("\n").endswith(tail), (line, run.stderr)


def test_their_chain_launched_without_the_plugin_is_told_the_sglang_args_line_for_tp_8(tmp_path: Path) -> None:
    # a bare `specctl sglang-args` prints --tp-size 1, which added to their TP-8 line would override it
    with sim_process(tmp_path, "--no-plugin", "--preset", "rtx-8gpu-report-topk1", "--load", "idle") as url:
        h = Headless(tmp_path, "--attach", url)
        try:
            said = h.wait_event("view_only")
            assert said["reason"] == "no_plugin" and "`specctl sglang-args --tp 8` prints" in said["why"], said
            out = h.cli("force-off")
            assert out.returncode == 1 and "`specctl sglang-args --tp 8` prints" in out.stderr, out.stderr
        finally:
            assert h.stop() == 0
