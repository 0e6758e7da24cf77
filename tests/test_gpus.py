"""GPU sources: NvmlSource over scenario fixtures (gpustat's way), SimGpuSource over loopback HTTP.

The fake NVML module below is the only fake: it raises pynvml's real
exception classes and uses its real constants, so the error handling under
test is exactly the one a driver would exercise.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import psutil
import pynvml
import pytest
from aiohttp import web

from specctl.runtime.probes.gpus import NvmlSource, NvmlUnavailable, SimGpuSource, open_gpu_source
from specctl.runtime.probes.sglang_client import SGLangClient

H200_MEM = 150_754_820_096  # as a real H200 reports it
RESERVED = 644_939_776  # what the driver keeps on an idle H200 (v1 "used"; nvidia-smi shows 0 MiB)
METRICS = ("util", "mem_used", "mem_total", "power_w", "power_limit_w", "temp_c", "sm_clock_mhz", "mem_clock_mhz")
UNREAD = dict.fromkeys((*METRICS, "processes"))  # a GPU nothing could be read from
NO_SUCH_PID = 2**22 + 7  # above Linux's largest pid_max: no process has it


class FakeGpu:
    """One GPU's answers; ``errors`` maps an NVML function name to the exception it raises."""

    def __init__(self, index: int, **errors: type[pynvml.NVMLError]) -> None:
        self.index = index
        self.name = "NVIDIA H200"
        self.uuid = f"GPU-{index:08d}-0000-0000-0000-000000000000"
        self.errors = errors
        self.lost = False
        # a real process holds 119 GB of it (psutil reads its user and command line): pid 1, whose command
        # line holds still, where a test worker's own title changes with each test under xdist
        self.processes = [SimpleNamespace(pid=HOLDER_PID, usedGpuMemory=119_000_000_000)]


class FakeNvml:
    """A stand-in for the pynvml module: same function names, real errors and constants."""

    def __init__(self, gpus: list[FakeGpu], init_error: pynvml.NVMLError | None = None) -> None:
        for name in dir(pynvml):
            if name.startswith(("NVMLError", "NVML_")) or name == "nvmlMemory_v2":
                setattr(self, name, getattr(pynvml, name))
        self.gpus = gpus
        self.has_memory_v2 = True
        self.init_error = init_error
        self.count_error: pynvml.NVMLError | None = None
        self.initialised = False
        self.shutdowns = 0
        self.calls: Counter[str] = Counter()
        self.threads: set[int] = set()

    def _enter(self, fn: str) -> None:
        self.calls[fn] += 1
        self.threads.add(threading.get_ident())
        if not self.initialised:
            raise pynvml.NVMLError_Uninitialized()

    def _gpu(self, fn: str, handle: FakeGpu) -> FakeGpu:
        self._enter(fn)
        if handle.lost:
            raise pynvml.NVMLError_GpuIsLost()
        if fn in handle.errors:
            raise handle.errors[fn]()
        return handle

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise self.init_error
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialised = False
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        if self.count_error is not None:
            raise self.count_error
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self._gpu("nvmlDeviceGetHandleByIndex", self.gpus[index])

    def nvmlDeviceGetName(self, handle: FakeGpu) -> str:
        return self._gpu("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        return self._gpu("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> SimpleNamespace:
        self._gpu("nvmlDeviceGetUtilizationRates", handle)
        return SimpleNamespace(gpu=87, memory=40)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu, version: int | None = None) -> SimpleNamespace:
        """v1 counts the driver's reservation as used; v2 (as nvidia-smi shows) does not."""
        self._gpu("nvmlDeviceGetMemoryInfo", handle)
        free = H200_MEM - 120_000_000_000 - RESERVED
        if version is None:
            return SimpleNamespace(total=H200_MEM, used=120_000_000_000 + RESERVED, free=free)
        assert version == pynvml.nvmlMemory_v2
        if not self.has_memory_v2:
            raise pynvml.NVMLError_FunctionNotFound()
        return SimpleNamespace(version=version, total=H200_MEM, reserved=RESERVED, used=120_000_000_000, free=free)

    def nvmlDeviceGetPowerUsage(self, handle: FakeGpu) -> int:
        self._gpu("nvmlDeviceGetPowerUsage", handle)
        return 612_300  # milliwatts

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeGpu) -> int:
        self._gpu("nvmlDeviceGetEnforcedPowerLimit", handle)
        return 700_000

    def nvmlDeviceGetTemperature(self, handle: FakeGpu, sensor: int) -> int:
        self._gpu("nvmlDeviceGetTemperature", handle)
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return 61

    def nvmlDeviceGetClockInfo(self, handle: FakeGpu, clock: int) -> int:
        self._gpu("nvmlDeviceGetClockInfo", handle)
        assert clock in (pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM)
        return 1980 if clock == pynvml.NVML_CLOCK_SM else 3201

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeGpu) -> list[SimpleNamespace]:
        return list(self._gpu("nvmlDeviceGetComputeRunningProcesses", handle).processes)


