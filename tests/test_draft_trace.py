"""The draft-proposal probe (runtime/sglang_plugin/draft_trace.py) and its place in fast off."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from specctl.runtime.sglang_plugin import draft_trace, fast_off


class Vec(list):
    """A list that answers tolist(), as the tensors the probe reads do."""

    def tolist(self) -> list[Any]:
        return list(self)


def mode(idle: bool = False) -> SimpleNamespace:
    return SimpleNamespace(is_idle=lambda: idle)


def verify(tokens: list[int], width: int) -> SimpleNamespace:
    return SimpleNamespace(draft_token=Vec(tokens), draft_token_num=width)


def batch(lens: list[int], rids: list[str], idle: bool = False) -> SimpleNamespace:
    return SimpleNamespace(forward_mode=mode(idle), seq_lens=Vec(lens), reqs=[SimpleNamespace(rid=r) for r in rids])


@pytest.fixture
def trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Tracing on into a fresh file; the module's open file and failure flag reset."""
    base = tmp_path / "drafts.jsonl"
    monkeypatch.setenv(draft_trace.ENV, str(base))
    monkeypatch.setattr(draft_trace, "_out", None)
    monkeypatch.setattr(draft_trace, "_failed", False)
    yield Path(f"{base}.{os.getpid()}")
    if draft_trace._out is not None:
        draft_trace._out.close()


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_request_of_a_drafting_verify_gets_its_proposals(trace: Path) -> None:
    draft_trace.record(verify([7, 1, 2, 3, 9, 4, 5, 6], 4), batch([100, 230], ["a:0", "a:1"]))
    draft_trace.record(verify([3, 8, 8, 8, 6, 0, 0, 0], 4), batch([101, 231], ["a:0", "a:1"]))
    assert lines(trace) == [
        {"rid": "a:0", "len": 100, "draft": [7, 1, 2, 3]},
        {"rid": "a:1", "len": 230, "draft": [9, 4, 5, 6]},
        {"rid": "a:0", "len": 101, "draft": [3, 8, 8, 8]},
        {"rid": "a:1", "len": 231, "draft": [6, 0, 0, 0]},
    ]


def test_off_steps_and_idle_batches_are_not_traced(trace: Path) -> None:
    draft_trace.record(verify([7, 9], 1), batch([100, 230], ["a", "b"]))
    draft_trace.record(verify([7, 1, 2, 3], 4), batch([100], ["a"], idle=True))
    assert not trace.exists()


def test_without_the_env_var_nothing_is_written(trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(draft_trace.ENV)
    assert not draft_trace.enabled()
    draft_trace.record(verify([7, 1, 2, 3], 4), batch([100], ["a"]))
    assert not trace.exists()


def test_a_batch_that_does_not_add_up_stops_the_probe_without_raising(trace: Path) -> None:
    draft_trace.record(verify([7, 1, 2], 4), batch([100], ["a"]))
    assert not draft_trace.enabled()
    draft_trace.record(verify([7, 1, 2, 3], 4), batch([100], ["a"]))
    assert not trace.exists() or lines(trace) == []


def test_requests_without_ids_are_still_traced_by_position(trace: Path) -> None:
    draft_trace.record(verify([7, 1, 9, 4], 2), SimpleNamespace(forward_mode=mode(), seq_lens=Vec([5, 6])))
    assert lines(trace) == [{"rid": None, "len": 5, "draft": [7, 1]}, {"rid": None, "len": 6, "draft": [9, 4]}]


def test_fast_off_traces_drafting_verifies_and_passes_them_on_unchanged(trace: Path) -> None:
    target = SimpleNamespace(model_runner=SimpleNamespace(attn_backend=SimpleNamespace()))
    seen: list[tuple[Any, ...]] = []
    vi, b = verify([7, 1, 2, 3], 4), batch([100], ["a:0"])
    out = fast_off.around_eagle_prepare_for_verify(lambda *a: seen.append(a) or "sglang", vi, "pool", b, target)
    assert out == "sglang" and seen == [(vi, "pool", b, target)]
    assert lines(trace) == [{"rid": "a:0", "len": 100, "draft": [7, 1, 2, 3]}]
