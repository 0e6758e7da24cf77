"""What the journal can hold, and the bounded trace a refused command leaves."""

from __future__ import annotations

import json

from specctl.runtime.core.journalable import ARGS_LIMIT, MAX_DEPTH, bounded_args, bounded_message, why_unjournalable


def deep(levels: int) -> list:
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


def test_plain_args_pass_and_odd_ones_are_named() -> None:
    assert why_unjournalable({"mode": "off", "settings": {"off_at": 48, "min_accept": 0.8, "x": [None, True]}}) is None
    assert why_unjournalable({"a": deep(MAX_DEPTH - 1)}) is None
    assert "deeper" in why_unjournalable({"a": deep(MAX_DEPTH)})
    assert "deeper" in why_unjournalable(deep(100_000))  # no RecursionError on the way
    assert "surrogate" in why_unjournalable({"note": "ok \ud800"})
    assert "surrogate" in why_unjournalable({"\udfff": 1})
    assert "finite" in why_unjournalable({"x": float("nan")})


def test_a_refused_commands_args_leave_a_bounded_encodable_summary() -> None:
    small = {"settings": {"off_at": 64}}
    assert bounded_args(small) is small
    big = bounded_args({"settings": {"pad": "x" * 65_000}})
    assert big["bytes"] > 65_000 and len(json.dumps(big)) < ARGS_LIMIT
    odd = bounded_args({"note": "\ud800", "deep": deep(2000)})
    json.dumps(odd, ensure_ascii=False).encode("utf-8")  # encodes: the journal can hold it
    assert odd["bytes"] is None and len(odd["summary"]) < ARGS_LIMIT
    assert len(bounded_message("got " + "y" * 70_000)) < 400
    bounded_message("got '\ud800'").encode("utf-8")
