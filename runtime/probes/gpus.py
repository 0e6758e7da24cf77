"""Per-GPU stats from NVML (a real server) or from the simulator's /sim/gpus.

Every source yields dicts shaped as in a sample record::

    {"index", "name", "uuid", "state", "error", "util", "mem_used", "mem_total",
     "power_w", "power_limit_w", "temp_c", "sm_clock_mhz", "mem_clock_mhz", "processes"}

``processes`` lists the compute processes on the GPU as nvitop does (``pid``,
``user``, ``mem_used``, ``command``): NVML gives the pid and its memory,
psutil the user and command line, each None where it cannot be read (a
process of another user, or of another PID namespace); ``processes`` itself
is None where NVML cannot list them.

``state`` is "ok", "failed" (the GPU stopped answering; ``error`` says why),
"unsupported" (it answers, but no metric is readable) or "unread" (the
simulator that simulates it is down: nothing is known about the GPU). Anything not
readable is ``None``, never "N/A" and never a stale number.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

import psutil

from specctl.runtime.probes.sglang_client import ServerUnreachable, SGLangClient

GpuDict = dict[str, Any]
METRIC_FIELDS = ("util", "mem_used", "mem_total", "power_w", "power_limit_w", "temp_c", "sm_clock_mhz",
                 "mem_clock_mhz")


class GpuSource(Protocol):
    """What the supervisor polls once per sample interval."""

    async def sample(self) -> list[GpuDict]: ...

    async def aclose(self) -> None: ...


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this machine (no library, no driver, no permission)."""


def _gpu(index: int, name: str | None, uuid: str | None, state: str, error: str | None) -> GpuDict:
    """A GPU dict with every metric unread; callers fill in what they could read."""
    gpu: GpuDict = {"index": index, "name": name, "uuid": uuid, "state": state, "error": error}
    gpu.update(dict.fromkeys(METRIC_FIELDS))
    gpu["processes"] = None
    return gpu


@dataclass
class _Device:
    """What init learned about one GPU, kept so a failed GPU keeps its place and name."""

    index: int
    name: str | None = None
    uuid: str | None = None
    handle: Any = None


class _GpuFailed(Exception):
    """A query failed in a way that means the GPU itself is unusable right now."""


