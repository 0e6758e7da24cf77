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


def phase_seconds(seed: int, total_s: float = TRACE_S) -> dict[int, float]:
    """Seconds the trace spends at each concurrency, its last phase whole (as both runners run it).

    What a trace's ceiling needs: price each level's seconds at a configuration's
    steady tok/s there (bench/gpu/depth_report.py from the GPU's windows,
    bench/policy_envelope.py from the simulator's).
    """
    spent: dict[int, float] = {}
    start = 0.0
    for until, c in trace_levels(seed, total_s):
        spent[c] = spent.get(c, 0.0) + until - start
        start = until
    return spent


def tokens(spent: dict[int, float], rates: dict[str, dict[int, float]]) -> dict[str, float]:
    """Tokens each configuration yields over the trace; ``rates``: configuration -> {concurrency: tok/s}."""
    return {name: sum(t * by_c[c] for c, t in spent.items()) for name, by_c in rates.items()}


def tokens_at_best(spent: dict[int, float], rates: dict[str, dict[int, float]]) -> float:
    """Tokens over the trace with every level at its best configuration of ``rates``.

    Over the best single configuration's tokens this is the trace's ceiling: a
    policy that runs one configuration per load level cannot beat it (it takes
    every switch as free and instant).
    """
    return sum(t * max(by_c[c] for by_c in rates.values()) for c, t in spent.items())
