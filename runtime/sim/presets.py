"""Presets: a server (model, GPUs, cost parameters) calibrated from measurements.

Each preset keeps the measurements it was calibrated against, so that
``python -m specctl.runtime.sim.calibrate`` can print how close it lands.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..policy import PolicySettings, SpecPolicy
from .model import PerfParams, SimEngine, Workload

DEFAULT_PRESET = "h200-llama8b"


@dataclass(frozen=True)
class GpuSpec:
    """What one simulated GPU reports (NVML-like static facts)."""

    name: str
    mem_total: int  # bytes
    power_limit_w: float
    idle_power_w: float
    max_sm_clock_mhz: float
    idle_sm_clock_mhz: float


@dataclass(frozen=True)
class Preset:
    """A simulated server: cost model, shapes, and the measurements behind them."""

    name: str
    description: str
    model_path: str
    draft_model_path: str
    tp_size: int
    gpu: GpuSpec
    params: PerfParams
    workload: Workload
    accept_len: float  # mean tokens per verify (bonus included) at ``steps``
    steps: int
    max_running: int
    kv_pool_tokens: int
    mem_fraction_static: float
    # series ("nospec", "eagle3") -> concurrency -> measured output tokens/s
    measured: dict[str, dict[int, float]] = field(default_factory=dict)
    source: str = ""

    def engine(self, policy: SpecPolicy | None, seed: int = 0) -> SimEngine:
        """A fresh engine of this preset; ``policy`` None gives a server without speculation."""
        return SimEngine(self.params, self.workload, policy=policy, accept_len=self.accept_len,
                         accept_steps=self.steps, max_running=self.max_running,
                         kv_pool_tokens=self.kv_pool_tokens, seed=seed)

    def default_settings(self) -> PolicySettings:
        """Policy settings with this preset's draft steps."""
        return PolicySettings(steps=self.steps)


_LLAMA8B_BYTES = 8.03e9 * 2  # bf16 parameters
_EAGLE3_HEAD_BYTES = 0.44e9 * 2  # one decoder layer (2h input), fc 3h->h, 32k-vocab head

H200_LLAMA8B = Preset(
    name="h200-llama8b",
    description="one H200, Llama-3.1-8B-Instruct shapes, EAGLE-3 head (steps 3, topk 1), Triton attention",
    model_path="meta-llama/Llama-3.1-8B-Instruct",
    draft_model_path="jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B",
    tp_size=1,
    gpu=GpuSpec("NVIDIA H200", 150_754_820_096, 700.0, 78.0, 1980.0, 345.0),
    params=PerfParams(
        weight_bytes=_LLAMA8B_BYTES,
        flops_per_token=2 * 8.03e9,
        mem_bw=4.0e12,
        compute=600e12,
        decode_kv_s=43e-9,
        verify_kv_s=665e-9,
        step_overhead_s=1.0e-3,
        draft_weight_bytes=_EAGLE3_HEAD_BYTES,
        draft_flops_per_token=2 * 0.44e9,
        draft_kv_s=1.35e-9,
        draft_overhead_s=0.35e-3,
        prefill_overhead_s=3e-3,
        prefill_compute=500e12,
        prefill_attn_s=8.7e-13,
    ),
    workload=Workload(256, 768, 128, 384),
    accept_len=2.8,
    steps=3,
    max_running=256,
    kv_pool_tokens=845_000,
    mem_fraction_static=0.85,
    measured={
        "nospec": {1: 196.1, 4: 744.6, 16: 2250.6, 32: 3629.6, 64: 5546.6, 128: 6820.7, 256: 8877.8},
        "eagle3": {1: 361.8, 4: 1253.6, 16: 2758.7, 32: 3688.1, 64: 4468.3, 128: 4488.0, 256: 4613.6},
    },
    source="../shared/device/README.md anchor table (SGLang 0.5.17, 2026-11-29); nospec = mean of runs 1 and 2",
)

PRESETS: dict[str, Preset] = {p.name: p for p in (H200_LLAMA8B,)}


def get_preset(name: str) -> Preset:
    """The preset called ``name``; the ValueError lists the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r} (known: {', '.join(sorted(PRESETS))})") from None
