"""A real `specctl run --headless` on the simulator, attacked over its control socket and its files.

Each test is one attack issue 19 names, asserted on what an operator sees: the
journal, `specctl status`, the supervisor's stderr.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any, Iterator

import pytest

from headless_helpers import Headless, wait_for


@pytest.fixture(scope="module")
def sup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Headless]:
    h = Headless(tmp_path_factory.mktemp("attacks"), "--sim-load", "idle")
    h.ready_sample()
    yield h
    h.stop()


def raw_request(path: Path, line: bytes) -> dict[str, Any]:
    """One request as raw bytes, as a hostile client would send it; the answer as parsed."""
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(20)
        conn.connect(str(path))
        stream = conn.makefile("rb")
        assert "specctl" in json.loads(stream.readline())
        conn.sendall(line + b"\n")
        return json.loads(stream.readline())


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


# -- 2. audit: applied only if it can be journaled ------------------------------------

@pytest.mark.parametrize("extra", [
    pytest.param(f'"deep": {nested(970)}', id="970-deep"),
    pytest.param('"note": "\\ud800"', id="lone-surrogate"),
    pytest.param('"note": {"\\udfff": 1}', id="surrogate-key"),
])
def test_a_request_the_journal_cannot_hold_changes_nothing(sup: Headless, extra: str) -> None:
    """The attack: a `mode off` whose args also carry something the journal cannot encode.

    Before: the mode was applied, then the record failed (RecursionError traceback, or a
    journal gap as if the disk had failed), so the journal did not say who turned speculation off.
    """
    before = len(sup.records("command"))
    answer = raw_request(sup.socket, f'{{"id": 7, "cmd": "mode", "args": {{"mode": "off", {extra}}}}}'.encode())
    assert answer["ok"] is False and answer["id"] == 7
    assert answer["error"]["code"] == "bad_request" and "journal" in answer["error"]["message"]
    assert sup.status()["spec"]["mode"] == "auto", "nothing was applied"
    assert sup.records("event", "journal_gap") == []
    assert len(sup.records("command")) == before
    told = sup.told()
    assert "Traceback" not in told and "RecursionError" not in told


def test_every_applied_command_is_journaled_with_its_uid(sup: Headless) -> None:
    """The counterpart: a command the journal can hold is applied and recorded, once."""
    answer = raw_request(sup.socket, b'{"id": 8, "cmd": "mode", "args": {"mode": "off", "note": "\\u00e9"}}')
    assert answer["ok"] is True
    mode = wait_for(lambda: [r for r in sup.records("command") if r["cmd"] == "mode" and r["ok"]], "the record")
    assert len(mode) == 1 and mode[0]["args"] == {"mode": "off", "note": "\u00e9"}
    assert sup.cli("auto").returncode == 0
