"""In-process fan-out of records (samples, events, commands) to any number of readers.

The supervisor publishes; the journal, every control-socket subscriber and an
in-process console each read through their own bounded queue. A slow reader
never slows the supervisor: when its queue is full the oldest record is dropped
and counted, and the reader sees the count on its next record.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any


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
    """Publish once, deliver to every current subscription."""

    def __init__(self) -> None:
        self._subs: set[Subscription] = set()

    def subscribe(self, maxsize: int = 1024) -> Subscription:
        sub = Subscription(self, maxsize)
        self._subs.add(sub)
        return sub

    def publish(self, record: dict[str, Any]) -> None:
        for sub in list(self._subs):
            sub._offer(record)

    def close(self) -> None:
        for sub in list(self._subs):
            sub.close()

    @property
    def subscribers(self) -> int:
        return len(self._subs)
