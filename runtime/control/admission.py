"""Who holds the control socket's places: the cap, the reserve kept for a person, and who gives way at the cap.

Kept apart from the server (binding, accepting, serving) because this is the
part that decides, at the cap, whether a person's ``specctl status`` gets in
while the owner's own scripts hold every place. It does no I/O: it keeps the
connections in order of arrival and tells the server where a newcomer goes and
which connection to close for it (:class:`Places`), and keeps the newcomers that
wait for a place in line (:class:`Line`).

A newcomer has ``grace_s`` (100 ms) from its greeting to send its first
request; a person's client sends it as soon as the greeting is read. When a
newcomer finds the places open to scripts full:

1. the oldest connection that has not sent a request in its first ``grace_s``
   gives its place, whatever else holds places (a connection that has asked
   something is never closed for a silent one's sake);
2. else the connection idle longest (a subscriber's stream last), if idle for
   ``evict_idle_s`` or more since its last request;
3. else the newcomer goes into the reserve on probation: its first request must
   be marked ``"interactive"``, and one that sent nothing in its ``grace_s``
   gives its place to the next;
4. else, while some newcomer's ``grace_s`` is still running, the newcomer waits
   for it (:meth:`Places.wait_s`) instead of being refused. The server lets
   newcomers wait in the order they came, so a storm of clients that connect
   and never speak is a queue, not a lottery: a person's command waits its turn
   behind at most one connection per client of the storm, and the storm's
   scripts each get their turn too;
5. else every place is held by a client that is using it: the newcomer is
   refused (``unavailable``, ``"busy": true``).
"""

from __future__ import annotations

import asyncio
import resource
from collections import deque
from typing import Literal, Protocol

FD_HEADROOM = 96  # descriptors left for everything else: journal, NVML, HTTP pool, the server's pipes, ...
EVICT_IDLE_S = 1.0  # at the cap, a connection idle this long (after a request) gives its place to a newcomer
GRACE_S = 0.1  # a newcomer that sent no request this long after its greeting gives its place to the next
# (a person's client sends its request as soon as the greeting is read: well within this, even on a loaded host)
RESERVE_MAX = 16  # places kept for a person's commands, at most (an eighth of the cap below 128)

Place = Literal["open", "reserve"]


