"""What the simulator's command line decides for one server: ``SimConfig`` and its defaults.

cli.py builds one from the flags; server.py's ``SimServer`` runs on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from specctl.runtime.core.depth_model import DepthCosts
from specctl.runtime.sim.load import LoadSpec
from specctl.runtime.sim.preset_model import Preset

CONTEXT_LEN = 131_072  # Llama 3.1's
DEFAULT_MAX_QUEUED = 4096  # waiting requests before a new one is refused (SGLang's --max-queued-requests)


@dataclass(frozen=True)
class SimConfig:
    """Everything the command line decides."""

    preset: Preset
    gpus: int
    load: LoadSpec
    policy_changes: dict[str, Any]
    seed: int = 0
    startup_delay_s: float = 0.0
    failed_gpus: frozenset[int] = frozenset()
    slow_off: bool = False  # as a server whose fast off is not in place (SGLang's own steps-0 state)
    eager_prefill: bool = False  # as a server launched with --disable-prefill-cuda-graph
    plugin: bool = True  # False: as SGLang without the specctl plugin (static EAGLE-3, no specctl keys)
    speculation: bool = True  # False: as SGLang launched without speculation (sim/nospec.py); plugin False too
    # The depth choice's step-time table: "model" prices depths with the simulator's own model; a DepthCosts
    # (--depth-costs FILE) or None (--no-depth-costs) as a real server launched with or without SPECCTL_DEPTH_COSTS.
    depth_costs: DepthCosts | None | Literal["model"] = "model"
    model_path: str | None = None  # --model-path: the path the server reports (default: the preset's)
    served_model_name: str | None = None  # --served-model-name (default: the model path)
    context_length: int = CONTEXT_LEN
    max_queued_requests: int = DEFAULT_MAX_QUEUED

