"""The supervisor's recent history: kept bounded in age and bytes, sent first to a subscriber that asks.

The ring itself is plain data (a fake clock moves it through minutes); the
protocol runs over a real Unix socket against the stand-in target, so an old
client (no ``history`` arg) and a new one are both exercised on the wire.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from specctl.runtime.control.client import ControlClient
from specctl.runtime.control.hub import HISTORY_BYTES, HISTORY_S, History, Hub
from specctl.runtime.control.server import ControlServer
from specctl.runtime.core import records

from support.control_standin import StandInTarget, standin_server
from support.peer import GUARD, Peer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def event(n: int, **fields: object) -> dict[str, object]:
    return dict(records.event("settings", step=n, **fields))


def test_the_defaults_are_ten_minutes_or_four_mib() -> None:
    assert (HISTORY_S, HISTORY_BYTES) == (600.0, 4 * 2**20)
    history = Hub().history
    assert (history.max_age_s, history.max_bytes) == (HISTORY_S, HISTORY_BYTES)


def test_records_older_than_the_window_leave() -> None:
    clock = Clock()
    history = History(max_age_s=600.0, max_bytes=2**20, clock=clock)
    for n in range(20):  # one a minute
        history.add(event(n))
        clock.now += 60.0
    steps = [json.loads(line)["step"] for line in history.encoded()]
    assert steps == list(range(10, 20))  # the last ten minutes, oldest first


def test_the_byte_bound_wins_when_records_are_large() -> None:
    history = History(max_age_s=600.0, max_bytes=10_000, clock=Clock())
    for n in range(100):
        history.add(event(n, why="x" * 900))
    held = history.encoded()
    assert history.bytes == sum(map(len, held)) <= 10_000
    assert [json.loads(line)["step"] for line in held] == list(range(100 - len(held), 100))  # the newest kept
    assert len(held) >= 9


def test_what_is_not_plain_json_is_not_kept() -> None:
    history = History(clock=Clock())
    history.add({"v": 1, "t": 1.0, "kind": "event", "event": "x", "bad": object()})
    history.add({"v": 1, "t": 1.0, "kind": "event", "event": "x", "nan": float("nan")})
    assert history.encoded() == [] and history.bytes == 0


@pytest.fixture
async def served(sock_dir: Path) -> AsyncIterator[tuple[ControlServer, StandInTarget]]:
    async with standin_server(sock_dir, line_timeout=1.0) as served_pair:
        yield served_pair


async def test_a_subscriber_asking_for_history_gets_it_first_then_the_live_stream(served) -> None:
    server, target = served
    for n in range(5):
        target.hub.publish(event(n))
    peer = await Peer.open(server.path)
    await peer.read()  # the greeting
    answer = await peer.ask("subscribe", {"history": True}, req_id="s")
    assert answer == {"id": "s", "ok": True, "result": {"subscribed": True, "history": 5}}
    past = [await peer.read() for _ in range(5)]
    assert [line["record"]["step"] for line in past] == [0, 1, 2, 3, 4]
    assert all(line["history"] is True for line in past)
    target.hub.publish(event(5))
    live = await peer.read()
    assert live["record"]["step"] == 5 and "history" not in live
    await peer.close()


async def test_an_old_client_gets_exactly_what_it_got_before(served) -> None:
    """No ``history`` arg: the same answer and no past records (an older console keeps working)."""
    server, target = served
    target.hub.publish(event(0))
    peer = await Peer.open(server.path)
    await peer.read()
    assert await peer.ask("subscribe", req_id=1) == {"id": 1, "ok": True, "result": {"subscribed": True}}
    target.hub.publish(event(1))
    assert (await peer.read())["record"]["step"] == 1
    await peer.close()


async def test_unknown_subscribe_args_are_ignored(served) -> None:
    server, target = served
    target.hub.publish(event(0))
    peer = await Peer.open(server.path)
    await peer.read()
    answer = await peer.ask("subscribe", {"since": 12, "history": "yes please"}, req_id=1)
    assert answer == {"id": 1, "ok": True, "result": {"subscribed": True}}
    await peer.close()


async def test_the_client_reads_history_then_live_records(served) -> None:
    server, target = served
    for n in range(3):
        target.hub.publish(event(n))
    async with ControlClient(server.path) as client:
        answer = await client.start_subscription(history=True)
        assert answer == {"subscribed": True, "history": 3}
        stream = client.records()
        got = [await asyncio.wait_for(anext(stream), GUARD) for _ in range(3)]
        target.hub.publish(event(3))
        got.append(await asyncio.wait_for(anext(stream), GUARD))
        assert [r["step"] for r in got] == [0, 1, 2, 3]
        await stream.aclose()



async def test_a_console_that_reconnects_is_given_only_what_it_has_not_shown(served) -> None:
    """The console's link asks for history each time it connects; after a reconnect, records it already
    drew are not drawn twice (the charts would double back, the log repeat itself)."""
    from specctl.console.tui.links import SocketLink

    server, target = served
    for n in range(3):
        target.hub.publish(event(n))
    link = SocketLink(server.path)

    async def steps(count: int) -> list[int]:
        """The next ``count`` events' steps (the stand-in also journals each status the link asks)."""
        stream, got = link.records(), []
        while len(got) < count:
            record = await asyncio.wait_for(anext(stream), GUARD)
            if record["kind"] == "event":
                got.append(record["step"])
        await stream.aclose()
        return got

    await link.open()
    assert await steps(3) == [0, 1, 2]
    await link.open()  # a reconnect: fresh connections, the same console
    target.hub.publish(event(3))
    assert await steps(1) == [3]
    await link.close()
