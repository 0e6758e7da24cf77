"""Say-it-once detectors: they turn what every sample repeats into one event at the edge.

A sample says a GPU is failed, or that the server's "off" is slow, every half
second; the journal and the event log want it said once when it begins (and,
for a GPU, once when it ends). Each detector remembers what it has said; the
supervisor resets the per-server ones when a server starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from specctl.runtime.core import records


class Once:
    """True the first time it is asked after a reset, False after that."""

    def __init__(self) -> None:
        self._said = False

    def first(self) -> bool:
        said, self._said = self._said, True
        return not said

    def reset(self) -> None:
        self._said = False


class GpuFaults:
    """``gpu_failed`` when a GPU's state becomes ``failed``, ``gpu_recovered`` when it reads ``ok`` again.

    "unread" (the simulator is down) is neither: nothing is known about the GPU.
    """

    def __init__(self) -> None:
        self._failed: set[Any] = set()  # indexes said failed

    def changes(self, gpus: Iterable[records.Gpu]) -> list[records.Event]:
        said: list[records.Event] = []
        for gpu in gpus:
            index, state = gpu.get("index"), gpu.get("state")
            if state == "failed" and index not in self._failed:
                self._failed.add(index)
                said.append(records.event(records.GPU_FAILED, index=index, error=gpu.get("error")))
            elif state == "ok" and index in self._failed:
                self._failed.discard(index)
                said.append(records.event(records.GPU_RECOVERED, index=index))
        return said

    def forget(self) -> None:
        """Another GPU source's GPU 0 is not the one that failed."""
        self._failed.clear()


class SwitchCursor:
    """The policy's switches (each with a rising ``seq``) that have not been said yet.

    The server keeps its recent switches; a supervisor that attached late (or a
    server that restarted, its ``seq`` back at 0) starts from the newest, so old
    switches are not told as new.
    """

    def __init__(self) -> None:
        self._last: int | None = None

    def start(self, owns_process: bool) -> None:
        """A server we launched has made no switch yet; one we attached to may have made many."""
        self._last = 0 if owns_process else None

    def new(self, switches: list[dict[str, Any]]) -> list[records.Event]:
        newest = max((s.get("seq", 0) for s in switches), default=0)
        if self._last is None or newest < self._last:  # attached late, or the server restarted
            self._last = newest
            return []
        last, self._last = self._last, newest
        # "from" and "to" are the draft depths either side of the switch (0 = off)
        return [records.event(records.SPEC_SWITCH, on=sw.get("on"), reason=sw.get("reason"),
                              batch_size=sw.get("batch_size"), step=sw.get("step"),
                              **{"from": sw.get("from"), "to": sw.get("to")})
                for sw in switches if sw.get("seq", 0) > last]
