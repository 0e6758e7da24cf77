"""Whatever bytes a client sends, it gets well-formed answers and the server keeps serving."""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specctl.runtime.control.framing import MAX_LINE

from support.control_standin import ServerThread

CODES = {"bad_request", "unknown_command", "invalid_value", "unavailable", "internal"}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    folder = Path(tempfile.mkdtemp(prefix="sc-", dir="/tmp"))
    with ServerThread(folder / "specctl.sock") as running:
        yield running
    shutil.rmtree(folder, ignore_errors=True)


def _answers_until_probe(stream: Any) -> list[dict[str, Any]]:
    """Every line the server sends up to and including the answer to the probe ping."""
    answers = []
    while True:
        line = stream.readline()
        assert line.endswith(b"\n"), "the server closed the connection"
        answers.append(json.loads(line))
        if answers[-1].get("id") == "probe":
            return answers


json_ish = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children), max_leaves=20)
requests = st.fixed_dictionaries({}, optional={"id": json_ish, "cmd": json_ish, "args": json_ish})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=st.one_of(st.binary(max_size=4096), requests.map(lambda r: json.dumps(r).encode())))
def test_any_bytes_get_well_formed_answers(server: ServerThread, payload: bytes) -> None:
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(20)
        conn.connect(str(server.server.path))
        stream = conn.makefile("rb")
        assert "specctl" in json.loads(stream.readline())
        conn.sendall(payload + b"\n" + b'{"id": "probe", "cmd": "ping"}\n')
        answers = _answers_until_probe(stream)
    assert answers[-1] == {"id": "probe", "ok": True, "result": {"pong": True}}
    for answer in answers[:-1]:
        assert set(answer) == {"id", "ok", "result"} or set(answer) == {"id", "ok", "error"}
        if not answer["ok"]:
            assert answer["error"]["code"] in CODES and answer["error"]["message"]


# -- framing and audit: what ran is exactly what was journaled --------------------

EVIL_DWELL = 777_777  # a value only the bytes past an over-long line's limit ever ask for


def _change(n: int, mode: str) -> bytes:
    return json.dumps({"id": f"ok-{n}", "cmd": "mode", "args": {"mode": mode}}).encode() + b"\n"


def _over_long(n: int, pad: int, newline: bool) -> bytes:
    evil = json.dumps({"id": f"evil-{n}", "cmd": "set", "args": {"settings": {"dwell": EVIL_DWELL}}}).encode()
    return b"x" * (MAX_LINE + pad) + evil + (b"\n" if newline else b"")


segment = st.one_of(
    st.tuples(st.just("change"), st.sampled_from(["auto", "on", "off"])),
    st.tuples(st.just("junk"), st.binary(max_size=300)),
    st.tuples(st.just("long"), st.tuples(st.integers(1, 3000), st.booleans())),
)


@st.composite
def streams(draw: Any) -> tuple[bytes, list[int]]:
    """Requests, junk and over-long lines (each hiding a change past the limit), cut at arbitrary points."""
    parts, cuts, at = [], [], 0
    for n, (kind, value) in enumerate(draw(st.lists(segment, min_size=1, max_size=8))):
        if kind == "change":
            part = _change(n, value)
        elif kind == "junk":
            part = value
        else:
            part = _over_long(n, *value)
            if draw(st.booleans()):  # a cut past the limit: the server reads the line's rest separately
                cuts.append(at + MAX_LINE + draw(st.integers(1, value[0])))  # in the padding
        parts.append(part)
        at += len(part)
    data = b"".join(parts)
    cuts = sorted(set(cuts + draw(st.lists(st.integers(0, len(data)), max_size=6))))
    return data, cuts


def _drain(server: ServerThread, sub: Any) -> list[dict[str, Any]]:
    async def drain() -> list[dict[str, Any]]:
        out = []
        while not sub._queue.empty():
            record = sub._queue.get_nowait()
            if record is not None:
                out.append(record)
        return out
    return server.call(drain())


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stream=streams())
def test_what_ran_is_what_was_journaled_and_nothing_past_the_limit_ran(server: ServerThread,
                                                                     stream: tuple[bytes, list[int]]) -> None:
    data, cuts = stream

    async def subscribe() -> Any:
        return server.target.hub.subscribe(maxsize=100_000)
    sub = server.call(subscribe())
    try:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.settimeout(20)
            conn.connect(str(server.server.path))
            stream_in = conn.makefile("rb")
            assert "specctl" in json.loads(stream_in.readline())
            for start, end in zip([0, *cuts], [*cuts, len(data)]):
                conn.sendall(data[start:end])
                time.sleep(0.01)  # so that a cut is also a read boundary on the server's side
            conn.shutdown(socket.SHUT_WR)  # EOF: an unfinished last line is judged as it stands
            answers = [json.loads(line) for line in stream_in]
        records = _drain(server, sub)
    finally:
        server.loop.call_soon_threadsafe(sub.close)
    applied = [a for a in answers if a.get("ok") and str(a.get("id")).startswith("ok-")]
    journaled = [r for r in records if r["kind"] == "command" and r["cmd"] in ("mode", "set") and r["ok"]]
    assert len(applied) == len(journaled), "every applied change has exactly one command record"
    assert not any(str(a.get("id")).startswith("evil-") for a in answers)
    assert server.target.policy.settings.dwell != EVIL_DWELL
    assert not any((r.get("args") or {}).get("settings", {}).get("dwell") == EVIL_DWELL for r in journaled)