METRIC_CALLS = (
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetComputeRunningProcesses",
)
CALLS_PER_PASS = {fn: 2 if fn == "nvmlDeviceGetClockInfo" else 1 for fn in METRIC_CALLS}  # SM and memory clocks
HOLDER_PID = 1
ME = psutil.Process(HOLDER_PID)
MY_PROCESS = {"pid": HOLDER_PID, "user": ME.username(), "mem_used": 119_000_000_000, "command": " ".join(ME.cmdline())}


def healthy(index: int) -> dict[str, Any]:
    return {
        "index": index,
        "name": "NVIDIA H200",
        "uuid": f"GPU-{index:08d}-0000-0000-0000-000000000000",
        "state": "ok",
        "error": None,
        "util": 87.0,
        "mem_used": 120_000_000_000,
        "mem_total": H200_MEM,
        "power_w": 612.3,
        "power_limit_w": 700.0,
        "temp_c": 61.0,
        "sm_clock_mhz": 1980.0,
        "mem_clock_mhz": 3201.0,
        "processes": [MY_PROCESS],
    }


async def test_eight_healthy_h200s() -> None:
    nvml = FakeNvml([FakeGpu(i) for i in range(8)])
    source = NvmlSource(nvml)
    assert await source.sample() == [healthy(i) for i in range(8)]
    await source.aclose()


async def test_nvml_is_initialised_lazily_and_shut_down_on_close() -> None:
    nvml = FakeNvml([FakeGpu(0)])
    source = NvmlSource(nvml)
    assert nvml.calls["nvmlInit"] == 0
    await source.sample()
    await source.sample()
    assert nvml.calls["nvmlInit"] == 1
    await source.aclose()
    assert nvml.shutdowns == 1 and not nvml.initialised


async def test_close_before_any_pass_touches_nothing() -> None:
    nvml = FakeNvml([FakeGpu(0)])
    await NvmlSource(nvml).aclose()
    assert sum(nvml.calls.values()) == 0


async def test_one_driver_call_per_field_per_pass() -> None:
    nvml = FakeNvml([FakeGpu(i) for i in range(8)])
    source = NvmlSource(nvml)
    for _ in range(3):
        await source.sample()
    assert {fn: nvml.calls[fn] for fn in METRIC_CALLS} == {fn: n * 3 * 8 for fn, n in CALLS_PER_PASS.items()}
    # Identity is read once, at the first pass, and remembered.
    assert nvml.calls["nvmlDeviceGetName"] == 8
    assert nvml.calls["nvmlDeviceGetHandleByIndex"] == 8
    await source.aclose()


async def test_old_driver_without_memory_v2_falls_back_once() -> None:
    nvml = FakeNvml([FakeGpu(i) for i in range(2)])
    nvml.has_memory_v2 = False
    source = NvmlSource(nvml)
    first = await source.sample()
    second = await source.sample()
    await source.aclose()
    v1 = {"mem_used": 120_000_000_000 + RESERVED}
    assert first == second == [healthy(0) | v1, healthy(1) | v1]
    assert nvml.calls["nvmlDeviceGetMemoryInfo"] == 1 + 2 + 2  # v2 asked once, then v1 per GPU per pass


async def test_driver_calls_run_off_the_event_loop_thread() -> None:
    nvml = FakeNvml([FakeGpu(0)])
    source = NvmlSource(nvml)
    await source.sample()
    await source.aclose()
    assert threading.get_ident() not in nvml.threads


