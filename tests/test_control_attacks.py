"""The control socket attacked as a hostile local user would: each test is one attack it must stop.

A real ControlServer on a real Unix socket, in front of the stand-in target
(a real SpecPolicy and Hub); what is asserted is what a client and the
journal's readers see. Timeouts only keep a broken build from hanging.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from control_standin import StandInTarget
from specctl.runtime.control.server import MAX_LINE, ControlServer

GUARD = 20.0
CHANGES = ("mode", "set", "server")  # the commands that change something


@pytest.fixture
async def served(sock_dir: Path) -> AsyncIterator[tuple[ControlServer, StandInTarget]]:
    target = StandInTarget()
    server = ControlServer(target, sock_dir / "run" / "specctl.sock", write_timeout=0.5, line_timeout=2.0)
    await server.start()
    yield server, target
    await server.stop()


class Peer:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def greeted(cls, path: Path) -> "Peer":
        reader, writer = await asyncio.open_unix_connection(str(path), limit=4 * MAX_LINE)
        peer = cls(reader, writer)
        assert "specctl" in (await peer.read() or {})
        return peer

    async def read(self) -> dict[str, Any] | None:
        line = await asyncio.wait_for(self.reader.readline(), GUARD)
        return json.loads(line) if line else None

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass


def command_records(sub: Any) -> list[dict[str, Any]]:
    out = []
    while not sub._queue.empty():
        record = sub._queue.get_nowait()
        if record is not None and record["kind"] == "command" and record["cmd"] in CHANGES:
            out.append(record)
    return out


# -- 1. framing ------------------------------------------------------------------

@pytest.mark.parametrize("ending", [b"", b"\n"], ids=["to-eof", "to-newline"])
async def test_the_rest_of_an_over_long_line_never_runs(served, ending: bytes) -> None:
    """The attack: 64 KiB + 1 of padding, then a mode change in the same line, up to EOF (or a newline).

    Before: the bytes after the discard point ran as a request of their own and forced speculation off.
    """
    server, target = served
    sub = target.hub.subscribe()
    peer = await Peer.greeted(server.path)
    await peer.send(b"x" * (MAX_LINE + 1))
    await asyncio.sleep(0.2)  # let the server read past its limit and start discarding
    await peer.send(b'{"id":"evil","cmd":"mode","args":{"mode":"off"}}' + ending)
    if not ending:
        peer.writer.write_eof()
    answer = await peer.read()
    assert answer is not None and answer["ok"] is False and answer["error"]["code"] == "bad_request"
    assert answer["id"] is None and "longer than" in answer["error"]["message"]
    if ending:  # the connection stays usable, and the next line is a line of its own
        await peer.send(b'{"id":"next","cmd":"ping"}\n')
        assert (await peer.read()) == {"id": "next", "ok": True, "result": {"pong": True}}
    else:
        assert await peer.read() is None, "nothing more is answered: the rest of the line did not run"
    await peer.close()
    assert target.policy.settings.mode == "auto"
    assert command_records(sub) == []
