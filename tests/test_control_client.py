"""ControlClient against a real ControlServer, and against things that are not one."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from specctl import PROTOCOL
from specctl.runtime.control.client import ControlClient, ControlError, NoSupervisor, ProtocolError, call
from specctl.runtime.control.server import ControlServer
from specctl.runtime.core import records

from support.control_standin import ServerThread, StandInTarget

GUARD = 20.0


@pytest.fixture
async def served(sock_dir: Path) -> AsyncIterator[tuple[ControlServer, StandInTarget]]:
    target = StandInTarget()
    server = ControlServer(target, sock_dir / "specctl.sock")
    await server.start()
    yield server, target
    await server.stop()


async def test_request_returns_the_result(served) -> None:
    server, target = served
    async with ControlClient(server.path) as client:
        assert client.greeting is not None and client.greeting["protocol"] == PROTOCOL
        assert await client.request("ping") == {"pong": True}
        assert (await client.request("mode", {"mode": "off"}))["settings"]["mode"] == "off"
    assert target.policy.settings.mode == "off"


async def test_error_answer_raises_control_error_with_code_and_field(served) -> None:
    server, _ = served
    async with ControlClient(server.path) as client:
        with pytest.raises(ControlError) as refused:
            await client.request("set", {"settings": {"on_at": 999}})
        assert refused.value.code == "invalid_value"
        assert refused.value.details == {"field": "on_at"}
        with pytest.raises(ControlError) as unknown:
            await client.request("frobnicate")
        assert unknown.value.code == "unknown_command"
        assert await client.request("ping") == {"pong": True}


async def test_no_socket_means_no_supervisor_with_a_helpful_message(sock_dir: Path) -> None:
    path = sock_dir / "missing.sock"
    with pytest.raises(NoSupervisor) as missing:
        await ControlClient(path).connect()
    assert str(missing.value) == (f"no specctl supervisor at {path}; start one with "
                                  f"`specctl run --headless` or `specctl tui`")


async def test_a_path_too_long_for_a_socket_means_no_supervisor(sock_dir: Path) -> None:
    with pytest.raises(NoSupervisor, match="cannot connect"):
        await ControlClient(sock_dir / ("x" * 200)).connect()


async def test_a_stale_socket_means_no_supervisor(sock_dir: Path) -> None:
    path = sock_dir / "stale.sock"
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(path))
    dead.close()
    with pytest.raises(NoSupervisor, match="specctl run --headless"):
        await ControlClient(path).connect()


async def test_something_else_on_the_socket_is_a_protocol_error(sock_dir: Path) -> None:
    async def impostor(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b'{"qemu": "hello"}\n')
        await writer.drain()
        writer.close()

    path = sock_dir / "other.sock"
    server = await asyncio.start_unix_server(impostor, str(path))
    with pytest.raises(ProtocolError, match="does not speak specctl protocol"):
        await ControlClient(path).connect()
    server.close()


async def test_subscribe_yields_published_records(served) -> None:
    server, target = served
    async with ControlClient(server.path) as client:
        stream = client.subscribe()
        first = asyncio.ensure_future(anext(stream))
        await asyncio.wait_for(_until(lambda: target.hub.subscribers == 1), GUARD)
        target.hub.publish(records.event("server_ready"))
        assert (await asyncio.wait_for(first, GUARD))["event"] == "server_ready"
        target.hub.publish(records.event("server_exit", pid=3, returncode=0))
        assert (await asyncio.wait_for(anext(stream), GUARD))["event"] == "server_exit"
        await stream.aclose()


async def test_subscribe_ends_when_the_supervisor_stops(sock_dir: Path) -> None:
    server = ControlServer(StandInTarget(), sock_dir / "specctl.sock")
    await server.start()
    async with ControlClient(server.path) as client:
        stream = client.subscribe()
        pending = asyncio.ensure_future(anext(stream))
        await asyncio.wait_for(_until(lambda: server.target.hub.subscribers == 1), GUARD)
        await server.stop()
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(pending, GUARD)


def test_sync_call_for_the_cli(sock_dir: Path) -> None:
    with ServerThread(sock_dir / "specctl.sock") as running:
        assert call(running.server.path, "ping") == {"pong": True}
        with pytest.raises(ControlError) as refused:
            call(running.server.path, "mode", {"mode": "sideways"})
        assert refused.value.code == "invalid_value"
    with pytest.raises(NoSupervisor):
        call(sock_dir / "specctl.sock", "ping")


async def _until(condition) -> None:
    while not condition():
        await asyncio.sleep(0.01)
