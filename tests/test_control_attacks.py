"""The control socket attacked as a hostile local user would: each test is one attack it must stop.

A real ControlServer on a real Unix socket, in front of the stand-in target
(a real SpecPolicy and Hub); what is asserted is what a client and the
journal's readers see. Timeouts only keep a broken build from hanging.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from specctl.runtime.control.framing import MAX_LINE
from specctl.runtime.control.server import ControlServer

from support.control_standin import StandInTarget, standin_server
from support.peer import Peer

CHANGES = ("mode", "set", "server")  # the commands that change something


@pytest.fixture
async def served(sock_dir: Path) -> AsyncIterator[tuple[ControlServer, StandInTarget]]:
    async with standin_server(sock_dir, line_timeout=2.0) as served_pair:
        yield served_pair


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


# -- 3. file descriptors ------------------------------------------------------------

async def test_at_the_cap_the_owner_still_gets_status_and_force_off(sock_dir: Path) -> None:
    """The attack: idle clients fill every connection the supervisor allows. The newcomer (the owner's
    `specctl status`, then `force-off`) gets in: the longest-idle connection that streams nothing goes."""
    target = StandInTarget()
    server = ControlServer(target, sock_dir / "specctl.sock", max_clients=3, evict_idle_s=0.0)
    await server.start()
    try:
        console = await Peer.greeted(server.path)
        await console.send(b'{"id": "s", "cmd": "subscribe"}\n')
        assert (await console.read())["id"] == "s"
        idle = [await Peer.greeted(server.path) for _ in range(2)]
        for cmd, args in (("status", None), ("mode", {"mode": "off"})):
            owner = await Peer.greeted(server.path)
            await owner.send(json.dumps({"id": cmd, "cmd": cmd, "args": args}).encode() + b"\n")
            answer = await owner.read()
            assert answer is not None and answer["ok"] is True, answer
            await owner.close()
        assert target.policy.settings.mode == "off"
        assert await idle[0].read() is None, "the longest-idle connection made room"
        target.hub.publish({"v": 1, "t": 1.0, "kind": "event", "event": "still_here"})
        while (line := await console.read()) is not None and line["record"].get("event") != "still_here":
            pass
        assert line is not None, "the subscriber was kept"
        for peer in (console, *idle):
            await peer.close()
    finally:
        await server.stop()


async def test_idle_connections_time_out_but_a_subscriber_keeps_its_stream(sock_dir: Path) -> None:
    target = StandInTarget()
    server = ControlServer(target, sock_dir / "specctl.sock", idle_timeout=0.3)
    await server.start()
    try:
        console = await Peer.greeted(server.path)
        await console.send(b'{"id": "s", "cmd": "subscribe"}\n')
        assert (await console.read())["id"] == "s"
        idle = await Peer.greeted(server.path)
        assert await idle.read() is None, "closed after the idle timeout, without a line"
        target.hub.publish({"v": 1, "t": 1.0, "kind": "event", "event": "later"})
        assert (await console.read())["record"]["event"] == "later"
        await console.close()
    finally:
        await server.stop()


@pytest.mark.slow
def test_out_of_descriptors_accept_backs_off_says_it_once_and_the_owner_gets_through(sock_dir: Path) -> None:
    """The attack: 1,030 idle connections against a soft limit of 1,024 (here 300 against 64, with the cap
    set past the limit so that accept() itself fails). Before: accept() tracebacks at 100 % CPU, megabytes
    of stderr a second, and the owner's `status` failed until the clients left."""
    import resource
    import socket
    import subprocess
    import sys
    import time

    path = sock_dir / "specctl.sock"
    err = sock_dir / "stderr"
    with open(err, "wb") as err_fh:
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).parent / "support" / "control_standin.py"), str(path), "100000"],
            stdout=subprocess.PIPE, stderr=err_fh,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)))
    clients: list[socket.socket] = []
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        for _ in range(300):
            c = socket.socket(socket.AF_UNIX)
            c.connect(str(path))
            clients.append(c)
        time.sleep(1.0)  # the accept loop meets EMFILE; before, it spun and wrote tracebacks meanwhile
        owner = subprocess.run([sys.executable, "-m", "specctl.console.cli.main", "status", "--json",
                                "--socket", str(path)], capture_output=True, text=True, timeout=60)
        assert owner.returncode == 0, owner.stderr
        assert json.loads(owner.stdout)["kind"] == "sample"
    finally:
        for c in clients:
            c.close()
        proc.terminate()
        proc.wait(timeout=30)
    told = err.read_text()
    assert told.count("cannot accept connections") == 1, told[-2000:]
    assert "Traceback" not in told and len(told) < 4000


async def test_the_consoles_command_connection_reconnects_after_an_idle_close(sock_dir: Path) -> None:
    """The cost of idle timeouts, paid by us: a console left alone past the timeout still steers."""
    from specctl.console.tui.links import SocketLink

    target = StandInTarget()
    server = ControlServer(target, sock_dir / "specctl.sock", idle_timeout=0.2)
    await server.start()
    link = SocketLink(server.path)
    try:
        await link.open()
        await asyncio.sleep(0.6)  # both of its connections pass the idle timeout; the command one is closed
        assert (await link.request("mode", {"mode": "off"}))["settings"]["mode"] == "off"
        assert target.policy.settings.mode == "off"
        await asyncio.sleep(0.6)
        assert (await link.request("status"))["sample"]["kind"] == "sample"
    finally:
        await link.close()
        await server.stop()
