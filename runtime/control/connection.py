"""One client of the control socket: its requests answered in order, then its stream of records if it subscribed.

Kept apart from the server (binding, accepting, admission) because this is what
a client's bytes drive once it holds a place: requests are read as bounded
lines, each answered before the next is read, one request per turn of the
loop so no client holds the supervisor; a client that stops reading its
answers or its stream is dropped, never waited on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from specctl import PROTOCOL, __version__
from specctl.runtime.control.framing import (
    MAX_LINE,
    BadRequest,
    LineReader,
    LineStalled,
    LineTooLong,
    dumps,
    encode_answer,
    error,
    is_interactive,
    parse_request,
)
from specctl.runtime.control.hub import Hub, Subscription
from specctl.runtime.core.errors import BAD_REQUEST, INTERNAL, UNAVAILABLE, CommandError

log = logging.getLogger(__name__)

CLOSE_GRACE_S = 1.0  # a closing connection waits this long for its client to take what was written


class ControlTarget(Protocol):
    """What the control server steers: the supervisor, or a stand-in in tests."""

    hub: Hub

    async def execute(self, cmd: str, args: dict[str, Any], uid: int | None) -> dict[str, Any]: ...


class Host(Protocol):
    """What a connection needs from its server."""

    target: ControlTarget
    idle_timeout: float | None
    line_timeout: float
    write_timeout: float

    @property
    def stopping(self) -> bool: ...

    def busy_message(self, reserved: bool) -> str: ...

    def spoke(self, connection: Connection, interactive: bool) -> bool: ...


def abort(writer: asyncio.StreamWriter) -> None:
    """Close the connection now, whatever state its transport is in (a transport that is already gone may
    raise from abort(): asyncio's selector transport after its connection_lost ran)."""
    with contextlib.suppress(Exception):
        writer.transport.abort()


class Dropped(Exception):
    """The client stopped reading (or is gone); its connection was aborted."""


class Connection:
    """One client: reads requests in order, answers them, and streams records once subscribed."""

    def __init__(self, host: Host, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, uid: int) -> None:
        self._host = host
        self._lines = LineReader(reader, host.idle_timeout, host.line_timeout)
        self._writer = writer
        self._uid = uid
        self._pump: asyncio.Task[None] | None = None
        self._spoken = False  # a request came: the places are told once
        self.last_active = asyncio.get_running_loop().time()  # when its last request (or its greeting) came

    @property
    def subscribed(self) -> bool:
        return self._pump is not None

    def evict(self) -> None:
        """Close this connection now, to make room: its reads end, its task cleans up."""
        abort(self._writer)

    async def serve(self) -> None:
        """Answer requests until the client leaves; then keep streaming if it subscribed."""
        try:
            await self.send(dumps({"specctl": {"version": __version__, "protocol": PROTOCOL}}))
            self.last_active = asyncio.get_running_loop().time()  # a newcomer's grace runs from its greeting
            await self._serve_requests()
            if self._pump is not None:
                await self._pump
        except (ConnectionError, Dropped):
            pass
        finally:
            await self._close()

    async def _serve_requests(self) -> None:
        while True:
            try:
                line = await self._lines.readline()
            except LineTooLong:
                await self.send(dumps(error(None, BAD_REQUEST, f"line longer than {MAX_LINE} bytes")))
                continue
            except LineStalled:
                await self.send(dumps(error(None, BAD_REQUEST, "line not finished in time; closing")))
                return
            if line is None:
                return
            if line.strip():
                self.last_active = asyncio.get_running_loop().time()
                if not self._spoken:
                    self._spoken = True
                    if not self._host.spoke(self, is_interactive(line)):  # on probation, and not a person's
                        busy = self._host.busy_message(reserved=True)
                        await self.send(dumps(error(None, UNAVAILABLE, busy, busy=True)))
                        return
                await self.send(encode_answer(await self._answer(line)))
                await asyncio.sleep(0)  # one request, then the others' turn: a client with 2,000 queued
                # requests (or half-closed behind them) cannot hold the loop while a person's status waits

    async def _answer(self, line: bytes) -> dict[str, Any]:
        try:
            req_id, cmd, args = parse_request(line)
        except BadRequest as e:
            return error(e.req_id, BAD_REQUEST, e.message)
        try:
            result = self._subscribe(args) if cmd == "subscribe" else await self._execute(cmd, args)
        except CommandError as e:
            return {"id": req_id, "ok": False, "error": e.as_dict()}
        return {"id": req_id, "ok": True, "result": result}

    async def _execute(self, cmd: str, args: dict[str, Any]) -> dict[str, Any]:
        """The target's answer; an unexpected failure is logged and answered, never raised."""
        try:
            result = await self._host.target.execute(cmd, args, self._uid)
        except CommandError:
            raise
        except Exception:
            log.exception("control command %r failed", cmd)
            raise CommandError(INTERNAL, f"{cmd} failed inside the supervisor; see its log") from None
        return result

    def _subscribe(self, args: dict[str, Any]) -> dict[str, Any]:
        """Start streaming; ``{"history": true}`` sends the recent records first (an unknown arg is ignored).

        The answer is written before the pump's first line: the pump only starts once this
        request's handler awaits the answer's write.
        """
        if self._pump is not None:
            return {"subscribed": True}
        hub = self._host.target.hub
        if args.get("history") is True:
            past, sub = hub.subscribe_with_history()
            self._pump = asyncio.create_task(self._stream(sub, past))
            return {"subscribed": True, "history": len(past)}
        self._pump = asyncio.create_task(self._stream(hub.subscribe()))
        return {"subscribed": True}

    async def _stream(self, sub: Subscription, past: Sequence[bytes] = ()) -> None:
        """Forward hub records; a client that cannot keep up is dropped, the hub never waits.

        Each line is ``{"record": ...}``; once the hub has had to drop records for
        this reader, ``"dropped"`` carries the running count, so a console knows
        its view has a gap. ``past`` (records already encoded, from the hub's
        history) go first, marked ``"history": true``.
        """
        try:
            for data in past:
                await self.send(b'{"record":' + data + b',"history":true}\n')
            async for record in sub:
                line: dict[str, Any] = {"record": record}
                if sub.dropped:
                    line["dropped"] = sub.dropped
                try:
                    data = dumps(line)
                except (TypeError, ValueError):
                    log.exception("record not sent: it is not plain JSON")
                    continue
                await self.send(data)
        except (ConnectionError, Dropped):
            abort(self._writer)
        finally:
            sub.close()

    async def send(self, data: bytes) -> None:
        """Write one line; a client that does not take it within write_timeout is dropped.

        asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that lands
        as the drain completes, and a streaming pump that lost stop()'s cancel kept
        the supervisor from exiting (it waited on the hub, which closes after us).
        """
        if self._writer.is_closing():
            raise Dropped
        self._writer.write(data)
        try:
            async with asyncio.timeout(self._host.write_timeout):
                await self._writer.drain()
        except TimeoutError:
            abort(self._writer)
            raise Dropped from None

    async def _close(self) -> None:
        if self._pump is not None and not self._pump.done():
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                async with asyncio.timeout(CLOSE_GRACE_S):
                    await self._pump
        if self._host.stopping:  # nothing more is owed: a client that stopped reading must not hold stop()
            abort(self._writer)
            return
        with contextlib.suppress(Exception):
            self._writer.close()  # a normal end: what was written is still delivered
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_GRACE_S):
                await self._writer.wait_closed()
        abort(self._writer)  # a client that never took the rest: no descriptor left behind
