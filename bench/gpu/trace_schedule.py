"""The changing-load trace's schedule, shared by the simulator's and the GPU's runs of it.

Why a module of its own: bench/policy_envelope.py runs the trace offline in the
simulator and bench/gpu/trace_load.py runs it against a live server; issue 22's
goal compares the two, so both must draw the same phases from the same seed.
Standard library only, so that it runs on the GPU machine as it is.
"""

from __future__ import annotations

import random

TRACE_S = 600.0  # the simulator's trace length in seconds
TRACE_LEVELS = (1, 4, 8, 16, 24, 32, 48, 64, 128, 256)  # the concurrencies a phase draws from
PHASE_S = (10.0, 20.0)  # a phase's length is drawn uniformly from this range


def trace_levels(seed: int, total_s: float = TRACE_S,
                 levels: tuple[int, ...] = TRACE_LEVELS) -> list[tuple[float, int]]:
    """(until, concurrency) phases of 10-20 s each, until ``total_s`` is reached or passed.

    The draws do not depend on ``total_s``, so a shorter trace is the first
    phases of a longer one with the same seed (the GPU runs 120 s of the
    simulator's 600 s).
    """
    rng = random.Random(seed)
    t, phases = 0.0, []
    while t < total_s:
        t += rng.uniform(*PHASE_S)
        phases.append((t, rng.choice(levels)))
    return phases
