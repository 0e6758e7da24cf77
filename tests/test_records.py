"""Typed records: what the supervisor writes parses as it is; what has not a record's shape is skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specctl.runtime.core import records
from specctl.runtime.supervisor.journal import Journal, read_journal, read_records

FIXTURES = Path(__file__).parent / "tui" / "fixtures"
T = 1764400000.0


@pytest.mark.parametrize("name", ["one_gpu.jsonl", "eight_gpu.jsonl"])
def test_every_line_a_supervisor_wrote_is_a_record_unchanged(name: str) -> None:
    raw = list(read_journal(FIXTURES / name))
    typed = list(read_records(FIXTURES / name))
    assert len(typed) == len(raw) > 300
    assert [json.dumps(r, sort_keys=True) for r in typed] == [json.dumps(r, sort_keys=True) for r in raw]
    assert {r["kind"] for r in typed} == {"sample", "event", "command"}


def test_every_event_name_has_its_constant() -> None:
    assert len(set(records.EVENT_NAMES)) == len(records.EVENT_NAMES) == 37
    for name in records.EVENT_NAMES:
        assert getattr(records, name.upper()) == name


def good_sample() -> dict:
    return records.sample({"state": "ready", "running": 3, "gen_tps": 10.5, "progress": None},
                          {"on": True, "steps": 3, "settings": {"off_at": 32}, "off_state": {"fast": True}},
                          [{"index": 0, "state": "ok", "util": 50.0}], [{"pid": 1, "rss": 10}], sim=True, t=T)


@pytest.mark.parametrize(("where", "value"), [
    (("t",), "noon"), (("t",), True), (("kind",), "other"), (("server",), []), (("server", "gen_tps"), "fast"),
    (("server", "running"), True), (("server", "state"), 1), (("server", "progress"), "half"),
    (("spec",), 3), (("spec", "settings"), [1]), (("spec", "off_state"), {"fast": "no"}),
    (("spec", "experts"), "128"), (("spec", "experts"), 1.5),
    (("gpus",), {"0": {}}), (("gpus", 0), "GPU 0"), (("gpus", 0, "util"), "50%"), (("procs", 0, "pid"), 1.5),
])
def test_a_sample_with_a_field_of_the_wrong_type_is_skipped(where: tuple, value: object) -> None:
    record = good_sample()
    assert records.parse(record) is record
    target = record
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    assert records.parse(record) is None


def test_events_and_commands_need_their_name_and_typed_fields() -> None:
    assert records.parse(records.event(records.SPEC_SWITCH, t=T, on=False, reason="load", batch_size=40, step=9))
    assert records.parse(records.event("from_a_newer_writer", t=T, anything=[1]))  # shown, not dropped
    assert records.parse({"v": 1, "t": T, "kind": "event"}) is None
    assert records.parse(records.event(records.SPEC_SWITCH, t=T, batch_size="forty")) is None
    skipped = {"backend": "triton", "gpus": ["NVIDIA H200"], "why": "a MoE"}
    assert records.parse(records.event(records.BACKEND_THRESHOLDS_SKIPPED, t=T, experts=128, **skipped))
    assert records.parse(records.event(records.BACKEND_THRESHOLDS_SKIPPED, t=T, experts=None, **skipped))
    assert records.parse(records.event(records.BACKEND_THRESHOLDS_SKIPPED, t=T, experts="128", **skipped)) is None
    assert records.parse(records.command("mode", True, 1000, t=T, args={"mode": "off"}))
    assert records.parse({"v": 1, "t": T, "kind": "command", "cmd": "mode"}) is None
    assert records.parse(records.command("mode", "yes", 1000, t=T)) is None


def test_a_journal_reads_back_typed_skipping_wrong_shapes(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    journal = Journal(path)
    journal.write(good_sample())
    journal.write({"v": 1, "t": T, "kind": "sample", "server": "up", "spec": None, "gpus": []})
    journal.write(records.event(records.SERVER_READY, t=T + 1, url="http://x"))
    journal.close()
    assert [r["kind"] for r in read_records(path)] == ["sample", "event"]


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                           | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                        max_size=4),
                           max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_parse_never_raises_and_returns_the_record_itself_or_none(raw: object) -> None:
    parsed = records.parse(raw)
    assert parsed is None or parsed is raw
