"""The changing-load trace's schedule, shared by the simulator's and the GPU's runs of it.

Why a module of its own: bench/policy_envelope.py runs the trace offline in the
simulator and bench/gpu/trace_load.py runs it against a live server; issue 22's
goal compares the two, so both must draw the same phases from the same seed.
Standard library only, so that it runs on the GPU machine as it is.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

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

    What a trace's ceiling needs (``ceiling``): each level's seconds priced at a
    configuration's steady tok/s there (bench/gpu/depth_report.py from the GPU's
    windows, bench/policy_envelope.py from the simulator's).
    """
    spent: dict[int, float] = {}
    start = 0.0
    for until, c in trace_levels(seed, total_s):
        spent[c] = spent.get(c, 0.0) + until - start
        start = until
    return spent


def ceiling(spent: dict[int, float], rates: dict[str, dict[int, float]],
            pair: tuple[str, str]) -> tuple[str, float, float]:
    """(the best single configuration, every level at its best / it, every level at the better of ``pair`` / it).

    ``rates``: configuration -> {concurrency: tok/s}; ``spent``: phase_seconds.
    The second figure is the trace's ceiling: a policy that runs one
    configuration per load level cannot beat it (it takes every switch as free
    and instant); the third is the same for a policy that only chooses within
    ``pair`` (on/off: none and the deepest depth).
    """
    def at_best(names: Iterable[str]) -> float:
        return sum(t * max(rates[n][c] for n in names) for c, t in spent.items())

    total = {name: sum(t * by_c[c] for c, t in spent.items()) for name, by_c in rates.items()}
    best = max(total, key=total.__getitem__)
    return best, at_best(rates) / total[best], at_best(pair) / total[best]
