"""The samples' GPUs: which source feeds them, why there is none, and which GPU failed or recovered.

One concern apart from the supervisor's loop (lifecycle.py): the source is the simulator's GPUs,
this machine's NVML, or none, chosen again whenever the server behind it may have changed (a
restart, an attached server found to be specctl's simulator).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from specctl.runtime.core import records
from specctl.runtime.probes.gpus import GpuSource, NvmlUnavailable, open_gpu_source
from specctl.runtime.probes.hosts import is_local_url
from specctl.runtime.probes.sglang_client import SGLangClient
from specctl.runtime.supervisor.edges import GpuFaults

log = logging.getLogger(__name__)
REMOTE_GPUS = ("GPU panels need a supervisor on that host: {url} is not on this machine, whose GPUs are not "
               "the server's (run `specctl run --headless --attach` there and `specctl tui --connect` through "
               "`ssh -L`, docs/deployment.md)")


class GpuFeed:
    """The GPUs each sample carries, and the journal's word on them (``gpu_unavailable``, failures)."""

    def __init__(self, setting: str, emit: Callable[[records.Record], None]) -> None:
        self._setting = setting  # the config's gpu_source: auto, nvml, sim or none
        self._emit = emit
        self.source: GpuSource | None = None
        self._faults = GpuFaults()
        # why there are no GPUs, held until the first poll says whose they would be (hold_or_say)
        self._unsaid: str | None = None

    async def reopen(self, client: SGLangClient | None, url: str, *, sim: bool, attached: bool) -> None:
        """Close the source and open the one for this server; without one the samples say so and go on."""
        await self.aclose()
        self._faults.forget()  # another source's GPU 0 is not the one that failed
        kind = self._setting
        if kind == "none":
            return
        if kind == "auto":
            kind = "sim" if sim else "nvml"
        if kind == "nvml" and attached and not await asyncio.to_thread(is_local_url, url):
            self._hold_or_say(REMOTE_GPUS.format(url=url), sim=sim, attached=attached)  # not the server's GPUs
            return
        try:
            self.source = await open_gpu_source(kind, client)
        except NvmlUnavailable as exc:
            self._hold_or_say(str(exc), sim=sim, attached=attached)

    def _hold_or_say(self, error: str, *, sim: bool, attached: bool) -> None:
        """Journal why the samples have no GPUs; for an attached server, once the first poll says what it is.

        Until then an attached server may be specctl's simulator, which brings its own GPUs: this
        machine's missing NVML (or the server's other host) says nothing about them, and a
        ``gpu_unavailable`` just before ``attached_simulator`` only misleads. Any other server's first
        poll, answered or not, says the held reason (:meth:`say_held`), so a real failure still shows.
        """
        if self._setting == "auto" and attached and not sim:
            self._unsaid = error
        else:
            self._emit(records.event(records.GPU_UNAVAILABLE, error=error))

    def say_held(self, *, sim: bool) -> None:
        """After a poll's simulator check: the held reason, unless the server turned out to be the simulator."""
        error, self._unsaid = self._unsaid, None
        if error is not None and not sim:
            self._emit(records.event(records.GPU_UNAVAILABLE, error=error))

    async def names(self) -> list[str | None]:
        """The server's GPUs as NVML names them ([] where they cannot be read)."""
        if self.source is None:
            return []
        try:
            return [gpu.get("name") for gpu in await self.source.sample()]
        except Exception:  # a source that fails now fails the next sample too, and says so there
            log.debug("GPU names unreadable", exc_info=True)
            return []

    async def sample(self) -> list[records.Gpu]:
        """This sample's GPUs; a GPU that failed or recovered since the last is journalled as it happens."""
        gpus: list[records.Gpu] = []
        if self.source is not None:
            try:
                gpus = await self.source.sample()
            except Exception as exc:  # the source reports per-GPU failures itself; this is a last guard
                log.warning("GPU sampling failed: %s", exc)
        for said in self._faults.changes(gpus):  # samples say it only in passing
            self._emit(said)
        return gpus

    async def aclose(self) -> None:
        source, self.source = self.source, None
        if source is not None:
            with contextlib.suppress(Exception):
                await source.aclose()
