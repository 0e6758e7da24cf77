"""Simulated GPUs: NVML-shaped readings that follow the engine's load.

The readings are deterministic functions of the load (busy fraction and batch
size) plus a first-order thermal lag, so the console shows believable motion
without any randomness. A GPU marked failed keeps its index and name and
reports every other field as None, as a lost GPU does through NVML.

Each GPU runs one process, as under SGLang with tensor parallelism: the
scheduler of its TP rank, holding the weights, the KV cache and the CUDA
context. The one process that simulates them all is named as its owner (its
pid and user), so what the console lists is a process that really exists.
"""

from __future__ import annotations

import math
import os
import pwd
import uuid
from typing import Any

from specctl.runtime.sim.preset_model import GpuSpec

AMBIENT_C = 30.0
C_PER_WATT = 0.062  # steady-state heating: 700 W sits near 73 C
THERMAL_TAU_S = 20.0
CONTEXT_BYTES = 600 * 2**20  # CUDA context and allocator slack outside the static pool
ACTIVATION_BYTES_PER_REQ = 2 * 2**20
FAULT_MESSAGE = "simulated fault (--fail-gpu)"
MAX_GPUS = 16
DRIVER_BYTES = 256 * 2**20  # used memory no process owns (the driver's own), as nvidia-smi shows it
#: Memory clocks as NVML reports them at full speed (HBM keeps its clock when idle); None: not modelled.
MEM_CLOCK_MHZ = {"NVIDIA H200": 3201.0, "NVIDIA H100 80GB HBM3": 2619.0}


class SimGpus:
    """A set of identical simulated GPUs sharing one tensor-parallel load."""

    def __init__(self, spec: GpuSpec, count: int, *, mem_fraction_static: float, seed: int = 0,
                 preset: str = "", failed: frozenset[int] = frozenset()) -> None:
        if not 1 <= count <= MAX_GPUS:
            raise ValueError(f"gpus must be between 1 and {MAX_GPUS}, got {count}")
        self.spec = spec
        self.count = count
        self.failed = frozenset[int]()
        self.fail(failed)
        self._static = int(spec.mem_total * mem_fraction_static)
        self._uuids = [f"GPU-{uuid.uuid5(uuid.NAMESPACE_OID, f'specctl-sim/{preset}/{seed}/{i}')}"
                       for i in range(count)]
        self._util = 0.0
        self._batch = 0
        self._temp = AMBIENT_C + C_PER_WATT * spec.idle_power_w
        self._pid = os.getpid()
        self._user = _user()

    def fail(self, failed: frozenset[int]) -> None:
        """Mark exactly these GPUs failed (the rest answer again): a fault an operator can watch come and go."""
        bad = sorted(i for i in failed if not 0 <= i < self.count)
        if bad:
            raise ValueError(f"fail-gpu index {bad[0]} out of range (0..{self.count - 1})")
        self.failed = frozenset(failed)

    def update(self, dt: float, busy_fraction: float, batch_size: int) -> None:
        """Advance the readings by ``dt`` seconds during which the GPUs were busy that fraction of the time."""
        self._util = min(1.0, max(0.0, busy_fraction))
        self._batch = batch_size
        target = AMBIENT_C + C_PER_WATT * self._power()
        self._temp += (target - self._temp) * (1.0 - math.exp(-max(dt, 0.0) / THERMAL_TAU_S))

    def _power(self) -> float:
        """Power grows with utilisation, and with batch size (more of the chip switching)."""
        s = self.spec
        intensity = 0.55 + 0.45 * min(1.0, self._batch / 128)
        return s.idle_power_w + (s.power_limit_w - s.idle_power_w) * self._util * intensity

    def snapshot(self) -> list[dict[str, Any]]:
        """One dict per GPU, in the shape of a journal sample's ``gpus``."""
        return [self._failed(i) if i in self.failed else self._reading(i) for i in range(self.count)]

    def _reading(self, index: int) -> dict[str, Any]:
        s = self.spec
        busy = self._util > 0.01
        used = self._static + CONTEXT_BYTES + ACTIVATION_BYTES_PER_REQ * self._batch
        return {
            "index": index, "name": s.name, "uuid": self._uuids[index], "state": "ok", "error": None,
            "util": round(self._util * 100.0, 1),
            "mem_used": used,
            "mem_total": s.mem_total,
            "power_w": round(self._power(), 1),
            "power_limit_w": s.power_limit_w,
            "temp_c": round(self._temp, 1),
            "sm_clock_mhz": s.max_sm_clock_mhz if busy else s.idle_sm_clock_mhz,
            "mem_clock_mhz": MEM_CLOCK_MHZ.get(s.name),
            "processes": [{"pid": self._pid, "user": self._user, "mem_used": used - DRIVER_BYTES,
                           "command": f"sglang::scheduler_TP{index}"}],
        }

    def _failed(self, index: int) -> dict[str, Any]:
        return {
            "index": index, "name": self.spec.name, "uuid": None, "state": "failed", "error": FAULT_MESSAGE,
            "util": None, "mem_used": None, "mem_total": None, "power_w": None, "power_limit_w": None,
            "temp_c": None, "sm_clock_mhz": None, "mem_clock_mhz": None, "processes": None,
        }


def _user() -> str | None:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a uid with no name here (a container's)
        return None
