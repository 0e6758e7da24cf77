"""The supervisor's poll: one task at a fixed interval, woken early when a caller needs a fresh sample.

The next poll is scheduled when the last one finished, so slow polls never pile up. A command
that just changed the server asks :meth:`PollLoop.poll_now` for a sample that began after the
change; calibration asks :meth:`PollLoop.wake_in` to be polled when a probe ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class PollLoop:
    """Calls ``tick`` under ``busy`` every ``interval`` seconds, or sooner when woken."""

    def __init__(self, interval: float, tick: Callable[[], Awaitable[None]], busy: asyncio.Lock) -> None:
        self.interval = interval
        self._tick = tick
        self._busy = busy  # a poll and a server action never interleave
        self._wake = asyncio.Event()
        self._polled = asyncio.Event()
        self._polls_started = self._polls_done = 0

    async def run(self) -> None:
        """Poll until cancelled (the supervisor's stop cancels the task that runs this)."""
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            self._polls_started += 1
            try:
                async with self._busy:
                    await self._tick()
            except Exception:  # a bug in one poll must not end supervision
                log.exception("poll failed")
            self._polls_done = self._polls_started
            polled, self._polled = self._polled, asyncio.Event()
            polled.set()
            wait = max(0.0, self.interval - (loop.time() - began))
            # asyncio.timeout, not wait_for: on 3.11 wait_for loses a cancel that lands
            # as the wake-up completes, and the supervisor's stop() would then wait for this task forever
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()
            self._wake.clear()

    def wake_in(self, seconds: float) -> None:
        """Poll again ``seconds`` from now at the latest (a calibration probe ends then)."""
        if seconds < self.interval:
            asyncio.get_running_loop().call_later(max(0.0, seconds), self._wake.set)

    async def poll_now(self, timeout: float = 5.0) -> None:
        """Ask for a sample now and wait until one that *began* after this call is published.

        A poll already in flight may have read the server before a change that
        the caller just made, so it does not count.
        """
        wanted = self._polls_started + 1
        self._wake.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._polls_done < wanted and (left := deadline - loop.time()) > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self._polled.wait()
            self._wake.set()  # the in-flight poll cleared the wake-up meant for the next one

