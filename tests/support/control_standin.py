"""A stand-in for the supervisor's command interface, for control-socket tests and the bench.

It is a real implementation of the *target interface* (``execute`` and ``hub``)
with a real SpecPolicy and a real Hub, small enough to run before
runtime/supervisor/lifecycle.py exists: ping, status, mode, set and server, each journaled
as a ``command`` record, and ``boom`` to prove that an unexpected exception in
the target stays an ``internal`` answer.

Run it as a process for CLI tests: ``python tests/support/control_standin.py SOCKET``
prints ``ready`` once the socket listens and serves until SIGTERM; a second
argument sets ``max_clients`` (default: from RLIMIT_NOFILE).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from specctl.runtime.control.hub import Hub
from specctl.runtime.control.server import ControlServer
from specctl.runtime.core import records
from specctl.runtime.core.errors import INVALID_VALUE, UNKNOWN_COMMAND, CommandError
from specctl.runtime.core.policy import SpecPolicy
from specctl.runtime.core.settings import SettingsError

GPUS = [{"index": 0, "name": "SIM H200", "uuid": "GPU-sim-0", "state": "ok", "error": None,
         "util": 87.0, "mem_used": 120_000_000_000, "mem_total": 143_771_000_000, "power_w": 612.3,
         "power_limit_w": 700.0, "temp_c": 61.0, "sm_clock_mhz": 1980.0},
        {"index": 1, "name": "SIM H200", "uuid": "GPU-sim-1", "state": "failed", "error": "lost",
         "util": None, "mem_used": None, "mem_total": None, "power_w": None,
         "power_limit_w": None, "temp_c": None, "sm_clock_mhz": None}]


class StandInTarget:
    """Executes control commands against a real SpecPolicy and publishes what it did."""

    def __init__(self) -> None:
        self.hub = Hub()
        self.policy = SpecPolicy()
        self.server_state = "ready"

    def latest_sample(self) -> dict[str, Any]:
        server = {"state": self.server_state, "url": "http://127.0.0.1:40123", "running": 12,
                  "queued": 0, "gen_tps": 1834.2, "accept_len": 2.79, "token_usage": 0.12,
                  "pid": 1234, "restarts": 0, "error": None, "progress": None}
        return records.sample(server, self.policy.state(), GPUS, [], sim=True)

    async def execute(self, cmd: str, args: dict[str, Any], uid: int | None) -> dict[str, Any]:
        try:
            result = self._run(cmd, args)
        except CommandError:
            self.hub.publish(records.command(cmd, False, uid, args=args))
            raise
        self.hub.publish(records.command(cmd, True, uid, args=args))
        return result

    def _run(self, cmd: str, args: dict[str, Any]) -> dict[str, Any]:
        if cmd == "ping":
            return {"pong": True}
        if cmd == "status":
            return {"sample": self.latest_sample()}
        if cmd == "mode":
            return self._apply({"mode": args.get("mode")})
        if cmd == "set":
            settings = args.get("settings")
            if not isinstance(settings, dict):
                raise CommandError(INVALID_VALUE, "settings must be an object", field="settings")
            return self._apply(settings)
        if cmd == "server":
            return self._server(args.get("action"))
        if cmd == "boom":
            raise RuntimeError("the stand-in failed on purpose")
        raise CommandError(UNKNOWN_COMMAND, f"unknown command {cmd!r}")

    def _apply(self, changes: dict[str, Any]) -> dict[str, Any]:
        try:
            settings = self.policy.apply(changes)
        except SettingsError as e:
            raise CommandError(INVALID_VALUE, e.message, field=e.field) from None
        self.hub.publish(records.event("settings", settings=settings.as_dict()))
        return {"settings": settings.as_dict()}

    def _server(self, action: object) -> dict[str, Any]:
        states = {"restart": "ready", "start": "ready", "stop": "stopped"}
        if action not in states:
            raise CommandError(INVALID_VALUE, f"action must be one of {', '.join(states)}", field="action")
        self.server_state = states[str(action)]
        return {"state": self.server_state}


class ServerThread:
    """A ControlServer with a StandInTarget on its own event loop in a thread, for blocking clients."""

    def __init__(self, path: Path, **options: Any) -> None:
        self.target = StandInTarget()
        self.server = ControlServer(self.target, path, **options)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="control-server")

    def __enter__(self) -> ServerThread:
        self._thread.start()
        self.call(self.server.start())
        return self

    def __exit__(self, *exc: object) -> None:
        self.call(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def publish(self, record: dict[str, Any]) -> None:
        self.loop.call_soon_threadsafe(self.target.hub.publish, record)


async def _serve(path: Path, max_clients: int | None = None) -> None:
    server = ControlServer(StandInTarget(), path, max_clients=max_clients)
    await server.start()
    print("ready", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


if __name__ == "__main__":
    asyncio.run(_serve(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else None))


@contextlib.asynccontextmanager
async def standin_server(sock_dir: Path, line_timeout: float) -> AsyncIterator[tuple[ControlServer, StandInTarget]]:
    """A real control server on SOCK_DIR/run/specctl.sock over a stand-in target, stopped at the end."""
    target = StandInTarget()
    server = ControlServer(target, sock_dir / "run" / "specctl.sock", write_timeout=0.5, line_timeout=line_timeout)
    await server.start()
    try:
        yield server, target
    finally:
        await server.stop()
