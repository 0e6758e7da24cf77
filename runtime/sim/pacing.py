"""Real-time pacing: the simulated engine run against the monotonic clock, in ticks.

An asyncio task wakes every ``TICK_S`` and runs as many simulated steps as fit in the
real time that passed, so the CPU sleeps between ticks while the simulated server keeps
its throughput. A tick stops after ``CPU_BUDGET_S`` of CPU: the simulated clock falls
behind rather than hog the machine, and lag beyond ``MAX_LAG_S`` is dropped, not caught
up in a burst. With nothing to run and no load, the task sleeps until a request wakes it
(cheap replicas). It notes when the simulated GPUs computed (their utilisation, measured
as NVML measures it) and wakes the streams after every tick. Everything runs on the
event loop thread, so no locks are needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque

from specctl.runtime.sim.engine import SimEngine
from specctl.runtime.sim.gpus import SimGpus
from specctl.runtime.sim.load import LoadDriver

TICK_S = 0.025
CPU_BUDGET_S = 0.015  # per tick; beyond it the simulated clock falls behind rather than hog the CPU
MAX_LAG_S = 1.0  # lag beyond this is dropped, not caught up, so a stall does not cause a burst
UTIL_WINDOW_S = 1.0  # simulated GPU utilisation is measured over this much recent time, as NVML's is
IDLE_WAIT_S = 1.0  # with nothing to run and no load, the engine loop sleeps this long unless a request comes


class Pacer:
    """The engine loop of one simulated server: its ticks, its lag, its busy spells."""

    def __init__(self, engine: SimEngine, driver: LoadDriver, gpus: SimGpus) -> None:
        self.engine, self.driver, self.gpus = engine, driver, gpus
        self._tick = asyncio.Event()  # set (and replaced) after every engine tick: streams wake on it
        self._wake = asyncio.Event()  # set when a request arrives, so an idle engine loop runs at once
        self._busy: deque[tuple[float, float]] = deque()  # simulated (start, end) spells in which steps ran
        self.lag_dropped_s = 0.0
        self._task: asyncio.Task[None] | None = None
        self._offset = 0.0  # simulated time minus the event loop's clock (set when the engine loop starts)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="specctl-sim-engine")

    async def stop(self) -> None:
        """Stop the engine loop; streams waiting for the next tick see it stopped."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._tick.set()

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def sim_now(self) -> float:
        """The simulated time the event loop's clock stands for now."""
        return asyncio.get_running_loop().time() + self._offset

    def wake(self) -> None:
        """A request arrived: an idle engine loop runs at once."""
        self._wake.set()

    async def next_tick(self) -> None:
        await self._tick.wait()

    def tick_now(self) -> None:
        """Wake whatever waits for the next tick now, not at the next tick."""
        self._tick.set()
        self._tick = asyncio.Event()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        self._offset = self.engine.now - loop.time()  # simulated time = real time + offset
        last = loop.time()
        while True:
            if self._idle():  # nothing to run and no load: sleep until a request comes (cheap replicas)
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), IDLE_WAIT_S)
            else:
                await asyncio.sleep(TICK_S)
            now = loop.time()
            target = now + self._offset
            self._advance(target)
            lag = target - self.engine.now
            if lag > MAX_LAG_S:
                self._offset -= lag
                self.lag_dropped_s += lag
            self.gpus.update(now - last, self.busy_fraction(min(target, self.engine.now)),
                             len(self.engine.running))
            last = now
            self.tick_now()

    def _idle(self) -> bool:
        return not self.engine.has_work and self.driver.target(self.engine.now) == 0

    def _advance(self, target: float) -> None:
        """Run simulated steps up to ``target`` (or the tick's CPU budget), noting when the GPUs computed."""
        engine = self.engine
        deadline = time.perf_counter() + CPU_BUDGET_S
        while engine.now < target:
            self.driver.top_up(engine)
            if not engine.has_work:
                engine.idle_until(target)
                return
            start = engine.now
            engine.step()
            self._note_busy(start, engine.now)
            if time.perf_counter() > deadline:
                return

    def _note_busy(self, start: float, end: float) -> None:
        if self._busy and self._busy[-1][1] >= start:  # back-to-back steps: one busy spell
            self._busy[-1] = (self._busy[-1][0], end)
        else:
            self._busy.append((start, end))

    def busy_fraction(self, end: float) -> float:
        """The share of the last UTIL_WINDOW_S of simulated time (up to ``end``) in which a step ran.

        As NVML's utilisation: the share of a recent period in which a kernel was running. A step
        that outlasts a tick keeps the GPUs busy through it (measuring per tick, a tick in which no
        step finished read 0 % under full load), and a step still running past ``end`` counts up
        to ``end``.
        """
        start = end - UTIL_WINDOW_S
        while self._busy and self._busy[0][1] < start:
            self._busy.popleft()
        covered = sum(max(0.0, min(b, end) - max(a, start)) for a, b in self._busy)
        return min(1.0, covered / UTIL_WINDOW_S)