async def test_mixed_supported_and_unsupported_fields() -> None:
    nvml = FakeNvml(
        [
            FakeGpu(0, nvmlDeviceGetPowerUsage=pynvml.NVMLError_NotSupported),
            FakeGpu(1, nvmlDeviceGetTemperature=pynvml.NVMLError_NoPermission),
            FakeGpu(2, **dict.fromkeys(METRIC_CALLS, pynvml.NVMLError_NotSupported)),
            FakeGpu(3, nvmlDeviceGetUUID=pynvml.NVMLError_NotSupported),
        ]
    )
    source = NvmlSource(nvml)
    gpus = await source.sample()
    await source.aclose()
    assert gpus[0] == healthy(0) | {"power_w": None}
    assert gpus[1] == healthy(1) | {"temp_c": None}
    assert gpus[2] == healthy(2) | {"state": "unsupported"} | UNREAD
    assert gpus[3] == healthy(3) | {"uuid": None}
    assert "N/A" not in repr(gpus)


async def test_gpu_lost_mid_run_fails_alone_then_recovers() -> None:
    nvml = FakeNvml([FakeGpu(i) for i in range(8)])
    source = NvmlSource(nvml)
    await source.sample()

    nvml.gpus[3].lost = True
    gpus = await source.sample()
    assert [g["state"] for g in gpus] == ["ok"] * 3 + ["failed"] + ["ok"] * 4
    lost = {"state": "failed", "error": "nvmlDeviceGetUtilizationRates: GPU is lost"}
    assert gpus[3] == healthy(3) | lost | UNREAD
    assert gpus[4] == healthy(4)

    # Still lost: the handle is asked for afresh and fails; the GPU keeps its place and name.
    gpus = await source.sample()
    assert gpus[3]["name"] == "NVIDIA H200"
    assert gpus[3]["error"] == "nvmlDeviceGetHandleByIndex: GPU is lost"

    nvml.gpus[3].lost = False
    assert await source.sample() == [healthy(i) for i in range(8)]
    await source.aclose()


async def test_unknown_error_fails_the_gpu_and_stops_asking_it() -> None:
    nvml = FakeNvml([FakeGpu(0, nvmlDeviceGetMemoryInfo=pynvml.NVMLError_Unknown), FakeGpu(1)])
    source = NvmlSource(nvml)
    gpus = await source.sample()
    await source.aclose()
    assert gpus[0]["state"] == "failed"
    assert gpus[0]["error"] == "nvmlDeviceGetMemoryInfo: Unknown Error"
    assert gpus[0]["util"] is None  # read before the failure, but not reported as if the GPU were fine
    assert nvml.calls["nvmlDeviceGetPowerUsage"] == 1  # only GPU 1 was asked
    assert gpus[1] == healthy(1)


async def test_gpu_lost_from_the_start_is_listed_without_a_name() -> None:
    nvml = FakeNvml([FakeGpu(0), FakeGpu(1)])
    nvml.gpus[1].lost = True
    source = NvmlSource(nvml)
    gpus = await source.sample()
    lost = {"name": None, "uuid": None, "state": "failed", "error": "nvmlDeviceGetHandleByIndex: GPU is lost"}
    assert gpus[1] == healthy(1) | lost | UNREAD
    nvml.gpus[1].lost = False
    assert (await source.sample())[1] == healthy(1)
    await source.aclose()


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (pynvml.NVMLError_LibraryNotFound(), "NVML library not found"),
        (pynvml.NVMLError_DriverNotLoaded(), "NVIDIA driver not loaded"),
        (pynvml.NVMLError_NoPermission(), "no permission to use NVML"),
        (pynvml.NVMLError_Unknown(), "NVML failed to initialise: Unknown Error"),
    ],
)
async def test_nvml_missing_is_reported_by_probe(error: pynvml.NVMLError, message: str) -> None:
    with pytest.raises(NvmlUnavailable, match=message):
        await NvmlSource.probe(FakeNvml([], init_error=error))


async def test_nvml_missing_is_reported_by_a_lazy_sample_too() -> None:
    source = NvmlSource(FakeNvml([], init_error=pynvml.NVMLError_LibraryNotFound()))
    with pytest.raises(NvmlUnavailable, match="use the sim backend"):
        await source.sample()
    await source.aclose()


async def test_count_failure_releases_nvml() -> None:
    nvml = FakeNvml([FakeGpu(0)])
    nvml.count_error = pynvml.NVMLError_Unknown()
    with pytest.raises(NvmlUnavailable, match="could not count the GPUs"):
        await NvmlSource.probe(nvml)
    assert nvml.shutdowns == 1


