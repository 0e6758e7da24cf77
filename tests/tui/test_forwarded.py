"""`specctl tui --connect` over an SSH-forwarded socket (`ssh -L local.sock:remote.sock host`).

ssh forwards a Unix socket by accepting on a local path and opening the
remote one for each connection, copying bytes both ways. A small relay does
exactly that here, between two real Unix sockets, in front of a real
headless supervisor: the CLI and the console work through it unchanged.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from specctl.console.tui.app import SpecctlApp
from specctl.console.tui.links import SocketLink
from specctl.widgets.banner import SpecBanner

from support.headless import Headless, wait_for
from support.tui import until


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


@pytest.fixture
async def relay(sock_dir: Path) -> AsyncIterator[tuple[Path, Path]]:
    """(forwarded path, remote path): what ssh -L would give, without ssh."""
    remote, local = sock_dir / "ctl" / "specctl.sock", sock_dir / "fwd.sock"

    async def forward(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_unix_connection(remote)
        await asyncio.gather(_pipe(client_r, server_w), _pipe(server_r, client_w))

    server = await asyncio.start_unix_server(forward, path=local)
    yield local, remote
    server.close()
    await server.wait_closed()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specctl.console.cli.main", *args], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.slow
async def test_cli_and_console_work_through_a_forwarded_socket(relay: tuple[Path, Path], sock_dir: Path) -> None:
    local, remote = relay
    sup = Headless(sock_dir, "--sim-load", "steady:c=4", "--sim-gpus", "1")
    try:
        await asyncio.to_thread(wait_for, lambda: remote.exists(), "the supervisor's socket")
        await asyncio.to_thread(sup.ready_sample)
        status = await asyncio.to_thread(cli, "status", "--socket", str(local))
        assert status.returncode == 0 and "ready" in status.stdout, status.stderr
        off = await asyncio.to_thread(cli, "force-off", "--socket", str(local))
        assert off.returncode == 0, off.stderr
        [command] = sup.records("command")
        assert command["args"] == {"mode": "off"} and command["uid"] == os.getuid()

        app = SpecctlApp(SocketLink(local), remember_theme=False)
        async with app.run_test(size=(120, 40)) as pilot:
            text = lambda: app.dashboard.query_one(SpecBanner).render().plain  # noqa: E731
            await until(pilot, lambda: "FORCED OFF" in text() and "READY" in text(), "the forwarded view")
            await pilot.press("a")
            await until(pilot, lambda: "AUTO" in text(), "auto, sent through the relay")
    finally:
        sup.proc.terminate()
        await asyncio.to_thread(sup.proc.wait, 60)