class NvmlSource:
    """GpuSource over NVML, in the manner of nvitop's libnvml.

    NVML is loaded and initialised lazily, under a lock, on the first pass; every
    driver call runs in a worker thread so a slow or wedged driver never blocks
    the event loop. One pass makes one call per field per GPU. A field that is
    not supported is ``None``; a GPU whose queries fail otherwise (lost, unknown
    error) is reported "failed" and retried on the next pass, while the other
    GPUs carry on.
    """

    def __init__(self, nvml: ModuleType | Any = None) -> None:
        self._nvml = nvml
        self._lock = threading.Lock()
        self._devices: list[_Device] | None = None
        self._memory_v2 = True  # until the driver says it lacks nvmlDeviceGetMemoryInfo_v2
        self._owners = ProcessOwners()

    @classmethod
    async def probe(cls, nvml: ModuleType | Any = None) -> NvmlSource:
        """An initialised source, or NvmlUnavailable with a message that says why."""
        source = cls(nvml)
        await asyncio.to_thread(source._with_lock, source._ensure_init)
        return source

    async def sample(self) -> list[GpuDict]:
        """One pass over every GPU known since init; raises NvmlUnavailable if NVML never came up."""
        return await asyncio.to_thread(self._with_lock, self._sample_blocking)

    async def aclose(self) -> None:
        await asyncio.to_thread(self._with_lock, self._shutdown)

    def _with_lock(self, fn: Callable[[], Any]) -> Any:
        """Passes, init and shutdown never overlap: shutdown mid-pass would fail every GPU."""
        with self._lock:
            return fn()

    def _ensure_init(self) -> list[_Device]:
        if self._devices is None:
            nvml = self._nvml = self._nvml or _import_pynvml()
            try:
                nvml.nvmlInit()
            except nvml.NVMLError as exc:
                raise NvmlUnavailable(_init_message(nvml, exc)) from exc
            try:
                count = nvml.nvmlDeviceGetCount()
            except nvml.NVMLError as exc:
                self._release()
                raise NvmlUnavailable(f"NVML could not count the GPUs: {exc}") from exc
            self._devices = [_Device(index) for index in range(count)]
        return self._devices

    def _shutdown(self) -> None:
        if self._devices is not None:
            self._devices = None
            self._release()

    def _release(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass  # the driver is already gone: nothing left to release

    def _sample_blocking(self) -> list[GpuDict]:
        gpus = [self._read(device) for device in self._ensure_init()]
        self._owners.keep_only({p["pid"] for gpu in gpus for p in gpu["processes"] or ()})
        return gpus

    def _read(self, device: _Device) -> GpuDict:
        """One GPU's dict; on failure drop the handle so the next pass asks afresh."""
        try:
            self._identify(device)
            gpu = _gpu(device.index, device.name, device.uuid, "ok", None)
            gpu.update(self._metrics(device.handle))
        except _GpuFailed as exc:
            device.handle = None
            return _gpu(device.index, device.name, device.uuid, "failed", str(exc))
        if all(gpu[name] is None for name in METRIC_FIELDS):
            gpu["state"] = "unsupported"
        return gpu

    def _identify(self, device: _Device) -> None:
        """Handle, name and UUID; the name and UUID are remembered once read."""
        nvml = self._nvml
        if device.handle is None:
            device.handle = self._required(nvml.nvmlDeviceGetHandleByIndex, device.index)
        if device.name is None:
            device.name = self._optional(nvml.nvmlDeviceGetName, device.handle)
        if device.uuid is None:
            device.uuid = self._optional(nvml.nvmlDeviceGetUUID, device.handle)

    def _metrics(self, handle: Any) -> GpuDict:
        nvml, read = self._nvml, self._optional
        util = read(nvml.nvmlDeviceGetUtilizationRates, handle)
        memory = self._memory(handle)
        power_mw = read(nvml.nvmlDeviceGetPowerUsage, handle)
        limit_mw = read(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        temp = read(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
        clock = read(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)
        mem_clock = read(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM)
        running = self._running(handle)
        return {
            "util": None if util is None else float(util.gpu),
            "mem_used": None if memory is None else int(memory.used),
            "mem_total": None if memory is None else int(memory.total),
            "power_w": None if power_mw is None else power_mw / 1000.0,
            "power_limit_w": None if limit_mw is None else limit_mw / 1000.0,
            "temp_c": None if temp is None else float(temp),
            "sm_clock_mhz": None if clock is None else float(clock),
            "mem_clock_mhz": None if mem_clock is None else float(mem_clock),
            "processes": None if running is None else [self._owners.process(p) for p in running],
        }

    def _running(self, handle: Any) -> list[Any] | None:
        """NVML's compute processes; None where it cannot list them (an old driver lacks the call,
        a container hides them): a process list never fails a GPU whose metrics read well."""
        nvml = self._nvml
        try:
            return list(nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        except nvml.NVMLError:
            return None

    def _memory(self, handle: Any) -> Any:
        """Memory as nvidia-smi shows it: v2 leaves driver-reserved memory out of "used".

        On a driver without v2 (one call fails once), v1 from then on.
        """
        nvml = self._nvml
        if self._memory_v2:
            try:
                return self._optional(nvml.nvmlDeviceGetMemoryInfo, handle, nvml.nvmlMemory_v2)
            except _GpuFailed as exc:
                old_driver = (nvml.NVMLError_FunctionNotFound, nvml.NVMLError_ArgumentVersionMismatch)
                if not isinstance(exc.__cause__, old_driver):
                    raise
                self._memory_v2 = False
        return self._optional(nvml.nvmlDeviceGetMemoryInfo, handle)

    def _optional(self, fn: Callable[..., Any], *args: Any) -> Any:
        """None where the GPU cannot report this field; _GpuFailed where the GPU is in trouble."""
        nvml = self._nvml
        try:
            return fn(*args)
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_NoPermission, nvml.NVMLError_NoData):
            return None
        except nvml.NVMLError as exc:
            raise _GpuFailed(f"{fn.__name__}: {exc}") from exc

    def _required(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Without a handle nothing else can be asked, whatever the reason."""
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:
            raise _GpuFailed(f"{fn.__name__}: {exc}") from exc


class ProcessOwners:
    """Who runs a GPU process and what it runs, from psutil, looked up once per pid while it lasts.

    A pid NVML stops listing is forgotten (so a reused pid is looked up afresh); a process
    psutil cannot read (another user's, another PID namespace's, gone) keeps None there.
    """

    def __init__(self) -> None:
        self._known: dict[int, tuple[str | None, str | None]] = {}

    def process(self, info: Any) -> dict[str, Any]:
        """One GPU process dict from NVML's process info (``pid``, ``usedGpuMemory``: None if unknown)."""
        pid = int(info.pid)
        if pid not in self._known:
            self._known[pid] = _owner(pid)
        user, command = self._known[pid]
        used = getattr(info, "usedGpuMemory", None)
        return {"pid": pid, "user": user, "mem_used": None if used is None else int(used), "command": command}

    def keep_only(self, pids: set[int]) -> None:
        for pid in [p for p in self._known if p not in pids]:
            del self._known[pid]


def _owner(pid: int) -> tuple[str | None, str | None]:
    """(user, command line) of a process, None for each that cannot be read."""
    try:
        proc = psutil.Process(pid)
    except (psutil.Error, ValueError):
        return None, None
    user = command = None
    with contextlib.suppress(psutil.Error, KeyError):  # KeyError: a uid without a name here
        user = proc.username()
    with contextlib.suppress(psutil.Error):
        command = " ".join(proc.cmdline()) or proc.name() or None
    return user, command


def _import_pynvml() -> ModuleType:
    """Import late: importing specctl must not need NVML, and the sim backend never does."""
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable("nvidia-ml-py is not installed (pip install nvidia-ml-py)") from exc
    return pynvml


def _init_message(nvml: Any, exc: Exception) -> str:
    if isinstance(exc, nvml.NVMLError_LibraryNotFound):
        return "NVML library not found (libnvidia-ml.so): no NVIDIA driver here; use the sim backend"
    if isinstance(exc, nvml.NVMLError_DriverNotLoaded):
        return "NVIDIA driver not loaded: NVML cannot read the GPUs"
    if isinstance(exc, nvml.NVMLError_NoPermission):
        return "no permission to use NVML (check access to /dev/nvidia*)"
    return f"NVML failed to initialise: {exc}"


class SimGpuSource:
    """GpuSource over the simulator's GET /sim/gpus.

    When the simulator cannot be reached, the GPUs it last reported stay in the
    list as "unread" with the error, their metrics unread: a stale number
    would pass for a live one, and "failed" would blame hardware that only
    the stopped simulator stood for.
    """

    def __init__(self, client: SGLangClient) -> None:
        self._client = client
        self._last: list[GpuDict] = []

    async def sample(self) -> list[GpuDict]:
        try:
            self._last = await self._client.sim_gpus()
        except ServerUnreachable as exc:
            return [_unread(gpu, f"the simulator does not answer: {exc.message}") for gpu in self._last]
        return self._last

    async def aclose(self) -> None:
        """Nothing to release: the client belongs to the caller."""


def _unread(gpu: GpuDict, error: str) -> GpuDict:
    return _gpu(gpu.get("index"), gpu.get("name"), gpu.get("uuid"), "unread", error)


async def open_gpu_source(kind: str, client: SGLangClient | None = None) -> GpuSource:
    """The GPU source of a backend: "nvml" (probed now: a missing driver shows at start) or "sim"."""
    if kind == "nvml":
        return await NvmlSource.probe()
    if kind == "sim":
        if client is None:
            raise ValueError("the sim GPU source needs the simulator's client")
        return SimGpuSource(client)
    raise ValueError(f"unknown GPU source {kind!r}: expected 'nvml' or 'sim'")
