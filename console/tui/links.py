"""One way for the console to reach a supervisor, whatever it is.

The screens never know whether they show a supervisor running in the app's
own event loop (:class:`LocalLink`), one running elsewhere behind the control
socket (:class:`SocketLink`) or a journal played back (:class:`ReplayLink`):
each gives an async stream of records and ``request(cmd, args)``, so every
key, click and palette entry goes through the same control path as the CLI.
"""

from __future__ import annotations

import asyncio
import os
from abc import ABC, abstractmethod
from bisect import bisect_right
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from specctl.runtime.core.errors import UNAVAILABLE, CommandError
from specctl.runtime.core.records import Record, parse
from specctl.runtime.supervisor.journal import JournalIndex

RESET = "reset"  # a record kind that only links make: forget what was shown, a replay seeked back


SERVER_TIMEOUT = 300.0  # as `specctl server`: a restart may wait for the model server to stop
IDEMPOTENT = ("ping", "status", "mode", "set")  # the same answer or state if sent twice: retried once
MIN_SPEED, MAX_SPEED = 0.125, 64.0  # replay speeds the keys step between, and the command line allows

class LinkError(Exception):
    """A refused request; ``code`` is the control protocol's error code."""

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field


class Link(ABC):
    """What the console needs from a supervisor: records in, commands out."""

    #: "local", "socket" or "replay": shown in the banner and used to grey out keys.
    kind: str = ""
    #: Whether commands can reach a supervisor at all (a replay has none).
    can_control: bool = True

    async def open(self) -> None:
        """Start or connect; raise :class:`LinkError` when there is nothing to talk to."""

    @abstractmethod
    def records(self) -> AsyncIterator[dict[str, Any]]:
        """Every record from now on (recent history first, where the source keeps one)."""

    @abstractmethod
    async def request(self, cmd: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run one control command; raise :class:`LinkError` when it is refused."""

    async def close(self) -> None:
        """Stop whatever this link started."""

    @property
    def describe(self) -> str:
        """A few words for the banner: where the data comes from."""
        return self.kind


class LocalLink(Link):
    """A :class:`Supervisor` running in the console's own event loop, started by the link."""

    kind = "local"

    def __init__(self, supervisor: Any) -> None:
        self.supervisor = supervisor
        self._sub: Any = None

    @property
    def describe(self) -> str:
        return "simulator (in-process)" if getattr(self.supervisor, "sim", False) else "in-process supervisor"

    async def open(self) -> None:
        """Subscribe before starting, so not even the first event is missed."""
        self._sub = self.supervisor.hub.subscribe()
        try:
            await self.supervisor.start()
        except Exception as exc:  # the operator's environment (a busy socket, a bad path): say so
            await self.supervisor.stop()
            raise LinkError(UNAVAILABLE, f"cannot start the supervisor: {exc}") from None

    async def records(self) -> AsyncIterator[dict[str, Any]]:
        if self._sub is None:
            return
        async for record in self._sub:
            yield record

    async def request(self, cmd: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            return await self.supervisor.execute(cmd, args or {}, os.getuid())
        except CommandError as exc:
            raise LinkError(exc.code, exc.message, _field(exc.details)) from None

    async def close(self) -> None:
        """Stop the supervisor and so every process it started."""
        if self._sub is not None:
            self._sub.close()
        await self.supervisor.stop()


def _field(details: dict[str, Any]) -> str | None:
    value = details.get("field")
    return None if value is None else str(value)


class SocketLink(Link):
    """A supervisor already running elsewhere, reached through its control socket.

    Two connections: one streams ``subscribe`` records, the other carries
    commands, so a long stream never delays an operator's key press. The
    stream starts with the supervisor's recent history (the last minutes of
    samples and events), so the charts and the log are full at once; after a
    reconnect, only what this console has not shown yet.
    """

    kind = "socket"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._commands: Any = None
        self._stream: Any = None
        self._shown_until: float | None = None  # the newest record's time this console was given

    @property
    def describe(self) -> str:
        return f"socket {self.path}"

    async def open(self) -> None:
        from specctl.runtime.control.client import ControlClient, NoSupervisor

        await self.close()  # a reconnect starts from fresh connections
        self._commands, self._stream = (ControlClient(self.path, interactive=True),
                                        ControlClient(self.path, interactive=True))
        try:
            await self._commands.connect()
            await self._stream.connect()
        except NoSupervisor as exc:
            raise LinkError(UNAVAILABLE, str(exc)) from None

    async def records(self) -> AsyncIterator[dict[str, Any]]:
        from specctl.runtime.control.client import ControlError, ProtocolError

        status = await self.request("status")
        latest = parse(status.get("sample"))  # from another process: typed here, skipped if odd
        try:
            answer = await self._stream.start_subscription(history=True)
            past = answer.get("history")
            past = past if isinstance(past, int) and not isinstance(past, bool) else 0
            if latest and not past:  # a supervisor that keeps no history (an older one): its latest sample
                yield self._shown(latest)
            async for raw in self._stream.records():
                record = parse(raw)
                old, past = past > 0, past - 1
                if record is None or (old and self._shown_until is not None and record["t"] <= self._shown_until):
                    continue  # odd, or shown before the link was lost
                yield self._shown(record)
        except (TimeoutError, ControlError, ProtocolError, OSError, RuntimeError) as exc:
            raise LinkError(UNAVAILABLE, f"lost the supervisor: {exc}") from None
        raise LinkError(UNAVAILABLE, "the supervisor went away")

    def _shown(self, record: Record) -> Record:
        t = float(record["t"])
        self._shown_until = t if self._shown_until is None else max(self._shown_until, t)
        return record

    async def request(self, cmd: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """One command on the command connection; one the supervisor closed (idle, or to make room for
        others) is reconnected first, and a command that may safely run twice is retried once."""
        from specctl.runtime.control.client import ControlError, NoSupervisor, ProtocolError

        if self._commands is None:
            raise LinkError(UNAVAILABLE, "not connected to a supervisor")
        for attempt in (1, 2):
            if self._commands.closed_by_peer:
                await self._reconnect_commands()
            try:
                # a server stop waits for its ranks to exit (30 s grace, more for a restart)
                return await self._commands.request(cmd, args or {}, SERVER_TIMEOUT if cmd == "server" else None)
            except ControlError as exc:
                raise LinkError(exc.code, exc.message, _field(exc.details)) from None
            except NoSupervisor as exc:  # closed under us: a change may not repeat, a question may
                if attempt == 2 or cmd not in IDEMPOTENT:
                    raise LinkError(UNAVAILABLE, f"lost the supervisor: {exc}") from None
                await self._reconnect_commands()
            except (ProtocolError, OSError, RuntimeError) as exc:  # the connection broke under us
                raise LinkError(UNAVAILABLE, f"lost the supervisor: {exc}") from None
        raise AssertionError("unreachable")

    async def _reconnect_commands(self) -> None:
        from specctl.runtime.control.client import ControlClient, NoSupervisor, ProtocolError

        if self._commands is not None:
            await self._commands.close()
        self._commands = ControlClient(self.path, interactive=True)
        try:
            await self._commands.connect()
        except (NoSupervisor, ProtocolError) as exc:
            raise LinkError(UNAVAILABLE, str(exc)) from None

    async def close(self) -> None:
        for client in (self._stream, self._commands):
            if client is not None:
                await client.close()
        self._stream = self._commands = None


# A seek parses and delivers every event and command up to its time, but samples only of this last stretch:
# the console keeps HISTORY_S (600 s) of chart history and shows the latest sample; older samples would be
# parsed to be thrown away (a seek across a 200 MB journal took seconds for them).
SEEK_SAMPLES_S = 900.0


class ReplayLink(Link):
    """A journal played back at ``speed`` times its recorded pace, with pause and seek.

    Times are the records' own ``t``; the player's position advances with the
    loop's monotonic clock only while playing, so a paused replay is frozen.
    """

    kind = "replay"
    can_control = False

    def __init__(self, path: str | os.PathLike[str], speed: float = 1.0, *,
                 start_at: float | None = None, paused: bool = False) -> None:
        self.path = Path(path)
        self.speed = speed
        self.paused = paused
        self._start_at = start_at
        self._index: JournalIndex | None = None
        self._times: Sequence[float] = ()
        self._next = 0  # index of the next record to deliver
        self._position = 0.0  # journal time shown
        self._seek_to: float | None = None
        self._wake = asyncio.Event()
        self.settled = asyncio.Event()  # set whenever a seek has been delivered in full
        self.skipped = 0  # corrupt or misshapen records met while playing (the index leaves out timeless lines)

    @property
    def describe(self) -> str:
        return f"replay {self.path.name}"

    async def open(self) -> None:
        """Index the journal off the event loop, in a thread: where each line starts and its time, not the
        records (a 200 MB journal is a few MB of index); a record is parsed when it is played."""
        self._index = await asyncio.to_thread(JournalIndex, self.path)
        self._times = self._index.times
        self.skipped = self._index.unindexed
        self._position = self.start
        self._seek_to = self.start if self._start_at is None else self._start_at

    @property
    def start(self) -> float:
        return self._times[0] if self._times else 0.0

    @property
    def end(self) -> float:
        return self._times[-1] if self._times else 0.0

    @property
    def position(self) -> float:
        return self._position

    async def request(self, cmd: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        raise LinkError(UNAVAILABLE, f"a replay cannot run {cmd!r}: it only plays a journal back")

    # -- transport controls, called by the app ---------------------------
    def pause(self) -> None:
        self.paused = True
        self._wake.set()

    def resume(self) -> None:
        if self._next >= len(self._times):
            self.seek(self.start)  # at the end: play again from the start
        self.paused = False
        self._wake.set()

    def seek(self, t: float) -> None:
        """Show the state at journal time ``t`` (clamped to the recording)."""
        self._seek_to = min(max(t, self.start), self.end)
        self.settled.clear()
        self._wake.set()

    def set_speed(self, speed: float) -> None:
        self.speed = min(max(speed, MIN_SPEED), MAX_SPEED)
        self._wake.set()

    # -- the stream -------------------------------------------------------
    async def records(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            if self._seek_to is not None:
                async for record in self._deliver_seek():
                    yield record
                continue
            if self.paused or self._next >= len(self._times):
                self.paused = self.paused or self._next >= len(self._times)
                await self._sleep(None)
                continue
            delay = (self._times[self._next] - self._position) / self.speed
            if delay > 0:
                started = asyncio.get_running_loop().time()
                woke = await self._sleep(delay)
                if woke:  # paused, seeked or sped up: account for the time played
                    elapsed = asyncio.get_running_loop().time() - started
                    self._position = min(self._position + elapsed * self.speed, self._times[self._next])
                    continue
            self._position = self._times[self._next]
            self._next += 1
            record = self._record(self._next - 1)
            if record is not None:
                yield record

    async def _deliver_seek(self) -> AsyncIterator[dict[str, Any]]:
        target, self._seek_to = self._seek_to, None
        assert target is not None
        stop = bisect_right(self._times, target)
        if stop < self._next:
            self._next = 0
            yield {"v": 1, "t": target, "kind": RESET}
        assert self._index is not None
        samples, times = self._index.samples, self._times
        shown_from = target - SEEK_SAMPLES_S  # older samples are past every chart's history: not even parsed
        for i in range(self._next, stop):
            if samples[i] and times[i] < shown_from and i < stop - 1:
                continue
            record = self._record(i)
            if record is not None:
                yield record
            if i % 256 == 255:
                await asyncio.sleep(0)  # a long seek must not starve the screen
        self._next, self._position = stop, target
        self.settled.set()

    def _record(self, i: int) -> dict[str, Any] | None:
        assert self._index is not None
        record = self._index.record(i)
        if record is None:
            self.skipped += 1
        return record  # type: ignore[return-value]  # a typed Record is a dict

    async def close(self) -> None:
        if self._index is not None:
            self._index.close()

    async def _sleep(self, delay: float | None) -> bool:
        """Wait ``delay`` seconds (forever if None); True if a control woke us first."""
        self._wake.clear()
        try:  # asyncio.timeout: on 3.11 wait_for can swallow a cancel that meets the wake-up
            async with asyncio.timeout(delay):
                await self._wake.wait()
        except TimeoutError:
            return False
        return True
