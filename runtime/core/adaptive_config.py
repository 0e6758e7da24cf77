"""The adaptive-speculation JSON config that specctl hands to SGLang.

SGLang builds one runtime state (attention backends and CUDA graphs) per step
count listed under ``candidate_steps`` in this file, at start-up, and sizes
its draft-token buffers from the largest one. By default specctl uses two
step counts, ``0`` (speculation off) and ``N`` (on), so every batch-size
bucket lists exactly ``[0, N]``; with the ``candidates`` setting (e.g. 0,1,2,3)
every bucket lists exactly those. Either way every state exists with CUDA
graphs at every batch size, whatever the policy or a forced mode picks later.

The file is read by SGLang's ``_load_adaptive_config`` (keys that are decimal
batch sizes; other keys are knobs of SGLang's own EMA policy, which specctl
replaces and therefore leaves out).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from specctl.runtime.core.atomic_file import write_atomic
from specctl.runtime.core.json_file import read_json

# Bucket keys: SGLang routes a batch to the largest key <= its (padded) size,
# so "1" alone would cover everything; one key per power of two up to the
# largest CUDA-graph batch size keeps the file readable against SGLang's own
# default config and its logs.
DEFAULT_MAX_BATCH = 512


def bucket_sizes(max_batch: int = DEFAULT_MAX_BATCH) -> list[int]:
    """Powers of two from 1 up to the first one >= ``max_batch`` (covers every CUDA-graph size)."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be at least 1, got {max_batch}")
    sizes = [1]
    while sizes[-1] < max_batch:
        sizes.append(sizes[-1] * 2)
    return sizes


def build_config(steps: int, buckets: Iterable[int] | None = None,
                 candidates: Iterable[int] | None = None) -> dict[str, Any]:
    """The config dict: ``{"1": {"candidate_steps": [0, steps]}, "2": ..., ...}``.

    ``candidates`` (the policy setting of that name; empty or None: ``[0, steps]``)
    must hold 0 and ``steps``: SGLang refuses a --speculative-num-steps outside them.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    depths = sorted(set(candidates or ())) or [0, steps]
    if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in depths):
        raise ValueError(f"candidates must be non-negative integers, got {depths}")
    if 0 not in depths or steps not in depths:
        raise ValueError(f"candidates must hold 0 and steps ({steps}), got {depths}")
    keys = sorted(set(bucket_sizes() if buckets is None else buckets))
    if not keys or keys[0] != 1:
        raise ValueError(f"buckets must start at batch size 1, got {keys}")
    return {str(bs): {"candidate_steps": list(depths)} for bs in keys}


def write_config(path: str | os.PathLike[str], steps: int, buckets: Iterable[int] | None = None,
                 candidates: Iterable[int] | None = None, mode: int | None = None) -> Path:
    """Write the config atomically (a half-written file would fail SGLang's start-up); ``mode``: its
    permissions, set on the descriptor before the rename (write_atomic), never by path afterwards."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    return write_atomic(target, json.dumps(build_config(steps, buckets, candidates)) + "\n", mode=mode)


def candidate_steps(config: dict[str, Any]) -> list[int]:
    """Union of the buckets' candidate steps, read the way SGLang reads them."""
    steps: set[int] = set()
    for key, entry in config.items():
        if not key.isdigit():
            continue
        values = entry.get("candidate_steps") if isinstance(entry, dict) else None
        if not isinstance(values, list) or not values:
            raise ValueError(f"bucket {key}: candidate_steps must be a non-empty list, got {values!r}")
        for value in values:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"bucket {key}: candidate_steps must be non-negative integers, got {values!r}")
        steps.update(values)
    if not steps:
        raise ValueError("the adaptive config has no batch-size bucket")
    return sorted(steps)


MAX_CONFIG_BYTES = 1 << 20  # a bucket per CUDA-graph batch size is a few KiB


def read_candidate_steps(path: str | os.PathLike[str]) -> list[int]:
    """The candidate steps of a config file (read as json_file reads: regular, capped, one-line faults)."""
    return candidate_steps(read_json(path, MAX_CONFIG_BYTES, "adaptive config"))
