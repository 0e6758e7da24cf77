"""A raw control-socket client for tests: bytes out, parsed lines in (no ControlClient in the way)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from specctl.runtime.control.framing import MAX_LINE

GUARD = 20.0  # seconds before a hung test fails instead of hanging


class Peer:
    """A raw protocol client: bytes out, parsed lines in."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, path: Path) -> Peer:
        reader, writer = await asyncio.open_unix_connection(str(path), limit=4 * MAX_LINE)
        return cls(reader, writer)

    @classmethod
    async def greeted(cls, path: Path) -> Peer:
        """Connected, with the server's greeting read."""
        peer = await cls.open(path)
        assert "specctl" in (await peer.read() or {})
        return peer

    async def read(self) -> dict[str, Any] | None:
        line = await asyncio.wait_for(self.reader.readline(), GUARD)
        return json.loads(line) if line else None

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def ask(self, cmd: str, args: dict[str, Any] | None = None, req_id: Any = 1) -> dict[str, Any]:
        req: dict[str, Any] = {"id": req_id, "cmd": cmd}
        if args is not None:
            req["args"] = args
        await self.send(json.dumps(req).encode() + b"\n")
        answer = await self.read()
        assert answer is not None
        return answer

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError:
            pass