async def test_real_nvml_works_or_says_why() -> None:
    """On this machine's own NVML (none on a CPU box, real GPUs on a GPU box)."""
    try:
        source = await open_gpu_source("nvml")
    except NvmlUnavailable as exc:
        assert str(exc)
        return
    gpus = await source.sample()
    await source.aclose()
    assert all(g["state"] in {"ok", "failed", "unsupported", "unread"} for g in gpus)
    assert all(g["mem_total"] is None or g["mem_total"] > 0 for g in gpus)


async def test_open_gpu_source_rejects_unknown_kinds() -> None:
    with pytest.raises(ValueError, match="unknown GPU source 'cuda'"):
        await open_gpu_source("cuda")
    with pytest.raises(ValueError, match="needs the simulator's client"):
        await open_gpu_source("sim")


# --- SimGpuSource over a real loopback HTTP server -------------------------------------------

SIM_GPUS = [healthy(0) | {"uuid": "GPU-sim-0"}, healthy(1) | {"uuid": "GPU-sim-1"}]


@pytest.fixture
async def sim() -> AsyncIterator[tuple[SGLangClient, dict[str, int]]]:
    """A /sim/gpus endpoint whose HTTP status the test sets; yields a client of it."""
    control = {"status": 200}

    async def sim_gpus(request: web.Request) -> web.Response:
        if control["status"] != 200:
            return web.Response(status=control["status"])
        return web.json_response(SIM_GPUS)

    app = web.Application()
    app.router.add_get("/sim/gpus", sim_gpus)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    client = SGLangClient(f"http://{host}:{port}", timeout=1.0)
    yield client, control
    await client.aclose()
    await runner.cleanup()


async def test_sim_source_reads_the_simulator(sim: tuple[SGLangClient, dict[str, int]]) -> None:
    client, _ = sim
    source = await open_gpu_source("sim", client)
    assert isinstance(source, SimGpuSource)
    assert await source.sample() == SIM_GPUS
    await source.aclose()


async def test_sim_source_never_read_gives_empty_list(sim: tuple[SGLangClient, dict[str, int]]) -> None:
    client, control = sim
    control["status"] = 503
    assert await SimGpuSource(client).sample() == []


async def test_sim_source_keeps_last_gpus_as_unread_then_recovers(sim: tuple[SGLangClient, dict[str, int]]) -> None:
    client, control = sim
    source = SimGpuSource(client)
    await source.sample()
    control["status"] = 503
    gpus = await source.sample()
    assert [(g["index"], g["name"], g["uuid"], g["state"]) for g in gpus] == [
        (0, "NVIDIA H200", "GPU-sim-0", "unread"),
        (1, "NVIDIA H200", "GPU-sim-1", "unread"),
    ]  # not "failed": the simulator is down, not the GPUs it stands for
    assert gpus[0]["error"] == f"the simulator does not answer: HTTP 503 from {client.base_url}/sim/gpus"
    assert all(g[field] is None for g in gpus for field in METRICS)  # no stale numbers
    control["status"] = 200
    assert await source.sample() == SIM_GPUS


async def test_gpu_processes_name_their_user_and_command_or_say_none() -> None:
    """As nvitop lists them: NVML's pid and memory, psutil's user and command; what cannot be read is None.

    GPU 1 runs a process this machine cannot see (another PID namespace) whose memory NVML does not
    report; GPU 2 runs none; GPU 3's driver cannot list processes at all, and its metrics still read."""
    nvml = FakeNvml([FakeGpu(0), FakeGpu(1), FakeGpu(2),
                     FakeGpu(3, nvmlDeviceGetComputeRunningProcesses=pynvml.NVMLError_FunctionNotFound)])
    nvml.gpus[1].processes.append(SimpleNamespace(pid=NO_SUCH_PID, usedGpuMemory=None))
    nvml.gpus[2].processes = []
    source = NvmlSource(nvml)
    gpus = await source.sample()
    await source.aclose()
    assert gpus[0]["processes"] == [MY_PROCESS]
    assert gpus[1]["processes"] == [MY_PROCESS, {"pid": NO_SUCH_PID, "user": None, "mem_used": None, "command": None}]
    assert gpus[2]["processes"] == []
    assert gpus[3] == healthy(3) | {"processes": None}  # the GPU is fine: only its process list is unknown
