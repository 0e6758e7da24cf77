"""The supervisor: runs or attaches to a model server, samples it, journals, and obeys commands.

Plain asyncio, one task polling at a fixed interval (poll_loop.py); each poll
(``Supervisor._tick``) watches the process, reads the server and publishes a
sample. Every record goes to the journal first and then to the hub, so the
journal never drops anything while slow readers of the hub may.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from typing import Any

from specctl.runtime.control.hub import Hub
from specctl.runtime.core import records
from specctl.runtime.probes.procs import ProcSampler, listening_pid
from specctl.runtime.probes.server_info import (
    draft_topk,
    is_simulator,
    prefill_graphs,
    public_spec,
    sglang_version,
    spec_state,
    speculative,
)
from specctl.runtime.probes.sglang_client import ServerBusy, ServerUnreachable, SGLangClient
from specctl.runtime.supervisor.backends import AttachBackend, Backend, BackendError, SimBackend
from specctl.runtime.supervisor.calibrate import CalibrationLoop
from specctl.runtime.supervisor.commands import CommandHandler
from specctl.runtime.supervisor.config import SupervisorConfig
from specctl.runtime.supervisor.desired import Desired
from specctl.runtime.supervisor.edges import Once, ServerNotes, SwitchCursor
from specctl.runtime.supervisor.gpu_feed import GpuFeed
from specctl.runtime.supervisor.health import ServerHealth
from specctl.runtime.supervisor.journal import Journal
from specctl.runtime.supervisor.poll_loop import PollLoop
from specctl.runtime.supervisor.router_check import RouterCheck
from specctl.runtime.supervisor.settings_watch import SettingsWatch
from specctl.runtime.supervisor.threshold_rows import adopt_backend_thresholds, note_row_in_effect

log = logging.getLogger(__name__)
RECENT = 200


class Supervisor:
    """Owns one model server (or watches one) for as long as it runs."""

    def __init__(self, config: SupervisorConfig) -> None:
        self.config = config
        self.hub = Hub()
        self.latest_sample: records.Sample | None = None
        self.recent: deque[records.Record] = deque(maxlen=RECENT)
        self.backend: Backend = make_backend(config)
        self.sim = self.backend.sim
        self.health = ServerHealth(config.restart_backoff)
        self.desired = Desired(config.desired_path, config.settings, self.emit)
        self.commands = CommandHandler(self, self.desired)
        self._busy = asyncio.Lock()  # a poll and a server action never interleave
        self._poller = PollLoop(config.interval, self._tick, self._busy)
        self.calibration = CalibrationLoop(
            self.commands.push_learned, self.commands.push_probe, self.emit,
            owned=lambda: self.commands.operator_keys, epoch=lambda: self.commands.operator_epoch,
            wake=self._poller.wake_in,
            enabled=config.calibrate if config.calibrate is not None else config.backend == "sglang")
        self.commands.calibration = self.calibration
        self._journal: Journal | None = None
        self._control: Any = None
        self._client: SGLangClient | None = None
        self.gpus = GpuFeed(config.gpu_source, self.emit)
        self._procs: ProcSampler | None = None
        self._task: asyncio.Task[None] | None = None
        self._started_at = 0.0
        self._announced = False  # supervisor_start said: only then is supervisor_stop
        # Said once per server start: its thresholds looked up; a slow "off", eager prefills, view only.
        self._thresholds_checked, self._notes = Once(), ServerNotes()
        self._router = RouterCheck()
        self._switches = SwitchCursor()
        self._watch = SettingsWatch(self.desired)  # the server's settings as each poll reads them
        self._shown_state: tuple[str, float] | None = None  # the server's state and since when (unix time)

    # -- what the commands see (port.SupervisorPort) ------------------------
    @property
    def state(self) -> str:
        return self.health.state

    @property
    def restarts(self) -> int:
        return self.health.restarts

    @property
    def owns_server(self) -> bool:
        return self.backend.owns_process

    @property
    def server_client(self) -> SGLangClient | None:
        """The running server's client; None while there is none."""
        return self._client

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
        self.emit(records.event(records.SUPERVISOR_START, backend=self.config.backend, sim=self.sim))
        self.desired.restore()  # before the server: its first push is what was kept
        await self._start_backend()
        self._task = asyncio.create_task(self._poller.run(), name="specctl-supervisor")

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
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.aclose()
        self._client = None
        await self.gpus.aclose()
        if not self._announced or (self._journal is None and not self.hub.subscribers):
            return  # never started, or nobody to tell (or stopped already)
        self.emit(records.event(records.SUPERVISOR_STOP))
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        self.hub.close()

    def emit(self, record: records.Record) -> None:
        """Journal first (never dropped), then everyone listening."""
        gap = self._journal.append(record) if self._journal is not None else None
        if gap is not None:  # written before the record: the console hears of it too
            self.recent.append(gap)
            self.hub.publish(gap)
        if record["kind"] != "sample":
            self.recent.append(record)
        self.hub.publish(record)

    async def execute(self, cmd: str, args: dict[str, Any] | None, uid: int | None) -> dict[str, Any]:
        """Run one control command; raises CommandError. See runtime/supervisor/commands.py."""
        return await self.commands.execute(cmd, args or {}, uid)

    # -- the server process -------------------------------------------------
    async def _start_backend(self) -> None:
        self.health.starting()
        self._switches.start(self.backend.owns_process)
        self._thresholds_checked.reset()
        self._notes.reset()
        loop = asyncio.get_running_loop()
        self._started_at = loop.time()
        try:
            await self.backend.start()
        except BackendError as exc:
            for said in self.health.start_failed(str(exc), exc.retry, loop.time()):
                self.emit(said)
            return
        await self._reset_clients()
        self.emit(records.event(records.SERVER_START, pid=self.backend.pid, url=self.backend.url))
        if self.backend.owns_process and not self.sim:  # a launch: said now, not once its model has loaded
            self._emit_if(self._notes.launched_without_costs(getattr(self.backend, "env", None)))

    async def _reset_clients(self) -> None:
        if self._client is not None:
            await self._client.aclose()
        assert self.backend.url is not None
        self._client = SGLangClient(self.backend.url, timeout=self.config.http_timeout,
                                    admin_key=self.backend.admin_key, api_key=self.backend.api_key)
        if self.gpus.source is None or self.sim:
            await self._reopen_gpus()
        pid = self.backend.pid if self.backend.owns_process else listening_pid(self.backend.url)
        self._procs = ProcSampler(pid) if pid is not None else None

    async def _reopen_gpus(self) -> None:
        assert self.backend.url is not None
        await self.gpus.reopen(self._client, self.backend.url, sim=self.sim, attached=not self.backend.owns_process)

    async def stop_server(self) -> None:
        """Stop the server and keep it stopped until asked to start (a command)."""
        async with self._busy:
            await self.backend.stop()
            self.health.stopped()
            self.emit(records.event(records.SERVER_STOP, pid=self.backend.pid))
        await self.poll_now()

    async def start_server(self) -> None:
        async with self._busy:
            self.health.start_asked()
            await self._start_backend()
        await self.poll_now()

    # -- sampling -----------------------------------------------------------
    async def poll_now(self, timeout: float = 5.0) -> None:
        """Ask for a sample now and wait until one that *began* after this call is published (poll_loop.py)."""
        await self._poller.poll_now(timeout)

    async def _tick(self) -> None:
        await self._watch_process()
        self._publish_log()
        if self.health.down or self._client is None:
            self.emit(await self._sample(None, None, None))
            return
        client = self._client
        metrics = info = None
        try:
            # Once ready, /metrics and /server_info answering (the latter from the scheduler itself) is
            # the health check: SGLang's /health generates a token and answers after 1 s at the soonest,
            # which held every poll of a real server to 1.04 s whatever the interval (seen in its journals).
            healthy = self.state == "ready" or await client.health()
            if healthy and await self._router.found(self.backend, self.emit):
                self.emit(await self._sample(None, None, None))
                return
            await self._note_health(healthy)  # on becoming ready, settings are restored before reading
            if healthy:
                metrics, info = await asyncio.gather(client.metrics(), client.server_info())
                if self._thresholds_checked.first():
                    await self._note_simulator(info)  # first: the GPUs a row is chosen by are the simulator's
                    info = await self._adopt_thresholds(client, info)
        except ServerUnreachable as exc:
            self.health.unanswered(str(exc))
            busy = isinstance(exc, ServerBusy) and not (self._procs is not None and self._procs.frozen())
            await self._note_health(False, busy=busy)
        await self._note_simulator(info)
        self.gpus.say_held(sim=self.sim)
        self._emit_if(self._notes.eager_prefill(info))
        spec = spec_state(info)
        if spec is not None:
            for said in self._switches.new(spec.get("recent_switches") or []):
                self.emit(said)
            self._emit_if(self._notes.off_state(spec))
            self._emit_if(self._notes.depth_costs(spec, self.backend.owns_process))
            if self._watch.restarted_unseen(spec):  # restarted between two polls (elsewhere): it gets the desired state
                self._watch.known = None
                await self.commands.push_desired()
            else:
                self._watch.note_change(spec)
        try:
            await self.calibration.after_poll(spec, time.time())
        except Exception:  # a fault in calibration must not end supervision: it stops learning, the server runs on
            log.exception("calibration failed")
        sample = await self._sample(metrics, info, spec)
        self._emit_if(self._notes.view_only(sample))
        self.emit(sample)

    def _emit_if(self, record: records.Record | None) -> None:
        if record is not None:
            self.emit(record)

    async def _adopt_thresholds(self, client: SGLangClient, info: dict[str, Any]) -> dict[str, Any]:
        """First answer of a server: for one we launched, thresholds for its attention backend, read back;
        for one we attached to, a word where its own launch line runs a row that does not fit it.

        The simulator keeps one known policy (docs/simulator.md, "Presets") but is told why a row stays out where the
        real server would keep the defaults too: the report's operator reads it on their own preset.
        """
        if not self.backend.owns_process:  # someone else's launch line: said if it runs a row that does not fit
            names = await self.gpus.names()
            note_row_in_effect(self, self.desired.values(), info, names)
            return info
        if self.sim and spec_state(info) is None:  # view only: nothing to tune
            return info
        names = await self.gpus.names()
        applied, row = await adopt_backend_thresholds(self, self.desired.values(), info, names, apply=not self.sim)
        if not self.sim:
            self.calibration.row_in_force(row)
        return await client.server_info() if applied else info

    async def _watch_process(self) -> None:
        if not self.backend.owns_process or self.state == "stopped":
            return
        now = asyncio.get_running_loop().time()
        if self.state == "restarting":
            if self.health.restart_due(now):
                await self._start_backend()
            return
        code = self.backend.returncode()
        if code is not None:
            self.emit(records.event(records.SERVER_EXIT, pid=self.backend.pid, returncode=code))
            await self.backend.stop()  # the leader died: stop what is left of its group (ranks)
            self.emit(self.health.exited(code, asyncio.get_running_loop().time()))

    async def _note_health(self, healthy: bool, busy: bool = False) -> None:
        said = self.health.answered(healthy, attached=not self.backend.owns_process, url=self.backend.url, busy=busy)
        if said is None:
            return
        self.emit(said)
        if self.health.state == "ready":  # give a (re)started server what operators asked for
            self._watch.known = None  # its settings are learnt afresh, not taken for a change
            self._watch.last_step = None
            await self.commands.push_desired()

    def expect_settings(self, settings: dict[str, Any]) -> None:
        """Settings the supervisor itself just gave the server: reading them back is no external change."""
        self._watch.expect(settings)

    async def _note_simulator(self, info: dict[str, Any] | None) -> None:
        """An attached server that is specctl's simulator (its /server_info says so): from then on every sample
        says sim, and its GPUs are the simulator's, not this machine's NVML (a simulated number must never pass
        for a measured one)."""
        if self.sim or self.backend.owns_process or not is_simulator(info):  # a launch stays a launch
            return
        self.sim = True
        self.emit(records.event(records.ATTACHED_SIMULATOR, url=self.backend.url))
        if self.config.gpu_source == "auto":
            await self._reopen_gpus()

    def _publish_log(self) -> None:
        lines = self.backend.take_log()
        if lines:
            self.emit(records.event(records.SERVER_LOG, lines=lines))

    async def _sample(self, metrics: Any, info: dict[str, Any] | None,
                      spec: dict[str, Any] | None) -> records.Sample:
        gpus = await self.gpus.sample()
        procs = self._procs.sample() if self._procs is not None else []
        sample = records.sample(self._server_fields(metrics, info), public_spec(spec), gpus, procs,
                                sim=self.sim)
        self.latest_sample = sample
        return sample

    def _server_fields(self, m: Any, info: dict[str, Any] | None) -> records.Server:
        uptime = round(asyncio.get_running_loop().time() - self._started_at, 3)
        return {
            "state": self.state, "url": self.backend.url, "sim": self.sim,
            "running": _field(m, "running"), "queued": _field(m, "queued"),
            "gen_tps": _field(m, "gen_tps"),
            # without speculation SGLang's accept-length gauge reads 0: a placeholder, not an accept length
            "accept_len": None if speculative(info) is False else _field(m, "accept_len"),
            "token_usage": _field(m, "token_usage"),
            "decode_tokens_total": _field(m, "decode_tokens_total"),
            "model": (info or {}).get("model_path"), "tp": (info or {}).get("tp_size"),
            "prefill_graphs": prefill_graphs(info), "speculative": speculative(info), "topk": draft_topk(info),
            "version": sglang_version(info),
            # a stopped or exited server has no process: its old pid could be anyone's by now
            "pid": None if self.state in ("stopped", "restarting") else self.backend.pid,
            "restarts": self.health.restarts, "error": self.health.error,
            "since": self._state_since(), "last_step_t": self._watch.last_step_t,
            "progress": self._progress(uptime),
            "uptime_s": uptime,
        }

    def _state_since(self) -> float:
        """Unix time the server's state began (as this supervisor saw it)."""
        if self._shown_state is None or self._shown_state[0] != self.state:
            self._shown_state = (self.state, time.time())
        return round(self._shown_state[1], 3)

    def _progress(self, uptime: float) -> records.Progress | None:
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
        return AttachBackend(config.url, config.admin_key)
    if config.backend == "sglang":
        from specctl.runtime.supervisor.sglang_backend import SGLangBackend

        return SGLangBackend(config)
    return SimBackend(config.sim_preset, config.sim_gpus, config.sim_load, config.settings,
                      extra=config.sim_args, port=config.port, depth_costs=config.depth_costs)
