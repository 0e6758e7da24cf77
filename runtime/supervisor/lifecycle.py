"""The supervisor: runs or attaches to a model server, samples it, journals, and obeys commands.

Plain asyncio, one task polling at a fixed interval (the next poll is
scheduled when the last one finished, so slow polls never pile up). Every
record goes to the journal first and then to the hub, so the journal never
drops anything while slow readers of the hub may.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import Any

from specctl.runtime.core import records
from specctl.runtime.supervisor.backends import AttachBackend, Backend, BackendError, SimBackend
from specctl.runtime.supervisor.commands import CommandHandler
from specctl.runtime.supervisor.config import SupervisorConfig
from specctl.runtime.probes.gpus import GpuSource, NvmlUnavailable, open_gpu_source
from specctl.runtime.control.hub import Hub
from specctl.runtime.supervisor.journal import Journal
from specctl.runtime.probes.procs import ProcSampler, listening_pid
from specctl.runtime.probes.server_info import EAGER_PREFILL_WHY, is_simulator, prefill_graphs, public_spec, spec_state
from specctl.runtime.probes.sglang_client import SGLangClient, ServerUnreachable

log = logging.getLogger(__name__)
RECENT = 200


class Supervisor:
    """Owns one model server (or watches one) for as long as it runs."""

    def __init__(self, config: SupervisorConfig) -> None:
        self.config = config
        self.hub = Hub()
        self.latest_sample: dict[str, Any] | None = None
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT)
        self.backend: Backend = make_backend(config)
        self.sim = self.backend.sim
        self.state = "starting"
        self.restarts = 0
        self.commands = CommandHandler(self)
        self._journal: Journal | None = None
        self._control: Any = None
        self._client: SGLangClient | None = None
        self._gpus: GpuSource | None = None
        self._procs: ProcSampler | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._busy = asyncio.Lock()  # a poll and a server action never interleave
        self._polled = asyncio.Event()
        self._polls_started = self._polls_done = 0
        self._attempt = 0
        self._restart_at: float | None = None
        self._last_seq: int | None = None
        self._error: str | None = None
        self._started_at = 0.0
        self._thresholds_checked = False
        self._slow_off_told = False  # the slow_off_state event is said once per server start
        self._eager_prefill_told = False  # so is eager_prefill
        self._announced = False  # supervisor_start said: only then is supervisor_stop
        self._failed_gpus: set[Any] = set()  # indexes said failed: gpu_failed once, then gpu_recovered

    # -- lifecycle ----------------------------------------------------------
    async def start(self) -> None:
        """Claim the socket, open the journal, start the server, begin sampling.

        The socket first: a supervisor refused because another one listens there
        must not write into the journal that one is keeping.
        """
        if self.config.socket_path is not None:
            from specctl.runtime.control.server import ControlServer

            self._control = ControlServer(self, self.config.socket_path)
            await self._control.start()
        if self.config.journal_path is not None:
            try:
                self._journal = Journal(self.config.journal_path,
                                        max_bytes=int(self.config.journal_max_mb * 1024 * 1024))
            except OSError:
                await self.stop()
                raise
        self._announced = True
        self.emit(records.event("supervisor_start", backend=self.config.backend, sim=self.sim))
        await self._start_backend()
        self._task = asyncio.create_task(self._loop(), name="specctl-supervisor")

    async def stop(self) -> None:
        """Stop sampling, the socket and every process we started; idempotent."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._control is not None:
            await self._control.stop()
            self._control = None
        await self.backend.stop()
        for closer in (self._client, self._gpus):
            if closer is not None:
                with contextlib.suppress(Exception):
                    await closer.aclose()
        self._client = self._gpus = None
        if not self._announced or (self._journal is None and not self.hub.subscribers):
            return  # never started, or nobody to tell (or stopped already)
        self.emit(records.event("supervisor_stop"))
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        self.hub.close()

    def emit(self, record: dict[str, Any]) -> None:
        """Journal first (never dropped), then everyone listening."""
        gap = self._journal.append(record) if self._journal is not None else None
        if gap is not None:  # written before the record: the console hears of it too
            self.recent.append(gap)
            self.hub.publish(gap)
        if record["kind"] != "sample":
            self.recent.append(record)
        self.hub.publish(record)

    async def execute(self, cmd: str, args: dict[str, Any] | None, uid: int | None) -> dict[str, Any]:
        """Run one control command; raises CommandError. See runtime/commands.py."""
        return await self.commands.execute(cmd, args or {}, uid)

    # -- the server process -------------------------------------------------
    async def _start_backend(self) -> None:
        self.state = "starting"
        self._error = None
        self._last_seq = 0 if self.backend.owns_process else None
        self._thresholds_checked = False
        self._slow_off_told = self._eager_prefill_told = False
        loop = asyncio.get_running_loop()
        self._started_at = loop.time()
        try:
            await self.backend.start()
        except BackendError as exc:
            self._error = str(exc)
            self.emit(records.event("server_start_failed", error=str(exc), retry=exc.retry))
            if exc.retry:
                self._schedule_restart(None)
            else:  # stopped until an operator fixes it and says `specctl server start`
                self.state, self._restart_at = "stopped", None
            return
        await self._reset_clients()
        self.emit(records.event("server_start", pid=self.backend.pid, url=self.backend.url))

    async def _reset_clients(self) -> None:
        if self._client is not None:
            await self._client.aclose()
        assert self.backend.url is not None
        self._client = SGLangClient(self.backend.url, timeout=self.config.http_timeout)
        if self._gpus is None or self.sim:
            if self._gpus is not None:
                await self._gpus.aclose()
            self._gpus = await self._open_gpus()
        pid = self.backend.pid if self.backend.owns_process else listening_pid(self.backend.url)
        self._procs = ProcSampler(pid) if pid is not None else None

    async def _open_gpus(self) -> GpuSource | None:
        """The simulator's GPUs or NVML; without a driver the samples say so (no GPUs) and we go on."""
        self._failed_gpus.clear()  # another source's GPU 0 is not the one that failed
        kind = self.config.gpu_source
        if kind == "none":
            return None
        if kind == "auto":
            kind = "sim" if self.sim else "nvml"
        try:
            return await open_gpu_source(kind, self._client)
        except NvmlUnavailable as exc:
            self.emit(records.event("gpu_unavailable", error=str(exc)))
            return None

    def _schedule_restart(self, returncode: int | None) -> None:
        self._attempt += 1
        first, cap = self.config.restart_backoff
        delay = min(cap, first * 2 ** (self._attempt - 1))
        self.state = "restarting"
        self._restart_at = asyncio.get_running_loop().time() + delay
        self.restarts += 1
        self.emit(records.event("server_restart", attempt=self._attempt, delay_s=delay,
                                returncode=returncode))

    async def stop_server(self) -> None:
        """Stop the server and keep it stopped until asked to start (a command)."""
        async with self._busy:
            await self.backend.stop()
            self.state = "stopped"
            self._restart_at = None
            self.emit(records.event("server_stop", pid=self.backend.pid))
        await self.poll_now()

    async def start_server(self) -> None:
        async with self._busy:
            self._attempt = 0
            self._restart_at = None
            await self._start_backend()
        await self.poll_now()

    # -- sampling -----------------------------------------------------------
    async def _loop(self) -> None:
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
            wait = max(0.0, self.config.interval - (loop.time() - began))
            # asyncio.timeout, not wait_for: on 3.11 wait_for loses a cancel that lands
            # as the wake-up completes, and stop() would then wait for this task forever
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()
            self._wake.clear()

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

    async def _tick(self) -> None:
        await self._watch_process()
        self._publish_log()
        if self.state in ("stopped", "restarting") or self._client is None:
            self.emit(await self._sample(None, None, None))
            return
        client = self._client
        metrics = info = None
        try:
            # Once ready, /metrics and /server_info answering (the latter from the scheduler itself) is
            # the health check: SGLang's /health generates a token and answers after 1 s at the soonest,
            # which held every poll of a real server to 1.04 s whatever the interval (seen in its journals).
            healthy = self.state == "ready" or await client.health()
            await self._note_health(healthy)  # on becoming ready, settings are restored before reading
            if healthy:
                metrics, info = await asyncio.gather(client.metrics(), client.server_info())
                if not self._thresholds_checked:
                    info = await self._adopt_thresholds(client, info)
        except ServerUnreachable as exc:
            self._error = str(exc)
            await self._note_health(False)
        await self._note_simulator(info)
        self._note_eager_prefill(info)
        spec = spec_state(info)
        if spec is not None:
            self._emit_switches(spec)
            self._note_off_state(spec)
        self.emit(await self._sample(metrics, info, spec))

    async def _adopt_thresholds(self, client: SGLangClient, info: dict[str, Any]) -> dict[str, Any]:
        """First answer of a server we launched: thresholds for its attention backend, read back."""
        self._thresholds_checked = True
        if not self.backend.owns_process or self.sim:
            return info
        if await self.commands.adopt_backend_thresholds(info):
            return await client.server_info()
        return info

    async def _watch_process(self) -> None:
        if not self.backend.owns_process or self.state == "stopped":
            return
        if self.state == "restarting":
            if self._restart_at is not None and asyncio.get_running_loop().time() >= self._restart_at:
                await self._start_backend()
            return
        code = self.backend.returncode()
        if code is not None:
            self.emit(records.event("server_exit", pid=self.backend.pid, returncode=code))
            await self.backend.stop()  # the leader died: stop what is left of its group (ranks)
            self._schedule_restart(code)

    async def _note_health(self, healthy: bool) -> None:
        if healthy and self.state != "ready":
            self.state = "ready"
            self._error = None
            self._attempt = 0
            self.emit(records.event("server_ready", url=self.backend.url))
            await self.commands.push_desired()
        elif not healthy and (self.state == "ready" or (self.state == "starting" and not self.backend.owns_process)):
            # a server we launched may take minutes to start; one we attached to should answer now
            self.state = "unreachable"
            self.emit(records.event("server_unreachable", error=self._error))

    def _emit_switches(self, spec: dict[str, Any]) -> None:
        switches = spec.get("recent_switches") or []
        newest = max((s.get("seq", 0) for s in switches), default=0)
        if self._last_seq is None or newest < self._last_seq:  # attached late, or the server restarted
            self._last_seq = newest
            return
        for sw in switches:
            if sw.get("seq", 0) > self._last_seq:
                self.emit(records.event("spec_switch", on=sw.get("on"), reason=sw.get("reason"),
                                        batch_size=sw.get("batch_size"), step=sw.get("step"),
                                        **{"from": sw.get("from"), "to": sw.get("to")}))
        self._last_seq = newest

    def _note_off_state(self, spec: dict[str, Any]) -> None:
        """Say once per server when its "off" is SGLang's slow steps-0 state rather than fast off."""
        off = spec.get("off_state")
        if not isinstance(off, dict) or off.get("fast") is not False or self._slow_off_told:
            return
        self._slow_off_told = True
        self.emit(records.event("slow_off_state", why=off.get("why_not")))

    async def _note_simulator(self, info: dict[str, Any] | None) -> None:
        """An attached server that is specctl's simulator (its /server_info says so): from then on every sample
        says sim, and its GPUs are the simulator's, not this machine's NVML (a simulated number must never pass
        for a measured one)."""
        if self.sim or not is_simulator(info):
            return
        self.sim = True
        self.emit(records.event("attached_simulator", url=self.backend.url))
        if self.config.gpu_source == "auto":
            if self._gpus is not None:
                await self._gpus.aclose()
            self._gpus = await self._open_gpus()

    def _note_eager_prefill(self, info: dict[str, Any] | None) -> None:
        """Say once per server when it runs its prefills eagerly: there the off state costs more.

        Why: eager prefills put the scheduler's CPU on the critical path while prompts arrive, and the
        speculative server's ops run slower there (docs/fast-off.md, "Prefill CUDA graphs").
        """
        if self._eager_prefill_told or prefill_graphs(info) is not False:
            return
        self._eager_prefill_told = True
        self.emit(records.event("eager_prefill", why=EAGER_PREFILL_WHY))

    def _note_gpu_faults(self, gpus: list[dict[str, Any]]) -> None:
        """Journal a GPU's failure when it begins and its recovery when it ends: samples say so only in passing.

        "unread" (the simulator is down) is neither: nothing is known about the GPU.
        """
        for gpu in gpus:
            index, state = gpu.get("index"), gpu.get("state")
            if state == "failed" and index not in self._failed_gpus:
                self._failed_gpus.add(index)
                self.emit(records.event("gpu_failed", index=index, error=gpu.get("error")))
            elif state == "ok" and index in self._failed_gpus:
                self._failed_gpus.discard(index)
                self.emit(records.event("gpu_recovered", index=index))

    def _publish_log(self) -> None:
        lines = self.backend.take_log()
        if lines:
            self.emit(records.event("server_log", lines=lines))

    async def _sample(self, metrics: Any, info: dict[str, Any] | None,
                      spec: dict[str, Any] | None) -> dict[str, Any]:
        gpus: list[dict[str, Any]] = []
        if self._gpus is not None:
            try:
                gpus = await self._gpus.sample()
            except Exception as exc:  # the source reports per-GPU failures itself; this is a last guard
                log.warning("GPU sampling failed: %s", exc)
        self._note_gpu_faults(gpus)
        procs = self._procs.sample() if self._procs is not None else []
        sample = records.sample(self._server_fields(metrics, info), public_spec(spec), gpus, procs,
                                sim=self.sim)
        self.latest_sample = sample
        return sample

    def _server_fields(self, m: Any, info: dict[str, Any] | None) -> dict[str, Any]:
        uptime = round(asyncio.get_running_loop().time() - self._started_at, 3)
        return {
            "state": self.state, "url": self.backend.url, "sim": self.sim,
            "running": _field(m, "running"), "queued": _field(m, "queued"),
            "gen_tps": _field(m, "gen_tps"), "accept_len": _field(m, "accept_len"),
            "token_usage": _field(m, "token_usage"),
            "decode_tokens_total": _field(m, "decode_tokens_total"),
            "model": (info or {}).get("model_path"), "tp": (info or {}).get("tp_size"),
            "prefill_graphs": prefill_graphs(info),
            # a stopped or exited server has no process: its old pid could be anyone's by now
            "pid": None if self.state in ("stopped", "restarting") else self.backend.pid,
            "restarts": self.restarts, "error": self._error,
            "progress": self._progress(uptime),
            "uptime_s": uptime,
        }

    def _progress(self, uptime: float) -> dict[str, Any] | None:
        """Start-up phase from the server's log, while it starts."""
        progress = self.backend.progress
        if self.state != "starting" or progress is None:
            return None
        return {**progress, "elapsed_s": uptime}


def _field(metrics: Any, name: str) -> float | None:
    return None if metrics is None else getattr(metrics, name, None)


def make_backend(config: SupervisorConfig) -> Backend:
    if config.backend == "attach":
        assert config.url is not None
        return AttachBackend(config.url)
    if config.backend == "sglang":
        from specctl.runtime.supervisor.sglang_backend import SGLangBackend

        return SGLangBackend(config)
    return SimBackend(config.sim_preset, config.sim_gpus, config.sim_load, config.settings,
                      extra=config.sim_args, port=config.port)
