"""A storm of the owner's own clients that connect and never speak, reconnecting as fast as they are closed
(bench/control_storm.py's idle storm, in a process of its own) against a real ControlServer: every place is
taken again and again, yet a person's `status` gets its answer every time, and so does a script's, in turn.
Then the rules behind it, on the admission bookkeeping alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from specctl.runtime.control.admission import Places
from specctl.runtime.control.client import INTERACTIVE_ENV, call
from specctl.runtime.control.server import ControlServer

from support.benches import load_bench
from support.control_standin import StandInTarget

storm_bench = load_bench("control_storm")
CAP = 48


@pytest.fixture
async def server(sock_dir: Path) -> AsyncIterator[ControlServer]:
    srv = ControlServer(StandInTarget(), sock_dir / "run" / "specctl.sock", max_clients=CAP)
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


async def _storm_holds_every_place(srv: ControlServer) -> None:
    """Every place was taken and given up to the storm's newcomers twice over: the storm is at the cap."""
    for _ in range(1200):
        if srv.evicted > 2 * CAP:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the storm never filled the socket ({srv.evicted} connections made room)")


async def test_an_idle_storm_neither_refuses_a_persons_status_nor_starves_a_script(server, monkeypatch) -> None:
    storm = await asyncio.to_thread(storm_bench.start_storm, server.path, "idle", 3 * CAP, 0.5)
    try:
        await _storm_holds_every_place(server)
        monkeypatch.setenv(INTERACTIVE_ENV, "1")  # `specctl status` typed at a terminal: one connection each
        for _ in range(8):
            sample = await asyncio.to_thread(call, server.path, "status", None, 30.0)
            assert sample["sample"]["server"]["state"] == "ready"
        monkeypatch.setenv(INTERACTIVE_ENV, "0")  # a script: no retries, no reserve; it waits its turn
        for _ in range(2):
            assert (await asyncio.to_thread(call, server.path, "ping", None, 30.0)) == {"pong": True}
        assert server.evicted > 2 * CAP  # the storm's own clients are still let in, in turn
    finally:
        await asyncio.to_thread(storm_bench.stop_storm, storm)


class Client:
    """What the places see of a connection: when it last asked something, how it is closed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.last_active = 0.0
        self.subscribed = False
        self.closed = False

    def evict(self) -> None:
        self.closed = True

    def __repr__(self) -> str:
        return self.name


def test_at_the_cap_the_oldest_silent_newcomer_gives_way_once_its_grace_is_over() -> None:
    places = Places(max_clients=4, reserve=1, evict_idle_s=1.0, grace_s=0.1)
    asked, silent = Client("asked"), [Client(f"silent{i}") for i in range(2)]
    assert places.admit(asked, 0.0) == "open"
    assert places.spoke(asked, interactive=False)
    for i, client in enumerate(silent):
        assert places.admit(client, 0.01 * i) == "open"
    person = Client("person")
    assert places.admit(person, 0.05) == "reserve"  # the open places are full, and no grace is over yet
    late = Client("late")
    assert places.admit(late, 0.06) is None
    assert places.wait_s(0.06) == pytest.approx(0.04)  # silent0's grace ends at 0.1: wait for it, not refused
    assert places.admit(late, 0.1) == "open" and silent[0].closed and not asked.closed
    assert places.spoke(person, interactive=True)  # a person's first request keeps its reserved place


def test_a_place_held_by_a_client_that_asked_something_is_not_taken_before_it_idles() -> None:
    places = Places(max_clients=2, reserve=1, evict_idle_s=1.0, grace_s=0.1)
    script, person = Client("script"), Client("person")
    assert places.admit(script, 0.0) == "open" and places.spoke(script, interactive=False)
    assert places.admit(person, 0.0) == "reserve" and places.spoke(person, interactive=True)
    newcomer = Client("newcomer")
    assert places.admit(newcomer, 0.5) is None and places.wait_s(0.5) is None  # all in use: refused
    assert places.admit(newcomer, 1.5) == "open" and script.closed and not person.closed


def test_a_script_in_the_reserve_gives_its_place_back_at_its_first_request() -> None:
    places = Places(max_clients=2, reserve=1, evict_idle_s=1.0, grace_s=0.1)
    busy, script = Client("busy"), Client("script")
    assert places.admit(busy, 0.0) == "open" and places.spoke(busy, interactive=False)
    assert places.admit(script, 0.0) == "reserve"
    assert not places.spoke(script, interactive=False)  # not a person's: the caller refuses and closes it
    assert places.admit(Client("next"), 0.0) == "reserve"
