"""``--attach`` given an SGLang router's URL: said once, then left alone.

A router answers ``/health`` but 404s ``/server_info`` and ``/metrics``, so a supervisor polling it
as a server would flap between ready and unreachable every few polls. At the first healthy answer
of an attached URL, one probe tells a router from a server (runtime/fleet/inventory.probe_router);
a router gets one ``attached_router`` event naming its workers and the fleet view that shows them,
and is not polled as a server again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from specctl.runtime.core import records
from specctl.runtime.fleet.inventory import probe_router

PROBE_TIMEOUT_S = 2.0


class RouterCheck:
    """Whether the attached URL is a router: probed once, remembered."""

    def __init__(self) -> None:
        self.checked = False
        self.router = False

    async def found(self, backend: Any, emit: Callable[[records.Record], None]) -> bool:
        """True where the backend's URL is a router (the event said so the first time)."""
        if self.checked or backend.owns_process or not backend.url:
            return self.router
        self.checked = True
        found = await probe_router(backend.url, PROBE_TIMEOUT_S)
        if found is False:
            return False
        self.router = True
        count = len(found) if isinstance(found, list) else None
        workers = f"{count} worker{'s' if count != 1 else ''}" if count is not None else "its workers"
        emit(records.event(
            records.ATTACHED_ROUTER, url=backend.url, workers=count,
            message=(f"{backend.url} is an SGLang router, not a server: it fronts {workers}; "
                     f"see them all with `specctl tui --router {backend.url}` or `specctl fleet status "
                     f"--router {backend.url}`, or attach to one worker's URL")))
        return True
