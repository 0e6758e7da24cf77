"""Whatever bytes a client sends, it gets well-formed answers and the server keeps serving."""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
