"""What a simulator preset is: a server's GPU, cost model and shapes, and the measurements behind them.

The presets themselves (and their sources) are in runtime/sim/presets.py; this is their type, apart so that
file holds only the servers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specctl.runtime.core.policy import SpecPolicy
from specctl.runtime.core.settings import PolicySettings
from specctl.runtime.sim.costs import PerfParams, Workload
from specctl.runtime.sim.engine import SimEngine


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
class Check:
    """Measurements a preset is compared with but not fitted to: another run of the same server.

    Kept so that calibrate shows how a preset holds up on data it was not
    tuned on, without letting one noisy run pull the fit.
    """

    label: str
    # series ("nospec", "eagle3") -> concurrency -> measured output tokens/s
    measured: dict[str, dict[int, float]]
    source: str


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
    attention_backend: str  # as SGLang's /server_info names it; the supervisor picks thresholds by it
    # series ("nospec", "eagle3") -> concurrency -> measured output tokens/s
    measured: dict[str, dict[int, float]] = field(default_factory=dict)
    source: str = ""
    # how the measurement was windowed (simulated seconds), so calibration compares like with like
    warmup_s: float = 6.0
    window_s: float = 18.0
    # every fitted point lands within this fraction of its measurement (tests hold it)
    tolerance: float = 0.10
    checks: tuple[Check, ...] = ()
    topk: int = 1  # --speculative-eagle-topk: 1 drafts a chain, more a tree
    draft_tokens: int | None = None  # --speculative-num-draft-tokens for a tree (topk 1: steps + 1)

    @property
    def calibrated(self) -> bool:
        """Whether a GPU measurement backs this preset; one without (``measured`` empty) is a prediction."""
        return bool(self.measured)

    def engine(self, policy: SpecPolicy | None, seed: int = 0, fast_off: bool = True,
               step_noise: float = 0.0) -> SimEngine:
        """A fresh engine of this preset; ``policy`` None gives a server without speculation."""
        return SimEngine(self.params, self.workload, policy=policy, accept_len=self.accept_len,
                         accept_steps=self.steps, max_running=self.max_running,
                         kv_pool_tokens=self.kv_pool_tokens, seed=seed, fast_off=fast_off,
                         topk=self.topk, draft_tokens=self.draft_tokens, step_noise=step_noise)

    def default_settings(self) -> PolicySettings:
        """Policy settings with this preset's draft steps."""
        return PolicySettings(steps=self.steps)
