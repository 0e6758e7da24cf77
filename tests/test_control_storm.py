"""The owner's commands under storms of the owner's own scripts, and clients that half-close, as the issue's
attacker ran them: hundreds of real clients in a process of their own (bench/control_storm.py's storm mode)
against a real ControlServer; the owner's status, force-off, auto and the console's subscribe always get in,
and nothing a client does puts a traceback in the supervisor's log."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from specctl.runtime.control.client import INTERACTIVE_ENV, ControlClient, ControlError, NoSupervisor, call
from specctl.runtime.control.server import ControlServer

from support.benches import load_bench
from support.control_standin import StandInTarget

storm_bench = load_bench("control_storm")


@pytest.fixture
async def server(sock_dir: Path) -> AsyncIterator[tuple[ControlServer, StandInTarget]]:
    target = StandInTarget()
    srv = ControlServer(target, sock_dir / "run" / "specctl.sock", max_clients=64, write_timeout=0.5)
    await srv.start()
    try:
        yield srv, target
    finally:
        await srv.stop()


async def _storm(path: Path, kind: str, clients: int, every: float) -> subprocess.Popen[str]:
    return await asyncio.to_thread(storm_bench.start_storm, path, kind, clients, every)


async def _until_scripts_are_refused(path: Path) -> str:
    """A script's connection (unmarked) is refused: the storm holds every place open to scripts."""
    for _ in range(200):
        try:
            async with ControlClient(path, 5.0) as client:
                await client.request("ping")
        except ControlError as exc:
            assert exc.details.get("busy") is True
            return exc.message
        await asyncio.sleep(0.05)
    raise AssertionError("the storm never filled the places open to scripts")


async def _console_stream(path: Path) -> ControlClient:
    """The console's stream connection, subscribed; reconnected as the console does when it was closed
    before its first request was read (its place on probation went to another newcomer)."""
    for _ in range(20):
        client = ControlClient(path, 10.0, interactive=True)
        try:
            await client.connect()
            await client.request("subscribe")
            return client
        except (ControlError, NoSupervisor) as exc:
            await client.close()
            assert not isinstance(exc, ControlError) or exc.details.get("busy") is True, exc
            await asyncio.sleep(0.1)
    raise AssertionError("the console never got its stream")


async def test_a_busy_storm_never_refuses_a_persons_commands(server, monkeypatch) -> None:
    """300 clients of the owner's uid ping every 0.2 s and take every place open to scripts; a person's
    status, force-off and auto (what the verbs run from a terminal) and the console's stream all get in."""
    monkeypatch.setenv(INTERACTIVE_ENV, "1")
    srv, target = server
    storm = await _storm(srv.path, "busy", 300, 0.2)
    try:
        message = await _until_scripts_are_refused(srv.path)
        assert "kept for commands a person types" in message or "all busy" in message
        console = await _console_stream(srv.path)
        try:
            for _ in range(10):  # `specctl status` typed at a terminal: what the verb runs, one connection each
                sample = await asyncio.to_thread(call, srv.path, "status", None, 10.0)
                assert sample["sample"]["server"]["state"] == "ready"
            for mode in ("off", "auto"):  # force-off, then auto
                answer = await asyncio.to_thread(call, srv.path, "mode", {"mode": mode}, 10.0)
                assert answer["settings"]["mode"] == mode
            seen = []
            async with asyncio.timeout(20):
                async for record in console.subscribe():
                    seen.append(record.get("cmd"))
                    if seen.count("mode") == 2:
                        break
        finally:
            await console.close()
        assert target.policy.settings.mode == "auto"
    finally:
        await asyncio.to_thread(storm_bench.stop_storm, storm)


@pytest.mark.slow
async def test_half_closing_clients_are_dropped_without_a_traceback(server, caplog) -> None:
    srv, _ = server
    caplog.set_level(logging.DEBUG)
    storm = await _storm(srv.path, "halfclose", 60, 0.0)
    try:
        await asyncio.sleep(3.0)
        async with ControlClient(srv.path, 20.0, interactive=True) as client:
            assert (await client.request("status"))["sample"]
    finally:
        await asyncio.to_thread(storm_bench.stop_storm, storm)
    await asyncio.sleep(1.5)  # the last ones' closing grace
    bad = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert not bad, [r.getMessage() for r in bad][:5]


NOBODY = 65534
CONNECTS = r"""
import socket, sys, time
path, n = sys.argv[1], int(sys.argv[2])
for _ in range(n):
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path); s.recv(4096)
    except OSError:
        pass
    s.close()
print("done", flush=True)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="connects as another uid: needs root")
async def test_forbidden_connections_are_one_line_a_minute_with_a_count(server, caplog) -> None:
    """The socket loosened by an operator (0777 in a 0711 folder): another user's 300 connections are each
    refused, and said in the log once, then counted, not once each."""
    srv, _ = server
    srv._quiet.every = 1.0
    srv.path.parent.chmod(0o711)
    srv.path.parent.parent.chmod(0o711)
    srv.path.chmod(0o777)
    python = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"
    caplog.set_level(logging.WARNING)

    def attack(n: int) -> str:
        return subprocess.run([python, "-I", "-S", "-c", CONNECTS, str(srv.path), str(n)], capture_output=True,
                              text=True, timeout=120, preexec_fn=lambda: (os.setgid(NOBODY), os.setuid(NOBODY)),
                              cwd="/").stdout

    assert "done" in await asyncio.to_thread(attack, 300)
    await asyncio.sleep(1.1)
    assert "done" in await asyncio.to_thread(attack, 1)
    said = [r.getMessage() for r in caplog.records if "refused a connection from uid" in r.getMessage()]
    assert 2 <= len(said) <= 4, said
    assert any("more like it" in line for line in said[1:]), said
