"""Who holds the control socket's places: the cap, the reserve kept for a person, and who gives way at the cap.

Kept apart from the server (binding, accepting, serving) because this is the
part that decides, at the cap, whether a person's ``specctl status`` gets in
while the owner's own scripts hold every place. It does no I/O: it keeps the
connections in order of arrival and tells the server where a newcomer goes and
which connection to close for it.

Three rules, in order, when a newcomer finds the places open to scripts full:

1. A connection that has not finished a request yet (silent since its greeting)
   gives way first, the oldest first, whatever its age. A newcomer is never
   refused while such a connection holds a place, so a storm of clients that
   connect and never speak is a queue, not a lottery: every newcomer is greeted
   and keeps its place until as many newcomers came after it as there are
   places, which is plenty of time to send a request. A connection that has
   spoken is never closed for a silent one's sake.
2. Else the connection idle longest (a subscriber's stream last), if idle for
   ``evict_idle_s`` or more.
3. Else the newcomer goes into the reserve on probation (its first request must
   be marked ``"interactive"``); a reserve full of newcomers that said nothing
   for ``probation_grace_s`` gives the oldest place to the next one.
"""

from __future__ import annotations

import resource
from typing import Literal, Protocol

FD_HEADROOM = 96  # descriptors left for everything else: journal, NVML, HTTP pool, the server's pipes, ...
EVICT_IDLE_S = 1.0  # at the cap, a connection idle this long (after a request) gives its place to a newcomer
PROBATION_GRACE_S = 0.1  # a newcomer in the reserve that sent nothing for this long gives its place to the next
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
                 probation_grace_s: float = PROBATION_GRACE_S) -> None:
        self.max_clients = max_clients
        self.reserve = reserve
        self.evict_idle_s = evict_idle_s
        self.probation_grace_s = probation_grace_s
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

    def on_probation(self, holder: Holder) -> bool:
        return holder in self._probation

    def admit(self, holder: Holder, now: float) -> Place | None:
        """Give ``holder`` a place, making room at a cap (see the module's rules); None: every place is busy."""
        place = self._room(now)
        if place is None:
            return None
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

    def _room(self, now: float) -> Place | None:
        reserved = len(self._probation) + len(self._kept)
        if len(self._live) - reserved < self.max_clients - self.reserve or self._make_open_room(now):
            return "open"
        if reserved < self.reserve:
            return "reserve"
        oldest = next(iter(self._probation), None)  # the reserve gives way only to a newcomer that said nothing
        if oldest is not None and now - oldest.last_active >= self.probation_grace_s:
            return "reserve" if self._evict(oldest) else None
        return None

    def _make_open_room(self, now: float) -> bool:
        silent = next(iter(self._silent), None)
        if silent is not None:
            return self._evict(silent)
        idle = [h for h, place in self._live.items() if place == "open" and now - h.last_active >= self.evict_idle_s]
        return bool(idle) and self._evict(min(idle, key=lambda h: (h.subscribed, h.last_active)))

    def _evict(self, victim: Holder) -> bool:
        self.leave(victim)
        victim.evict()
        self.evicted += 1
        return True