def default_reserve(max_clients: int) -> int:
    return 0 if max_clients < 2 else max(1, min(RESERVE_MAX, max_clients // 8))


def fd_cap(headroom: int = FD_HEADROOM) -> int:
    """Control connections this process can hold: the soft RLIMIT_NOFILE less headroom, at least 8.

    From the limit as it is, so the cap holds under `ulimit -n 256` as well as under systemd's 1024.
    """
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 65536
    return max(8, soft - headroom)


class Holder(Protocol):
    """What a connection shows the places: when it last asked something, whether it streams, how to close it."""

    last_active: float

    @property
    def subscribed(self) -> bool: ...

    def evict(self) -> None: ...


class Places:
    """The connections holding places, and the choice of who makes room at the cap.

    ``max_clients`` places in all, the last ``reserve`` of them kept for a person's commands.
    """

    def __init__(self, max_clients: int, reserve: int, evict_idle_s: float = EVICT_IDLE_S,
                 grace_s: float = GRACE_S) -> None:
        self.max_clients = max_clients
        self.reserve = reserve
        self.evict_idle_s = evict_idle_s
        self.grace_s = grace_s
        # each dict in order of arrival (oldest first): all of them; the open places' connections that have not
        # finished a request yet; the reserve's connections on probation; the reserve's that said "interactive"
        self._live: dict[Holder, Place] = {}
        self._silent: dict[Holder, None] = {}
        self._probation: dict[Holder, None] = {}
        self._kept: dict[Holder, None] = {}
        self.evicted = 0  # connections closed to make room, for the benchmark and tests

    def __len__(self) -> int:
        return len(self._live)

    def holders(self) -> list[Holder]:
        return list(self._live)

    def admit(self, holder: Holder, now: float) -> Place | None:
        """Give ``holder`` a place, making room at a cap (rules 1 to 3); None: no place now (see wait_s)."""
        place = self._room(now)
        if place is None:
            return None
        holder.last_active = now  # its grace runs from here (it may have waited for the place)
        self._live[holder] = place
        (self._silent if place == "open" else self._probation)[holder] = None
        return place

    def spoke(self, holder: Holder, interactive: bool) -> bool:
        """``holder`` finished a request; False: it was on probation and the request was not a person's, so it
        gives its place back (the caller answers ``unavailable`` and closes it)."""
        self._silent.pop(holder, None)
        if holder in self._probation:
            del self._probation[holder]
            if not interactive:
                self.leave(holder)
                return False
            self._kept[holder] = None
        return True

    def leave(self, holder: Holder) -> None:
        self._live.pop(holder, None)
        self._silent.pop(holder, None)
        self._probation.pop(holder, None)
        self._kept.pop(holder, None)

    def free_one(self) -> bool:
        """Out of descriptors: close one connection, whatever its age (a silent one first); False if none."""
        victim = next(iter(self._silent), None) or next(iter(self._probation), None)
        if victim is None and self._live:
            victim = min(self._live, key=lambda h: (h.subscribed, h.last_active))
        return victim is not None and self._evict(victim)

    def wait_s(self, now: float) -> float | None:
        """When admit() found no place: how long until a newcomer's grace runs out and it can give way (rule 4);
        None: nobody will give way by waiting, every place is in use (rule 5)."""
        first = [next(iter(pool)) for pool in (self._silent, self._probation) if pool]
        if not first:
            return None
        return max(0.0, min(h.last_active for h in first) + self.grace_s - now)

    def _room(self, now: float) -> Place | None:
        reserved = len(self._probation) + len(self._kept)
        if len(self._live) - reserved < self.max_clients - self.reserve or self._make_open_room(now):
            return "open"
        if reserved < self.reserve:
            return "reserve"
        oldest = next(iter(self._probation), None)  # the reserve gives way only to a newcomer that said nothing
        if oldest is not None and now - oldest.last_active >= self.grace_s:
            return "reserve" if self._evict(oldest) else None
        return None

    def _make_open_room(self, now: float) -> bool:
        silent = next(iter(self._silent), None)
        if silent is not None and now - silent.last_active >= self.grace_s:
            return self._evict(silent)
        idle = [h for h, place in self._live.items() if place == "open" and now - h.last_active >= self.evict_idle_s]
        return bool(idle) and self._evict(min(idle, key=lambda h: (h.subscribed, h.last_active)))

    def _evict(self, victim: Holder) -> bool:
        self.leave(victim)
        victim.evict()
        self.evicted += 1
        return True


class Line:
    """Newcomers waiting for a place, first come first placed (rule 4).

    Places are handed out by whatever frees one (a connection leaving, a newcomer
    speaking, a grace running out), at once and in order, not by the waiting
    tasks themselves: under load a task may wait many turns of the loop to run,
    and a line whose head had to run to take each place would move one place per
    turn. A newcomer joins the line whenever someone is already in it, so a storm
    that reconnects as fast as it is closed cannot overtake a person's command.
    """

    def __init__(self, places: Places) -> None:
        self._places = places
        self._waiting: deque[tuple[Holder, asyncio.Future[bool]]] = deque()
        self._timer: asyncio.TimerHandle | None = None

    async def place(self, holder: Holder) -> bool:
        """A place for ``holder`` (True), or none because every place is in use (False: refuse it)."""
        loop = asyncio.get_running_loop()
        if not self._waiting:
            if self._places.admit(holder, loop.time()) is not None:
                return True
            if self._places.wait_s(loop.time()) is None:
                return False
        placed: asyncio.Future[bool] = loop.create_future()
        self._waiting.append((holder, placed))
        self.moved()
        try:
            return await placed
        except asyncio.CancelledError:
            if placed.done() and not placed.cancelled() and placed.result():
                self._places.leave(holder)  # placed, but nobody will serve it
            raise

    def moved(self) -> None:
        """Something changed (a place given back, a newcomer spoke, a grace ran out): place whom it allows."""
        loop = asyncio.get_running_loop()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._waiting:
            holder, placed = self._waiting[0]
            if placed.done():  # its task was cancelled (the server stops)
                self._waiting.popleft()
                continue
            now = loop.time()
            if self._places.admit(holder, now) is not None:
                self._waiting.popleft()
                placed.set_result(True)
                continue
            wait = self._places.wait_s(now)
            if wait is None:  # nobody left who could give way: this one and the rest are refused
                self._waiting.popleft()
                placed.set_result(False)
                continue
            self._timer = loop.call_later(wait, self.moved)
            return
