"""Whether the draft model stays warm during an off step: ``warm_below``, through SGLang's own switch.

While speculation is off, SGLang's steps-0 step runs the draft model's extend
(keeping its KV cache warm for when speculation resumes) unless
``SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND`` is true, which SGLang 0.5.17
reads through ``os.getenv`` at every steps-0 step. fast_off's per-step hook
calls :func:`choose` before each step: warm when the batch has fewer requests
than the policy setting ``warm_below`` (docs/policy.md says what each costs).
Every tensor-parallel rank sees the same batch size and the same settings at the same step, so all ranks run the draft
extend, with its collectives, or none does.

The same setting covers the draft's prefill of prompts admitted while off
(:func:`cold_prefill`): a cold draft sees nothing while off, a warm one
keeps up with both the prompts and the generated tokens.
"""

from __future__ import annotations

import os
from typing import Any

from specctl.runtime.sglang_plugin.params import active

SKIP_DRAFT_EXTEND_ENV = "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND"

# The value this process last wrote to SKIP_DRAFT_EXTEND_ENV (None: not yet), so
# that a step whose warmth did not change costs no putenv.
_skip_written: str | None = None


def start_cold() -> None:
    """Skip the draft extend until told otherwise; set before SGLang starts its scheduler processes.

    An operator's own value of the variable is kept.
    """
    os.environ.setdefault(SKIP_DRAFT_EXTEND_ENV, "1")


def choose(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Decide this step's warmth from forward_batch_generation's arguments and tell SGLang; True: warm."""
    warm = _warm(args[0] if args else kwargs.get("batch"))
    _write_skip("0" if warm else "1")
    return warm


def cold_prefill(draft_worker: Any, batch: Any) -> bool:
    """Whether this prefill skips the draft model: speculation is off and the draft cold.

    Off: the draft worker's runtime state is SGLang's steps-0 one (what the
    last decode batch chose; prefills do not choose). Cold: ``warm_below``
    at 0, or the running batch (the last decode batch) at or above it.
    Idle batches and anything without a policy run SGLang's own prefill.
    """
    if getattr(draft_worker, "speculative_num_steps", None) != 0:
        return False
    mode = getattr(batch, "forward_mode", None)
    if mode is None or mode.is_idle():
        return False
    params = active()
    if params is None or params.policy.on:
        return False
    warm_below = params.policy.settings.warm_below
    return warm_below <= 0 or params.policy.last_batch >= warm_below


def _warm(batch: Any) -> bool:
    """Whether this step keeps the draft warm: fewer requests than ``warm_below``.

    Cold where nothing says otherwise: no params object yet, the setting at
    0, or no batch to count (an idle batch, or none).
    """
    params = active()
    warm_below = params.policy.settings.warm_below if params is not None else 0
    if warm_below <= 0:
        return False
    mode = getattr(batch, "forward_mode", None)
    seq_lens = getattr(batch, "seq_lens", None)
    if seq_lens is None or (mode is not None and mode.is_idle()):
        return False
    return len(seq_lens) < warm_below


def _write_skip(value: str) -> None:
    """Set SKIP_DRAFT_EXTEND_ENV to ``value``, only when it differs from the last write."""
    global _skip_written
    if value != _skip_written:
        os.environ[SKIP_DRAFT_EXTEND_ENV] = value
        _skip_written = value
