"""In-process fan-out of records (samples, events, commands) to any number of readers.

The supervisor publishes; the journal, every control-socket subscriber and an
in-process console each read through their own bounded queue. A slow reader
never slows the supervisor: when its queue is full the oldest record is dropped
and counted, and the reader sees the count on its next record.

The hub also keeps the recent records (:class:`History`: the last minutes,
bounded in bytes), so a console that connects later draws them at once.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

HISTORY_S = 600.0  # a late subscriber is sent the records of the last 10 minutes...
HISTORY_BYTES = 4 * 2**20  # ...or of the last 4 MiB of them (encoded), whichever is less


class History:
    """The most recent records, each kept encoded (compact ASCII JSON, as the wire carries it).

    Bounded twice: records older than ``max_age_s`` (on a monotonic clock, so a wall-clock
    step cannot keep or drop minutes) leave, and the oldest leave while the encoded total is
    over ``max_bytes``. Encoded once when published, so a subscriber costs no encoding and
    the bound is on what is really held.
    """

    def __init__(self, max_age_s: float = HISTORY_S, max_bytes: int = HISTORY_BYTES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_age_s = max_age_s
        self.max_bytes = max_bytes
        self._clock = clock
        self._items: deque[tuple[float, bytes]] = deque()
        self.bytes = 0

    def add(self, record: dict[str, Any]) -> None:
        try:
            data = json.dumps(record, separators=(",", ":"), allow_nan=False).encode("ascii")
        except (TypeError, ValueError):
            return  # not plain JSON: the control server refuses to send it live either
        now = self._clock()
        self._items.append((now, data))
        self.bytes += len(data)
        self._trim(now)

    def _trim(self, now: float) -> None:
        items = self._items
        while items and (self.bytes > self.max_bytes or items[0][0] < now - self.max_age_s):
            self.bytes -= len(items.popleft()[1])

    def encoded(self) -> list[bytes]:
        """The records held now, oldest first, each one JSON object (no newline)."""
        self._trim(self._clock())
        return [data for _, data in self._items]

    def __len__(self) -> int:
        return len(self._items)


class Subscription:
    """One reader's queue; iterate it with ``async for``; ``close()`` when done."""

    def __init__(self, hub: Hub, maxsize: int) -> None:
        self._hub = hub
        self._queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(maxsize)
        self.dropped = 0

    def _offer(self, record: dict[str, Any]) -> None:
        while True:
            try:
                self._queue.put_nowait(record)
                return
            except asyncio.QueueFull:
                self._queue.get_nowait()
                self.dropped += 1

    async def get(self) -> dict[str, Any] | None:
        """The next record, or None once the hub or this subscription is closed."""
        return await self._queue.get()

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[dict[str, Any]]:
        while (record := await self._queue.get()) is not None:
            yield record

    def close(self) -> None:
        self._hub._subs.discard(self)
        self._offer_end()

    def _offer_end(self) -> None:
        try:
            self._queue.put_nowait(None)
        except asyncio.QueueFull:
            self._queue.get_nowait()
            self._queue.put_nowait(None)


class Hub:
    """Publish once, deliver to every current subscription, and keep the recent ones (``history``)."""

    def __init__(self, history: History | None = None) -> None:
        self._subs: set[Subscription] = set()
        self.history = History() if history is None else history

    def subscribe(self, maxsize: int = 1024) -> Subscription:
        sub = Subscription(self, maxsize)
        self._subs.add(sub)
        return sub

    def publish(self, record: dict[str, Any]) -> None:
        self.history.add(record)
        for sub in list(self._subs):
            sub._offer(record)

    def subscribe_with_history(self, maxsize: int = 1024) -> tuple[list[bytes], Subscription]:
        """The records held, and a subscription to every later one: taken at once, so none is
        missed between the two and none comes twice."""
        return self.history.encoded(), self.subscribe(maxsize)

    def close(self) -> None:
        for sub in list(self._subs):
            sub.close()

    @property
    def subscribers(self) -> int:
        return len(self._subs)
