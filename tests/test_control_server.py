"""The control server over a real Unix socket, against a stand-in of the supervisor's interface.

Timeouts here only keep a broken build from hanging the run; no test asserts
on how long something took.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from specctl import PROTOCOL, __version__
from specctl.runtime.control.framing import MAX_LINE
from specctl.runtime.control.ownership import ControlSocketError, SocketInUse, peer_allowed
from specctl.runtime.control.server import ControlServer
from specctl.runtime.core import records

from support.control_standin import StandInTarget, standin_server
from support.peer import GUARD, Peer

CODES = {"bad_request", "unknown_command", "invalid_value", "unavailable", "internal"}


@pytest.fixture
async def served(sock_dir: Path) -> AsyncIterator[tuple[ControlServer, StandInTarget]]:
    async with standin_server(sock_dir, line_timeout=1.0) as served_pair:
        yield served_pair


async def greeted(path: Path) -> Peer:
    peer = await Peer.open(path)
    assert await peer.read() == {"specctl": {"version": __version__, "protocol": PROTOCOL}}
    return peer


async def wait_until(condition: Any) -> None:
    """Poll a condition; fail only if it never holds within GUARD."""
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.01)
    await asyncio.wait_for(poll(), GUARD)


def assert_error(answer: dict[str, Any], code: str, req_id: Any = None) -> None:
    assert answer["ok"] is False
    assert answer["id"] == req_id
    assert answer["error"]["code"] == code
    assert isinstance(answer["error"]["message"], str) and answer["error"]["message"]


# -- greeting and commands ----------------------------------------------------

async def test_greeting_comes_first(served) -> None:
    server, _ = served
    peer = await greeted(server.path)
    await peer.close()


async def test_ping_and_status(served) -> None:
    server, _ = served
    peer = await greeted(server.path)
    assert await peer.ask("ping", req_id="a") == {"id": "a", "ok": True, "result": {"pong": True}}
    status = await peer.ask("status", req_id=2)
    sample = status["result"]["sample"]
    assert status["ok"] and status["id"] == 2
    assert sample["kind"] == "sample" and sample["spec"]["mode"] == "auto"
    await peer.close()


async def test_mode_is_applied_and_visible_in_status(served) -> None:
    server, target = served
    peer = await greeted(server.path)
    answer = await peer.ask("mode", {"mode": "off"})
    assert answer["result"]["settings"]["mode"] == "off"
    assert target.policy.settings.mode == "off"
    status = await peer.ask("status")
    assert status["result"]["sample"]["spec"]["mode"] == "off"
    await peer.close()


async def test_set_is_all_or_nothing(served) -> None:
    server, target = served
    peer = await greeted(server.path)
    ok = await peer.ask("set", {"settings": {"off_at": 48, "on_at": 16}})
    assert ok["result"]["settings"]["off_at"] == 48
    refused = await peer.ask("set", {"settings": {"off_at": 100, "on_at": 200}}, req_id=7)
    assert_error(refused, "invalid_value", 7)
    assert refused["error"]["field"] == "on_at"
    assert (target.policy.settings.off_at, target.policy.settings.on_at) == (48, 16)
    await peer.close()


async def test_server_action(served) -> None:
    server, _ = served
    peer = await greeted(server.path)
    assert (await peer.ask("server", {"action": "stop"}))["result"] == {"state": "stopped"}
    assert_error(await peer.ask("server", {"action": "explode"}), "invalid_value", 1)
    await peer.close()


async def test_target_receives_the_peer_uid(served) -> None:
    server, target = served
    sub = target.hub.subscribe()
    peer = await greeted(server.path)
    await peer.ask("ping")
    record = await asyncio.wait_for(sub.get(), GUARD)
    assert record is not None and record["kind"] == "command"
    assert (record["cmd"], record["ok"], record["uid"]) == ("ping", True, os.geteuid())
    await peer.close()


async def test_unexpected_exception_is_internal_and_logged(served, caplog) -> None:
    server, _ = served
    peer = await greeted(server.path)
    assert_error(await peer.ask("boom", req_id=3), "internal", 3)
    assert "boom" in caplog.text and "failed on purpose" in caplog.text
    assert (await peer.ask("ping"))["ok"] is True
    await peer.close()


# -- bad input: an error answer, and the connection stays usable ------------------

BAD_LINES = {
    "not json": (b"{nope\n", "bad_request", None),
    "invalid utf-8": (b'{"id": 1, "cmd": "\xff\xfe"}\n', "bad_request", None),
    "not an object": (b"[1, 2, 3]\n", "bad_request", None),
    "a bare number": (b"42\n", "bad_request", None),
    "NaN": (b'{"id": NaN, "cmd": "ping"}\n', "bad_request", None),
    "a number too large for a float": (b'{"id": 3, "cmd": "set", "args": {"settings": {"off_at": 1e999}}}\n',
                                       "bad_request", None),
    "cmd not a string": (b'{"id": 5, "cmd": 17}\n', "bad_request", 5),
    "cmd missing": (b'{"id": 5}\n', "bad_request", 5),
    "args not an object": (b'{"id": 5, "cmd": "set", "args": [1]}\n', "bad_request", 5),
    "id not a scalar": (b'{"id": {"x": 1}, "cmd": "ping"}\n', "bad_request", None),
    "deep nesting": (b"[" * 60000 + b"]" * 5000 + b"\n", "bad_request", None),
    "unknown command": (b'{"id": 9, "cmd": "self-destruct"}\n', "unknown_command", 9),
    "line over 64 KiB": (b'{"id": 1, "cmd": "' + b"x" * (MAX_LINE + 10) + b'"}\n', "bad_request", None),
    "1 MiB line": (b"y" * (1 << 20) + b"\n", "bad_request", None),
}


@pytest.mark.parametrize("name", BAD_LINES)
async def test_bad_input_gets_an_error_and_the_connection_stays_usable(served, name: str) -> None:
    server, _ = served
    line, code, req_id = BAD_LINES[name]
    peer = await greeted(server.path)
    await peer.send(line)
    assert_error(await peer.read(), code, req_id)
    assert await peer.ask("ping", req_id="after") == {"id": "after", "ok": True, "result": {"pong": True}}
    await peer.close()


async def test_a_line_of_exactly_64_kib_is_accepted(served) -> None:
    server, _ = served
    head = b'{"id": 1, "cmd": "ping", "pad": "'
    line = head + b"p" * (MAX_LINE - len(head) - 2) + b'"}'
    assert len(line) == MAX_LINE
    peer = await greeted(server.path)
    await peer.send(line + b"\n")
    assert (await peer.read())["result"] == {"pong": True}
    await peer.close()


async def test_unknown_top_level_keys_are_ignored_and_ids_echoed(served) -> None:
    server, _ = served
    peer = await greeted(server.path)
    await peer.send(b'{"id": null, "cmd": "ping", "extra": [1, 2], "args": null}\n')
    assert await peer.read() == {"id": None, "ok": True, "result": {"pong": True}}
    await peer.send('{"id": "\\ud800\u00e9", "cmd": "ping"}\n'.encode())
    assert (await peer.read())["id"] == "\ud800\u00e9"
    await peer.close()


async def test_pipelined_requests_are_answered_in_order(served) -> None:
    server, _ = served
    peer = await greeted(server.path)
    await peer.send(b"".join(json.dumps({"id": i, "cmd": "ping"}).encode() + b"\n" for i in range(50)))
    assert [(await peer.read())["id"] for _ in range(50)] == list(range(50))
    await peer.close()


async def test_a_half_sent_line_that_stalls_is_answered_and_closed(served) -> None:
    server, _ = served
    peer = await greeted(server.path)
    await peer.send(b'{"id": 1, "cmd": "pi')
    assert_error(await peer.read(), "bad_request")
    assert await peer.read() is None
    await wait_until(lambda: server.clients == 0)


# -- many clients, and clients that misbehave --------------------------------------

async def test_200_concurrent_clients_all_get_well_formed_answers(served) -> None:
    server, target = served

    async def one(i: int) -> list[dict[str, Any]]:
        peer = await greeted(server.path)
        answers = [await peer.ask("ping", req_id=i), await peer.ask("status", req_id=-i),
                   await peer.ask("mode", {"mode": ("auto", "on", "off")[i % 3]}, req_id=f"m{i}")]
        await peer.close()
        return answers

    results = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(200))), 4 * GUARD)
    for i, (ping, status, mode) in enumerate(results):
        assert ping == {"id": i, "ok": True, "result": {"pong": True}}
        assert status["id"] == -i and status["result"]["sample"]["kind"] == "sample"
        assert mode["id"] == f"m{i}" and mode["result"]["settings"]["mode"] in ("auto", "on", "off")
    await wait_until(lambda: server.clients == 0)


async def test_clients_that_vanish_or_half_close_do_not_disturb_others(served) -> None:
    server, _ = served
    watcher = await greeted(server.path)
    for _ in range(30):  # connect and vanish, before and after the greeting
        peer = await Peer.open(server.path)
        peer.writer.transport.abort()
    for _ in range(10):  # half a request, then gone
        peer = await greeted(server.path)
        await peer.send(b'{"id": 1, "cm')
        await peer.close()
    half = await greeted(server.path)  # a request, then shutdown(SHUT_WR): still answered
    await half.send(b'{"id": "h", "cmd": "ping"}\n')
    half.writer.write_eof()
    assert (await half.read())["id"] == "h"
    assert await half.read() is None
    assert (await watcher.ask("ping"))["ok"] is True
    await watcher.close()
    await wait_until(lambda: server.clients == 0)


async def test_connections_past_max_clients_are_refused_while_all_are_busy(sock_dir: Path) -> None:
    """Two places (one kept for a person): both hold clients that have asked something and are not idle
    long enough to give way (a silent one would), so a third is refused until one leaves."""
    server = ControlServer(StandInTarget(), sock_dir / "specctl.sock", max_clients=2, evict_idle_s=3600)
    await server.start()
    first = await greeted(server.path)
    assert (await first.ask("ping"))["ok"] is True
    second = await greeted(server.path)  # in the place kept for a person, on probation: it says it is one
    await second.send(b'{"id": 2, "cmd": "ping", "interactive": true}\n')
    assert (await second.read())["ok"] is True
    third = await Peer.open(server.path)
    assert_error(await third.read(), "unavailable")
    assert await third.read() is None
    await first.close()
    await wait_until(lambda: server.clients == 1)
    again = await greeted(server.path)
    assert (await again.ask("ping"))["ok"] is True
    for peer in (second, again):
        await peer.close()
    await server.stop()


async def test_a_client_that_never_reads_its_answers_is_dropped(served) -> None:
    server, _ = served
    greedy = await greeted(server.path)
    pings = b'{"id": 1, "cmd": "status"}\n' * 20_000  # ~50 MB of answers that nobody reads
    greedy.writer.write(pings)
    bystander = await greeted(server.path)
    assert (await bystander.ask("ping"))["ok"] is True
    await wait_until(lambda: server.clients == 1)  # only the bystander is left
    greedy.writer.transport.abort()
    await bystander.close()


async def test_a_request_trickling_in_byte_by_byte_is_answered(served) -> None:
    server, _ = served
    peer = await greeted(server.path)
    for byte in b'{"id": "slow", "cmd": "ping"}\n':
        await peer.send(bytes([byte]))
    assert (await peer.read())["id"] == "slow"
    await peer.close()


async def test_a_last_line_without_newline_is_still_answered(served) -> None:
    server, _ = served
    peer = await greeted(server.path)
    await peer.send(b'{"id": 1, "cmd": "ping"}')
    peer.writer.write_eof()
    assert (await peer.read())["result"] == {"pong": True}
    await peer.close()


# -- subscribe ----------------------------------------------------------------------

async def test_subscribe_streams_records_until_the_client_leaves(served) -> None:
    server, target = served
    sub_peer = await greeted(server.path)
    assert await sub_peer.ask("subscribe", req_id="s") == {"id": "s", "ok": True, "result": {"subscribed": True}}
    target.hub.publish(records.event("server_ready"))
    assert (await sub_peer.read())["record"]["event"] == "server_ready"
    other = await greeted(server.path)
    await other.ask("mode", {"mode": "on"})
    streamed = [(await sub_peer.read())["record"] for _ in range(2)]
    assert {r["kind"] for r in streamed} == {"event", "command"}
    await sub_peer.send(b'{"id": "p", "cmd": "ping"}\n')  # a subscriber may still send commands
    lines = [await sub_peer.read() for _ in range(2)]  # the answer and the ping's command record
    assert {"id": "p", "ok": True, "result": {"pong": True}} in lines
    await sub_peer.close()
    await other.close()
    target.hub.publish(records.event("server_exit", pid=1, returncode=0))
    await wait_until(lambda: target.hub.subscribers == 0 and server.clients == 0)


async def test_a_subscriber_that_stops_reading_never_blocks_publish(served) -> None:
    server, target = served
    stuck = await greeted(server.path)
    await stuck.send(b'{"id": 1, "cmd": "subscribe"}\n')
    await wait_until(lambda: target.hub.subscribers == 1)
    big = records.event("filler", blob="z" * 20_000)
    for _ in range(2000):  # ~40 MB offered; publish must return at once every time
        target.hub.publish(big)
        await asyncio.sleep(0)
    bystander = await greeted(server.path)
    assert (await bystander.ask("ping"))["ok"] is True
    await wait_until(lambda: target.hub.subscribers == 0)  # dropped after write_timeout
    await bystander.close()
    stuck.writer.transport.abort()
    await wait_until(lambda: server.clients == 0)



async def stop_while_streaming(path: Path) -> None:
    """One server, one subscriber reading as fast as it can, records published every loop turn; then stop()."""
    target = StandInTarget()
    server = ControlServer(target, path)
    await server.start()
    peer = await greeted(server.path)
    await peer.send(b'{"id": 1, "cmd": "subscribe"}\n')
    await wait_until(lambda: target.hub.subscribers == 1)

    async def reads() -> None:
        while await peer.reader.read(65536):
            pass

    async def floods() -> None:
        while True:
            target.hub.publish(records.event("filler", n=1))
            await asyncio.sleep(0)

    helpers = [asyncio.create_task(reads()), asyncio.create_task(floods())]
    await asyncio.sleep(0.05)
    stopping = asyncio.create_task(server.stop())
    # asyncio.wait, not wait_for: a guard that cancels would hang on the same swallowed cancel
    done, _ = await asyncio.wait({stopping}, timeout=GUARD)
    for task in helpers:
        task.cancel()
    peer.writer.transport.abort()
    assert stopping in done, "stop() did not return while records were streaming"
    assert not server.path.exists() and server.clients == 0


async def test_stop_ends_while_records_stream_to_a_subscriber(sock_dir: Path) -> None:
    """stop() while the pump is sending: on 3.11 wait_for(drain) swallowed the cancel that landed as the
    drain completed, the pump kept streaming, and stop() (so the supervisor's SIGTERM) never returned."""
    for _ in range(10):  # the cancel must meet a send in flight; with records flowing it nearly always does
        await stop_while_streaming(sock_dir / "run" / "specctl.sock")


async def test_stop_does_not_wait_for_a_subscriber_whose_buffer_is_full(sock_dir: Path) -> None:
    target = StandInTarget()
    server = ControlServer(target, sock_dir / "run" / "specctl.sock", write_timeout=3600.0)  # never dropped
    await server.start()
    stuck = await greeted(server.path)
    await stuck.send(b'{"id": 1, "cmd": "subscribe"}\n')
    await wait_until(lambda: target.hub.subscribers == 1)
    big = records.event("filler", blob="z" * 20_000)
    for _ in range(200):  # ~4 MB: past what the kernel buffers, so the pump waits in drain
        target.hub.publish(big)
        await asyncio.sleep(0)
    stopping = asyncio.create_task(server.stop())
    done, _ = await asyncio.wait({stopping}, timeout=GUARD)
    stuck.writer.transport.abort()
    assert stopping in done and not server.path.exists() and server.clients == 0


# -- the socket file ------------------------------------------------------------------

async def test_socket_is_0600_in_a_0700_directory(served) -> None:
    server, _ = served
    assert stat.S_IMODE(os.stat(server.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(server.path.parent).st_mode) == 0o700


async def test_a_stale_socket_file_is_replaced(sock_dir: Path) -> None:
    path = sock_dir / "specctl.sock"
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(path))
    dead.close()  # the file stays; nothing listens: what a killed supervisor leaves
    server = ControlServer(StandInTarget(), path)
    await server.start()
    peer = await greeted(path)
    assert (await peer.ask("ping"))["ok"] is True
    await peer.close()
    await server.stop()


async def test_a_live_socket_is_refused_and_keeps_working(served) -> None:
    server, _ = served
    with pytest.raises(SocketInUse, match="another specctl supervisor"):
        await ControlServer(StandInTarget(), server.path).start()
    peer = await greeted(server.path)
    assert (await peer.ask("ping"))["ok"] is True
    await peer.close()


async def test_a_regular_file_at_the_path_is_not_replaced(sock_dir: Path) -> None:
    path = sock_dir / "specctl.sock"
    path.write_text("precious")
    with pytest.raises(ControlSocketError, match="not a socket"):
        await ControlServer(StandInTarget(), path).start()
    assert path.read_text() == "precious"


async def test_stop_closes_clients_and_removes_the_file(sock_dir: Path) -> None:
    target = StandInTarget()
    server = ControlServer(target, sock_dir / "specctl.sock")
    await server.start()
    idle = await greeted(server.path)
    subscriber = await greeted(server.path)
    await subscriber.ask("subscribe")
    await server.stop()
    assert not server.path.exists()
    assert await idle.read() is None
    assert await subscriber.read() is None
    assert target.hub.subscribers == 0


async def test_stop_leaves_a_newer_supervisors_socket_alone(sock_dir: Path) -> None:
    path = sock_dir / "specctl.sock"
    old = ControlServer(StandInTarget(), path)
    await old.start()
    path.unlink()  # someone removed it and a new supervisor bound the path
    new = ControlServer(StandInTarget(), path)
    await new.start()
    await old.stop()
    assert path.exists()
    await new.stop()
    assert not path.exists()


# -- who may connect ---------------------------------------------------------------------

def _as_nobody_read_all(path: str, out_fd: int) -> None:
    """In a forked child only: never returns."""
    try:
        os.setuid(65534)
        conn = socket.socket(socket.AF_UNIX)
        conn.settimeout(GUARD)
        conn.connect(path)
        with conn.makefile("rb") as stream:
            os.write(out_fd, stream.read())
    finally:
        os._exit(0)


def test_peer_rule() -> None:
    assert peer_allowed(1000, 1000) and peer_allowed(0, 1000)
    assert not peer_allowed(1001, 1000)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another uid")
async def test_another_uid_gets_an_error_and_is_closed(sock_dir: Path) -> None:
    os.chmod(sock_dir, 0o755)
    server = ControlServer(StandInTarget(), sock_dir / "specctl.sock")
    await server.start()
    os.chmod(server.path, 0o666)  # let the kernel through so that SO_PEERCRED decides
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become nobody, connect, pass on what the server said
        _as_nobody_read_all(str(server.path), write_end)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        out = await asyncio.wait_for(asyncio.to_thread(pipe.read), GUARD)
    os.waitpid(pid, 0)
    lines = [json.loads(line) for line in out.decode().splitlines()]
    assert len(lines) == 1 and lines[0]["error"]["code"] == "forbidden"
    await server.stop()
