"""Draft depth in the simulator: acceptance per depth, and the cost table the policy prices with.

Acceptance: a request's accepted drafts follow a law given per position, the
conditional acceptance c_k = P(L >= k | L >= k-1), so one law answers for
every depth (at depth d the count is min(L, d)). The presets are calibrated
at one accept length and depth (2.8 at 3 steps on the H200); a geometric law
(every c_k equal) that gives it there is the default, and ``decline`` makes
later positions harder, as a trained EAGLE-3 head's are, to see how a policy
that extrapolates does when the law is not geometric.

Cost: :func:`cost_table` prices one decode step per (batch, depth) with the
preset's own performance model (``model.spec_s`` and ``model.off_s``, the
functions the engine steps with), at the workload's mean context. That table
is what the policy receives at start in the simulator, and what
``python -m specctl.runtime.sim.depth --preset NAME`` writes for a server
as a prediction until a GPU profile replaces it (bench/gpu/run_fast_off.sh
``depthsweep`` measures one).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from specctl.runtime.core.atomic_file import write_atomic
from specctl.runtime.core.depth_model import DepthCosts, DepthCostsError, expected_from_rates
from specctl.runtime.sim.costs import PerfParams, Workload, alpha_for, off_s, spec_s

BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
DEPTHS = (0, 1, 2, 3)


@dataclass(frozen=True)
class AcceptLaw:
    """Conditional acceptance per draft position (``rates[k-1]`` for position k)."""

    rates: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.rates or any(not 0.0 <= r <= 1.0 for r in self.rates):
            raise ValueError(f"acceptance rates must be between 0 and 1, got {self.rates}")

    def rate(self, k: int) -> float:
        """Position k's rate; past the last given one, the last one holds."""
        return self.rates[min(k, len(self.rates)) - 1]

    def expected(self, depth: int) -> list[float]:
        """E[min(L, d)] for d = 0..depth."""
        return expected_from_rates(self.rate(k) for k in range(1, depth + 1))

    def accept_len(self, depth: int) -> float:
        """Mean tokens per verify at ``depth``, the bonus token included (SGLang's accept length)."""
        return 1.0 + self.expected(depth)[depth]

    def draw(self, rng: random.Random, n: int, depth: int) -> list[int]:
        """Accepted drafts of ``n`` requests at ``depth``."""
        if depth <= 0:
            return [0] * n
        rates = [self.rate(k) for k in range(1, depth + 1)]
        if len(set(rates)) == 1:  # geometric: one uniform draw each (batch 256 stays cheap)
            return _geometric(rng, rates[0], n, depth)
        out = []
        rand = rng.random
        for _ in range(n):
            got = 0
            while got < depth and rand() < rates[got]:
                got += 1
            out.append(got)
        return out


def _geometric(rng: random.Random, rate: float, n: int, depth: int) -> list[int]:
    if rate >= 1.0:
        return [depth] * n
    if rate <= 0.0:
        return [0] * n
    log_a, rand, log = math.log(rate), rng.random, math.log
    return [min(depth, int(log(1.0 - rand()) / log_a)) for _ in range(n)]


def law_for(accept_len: float, steps: int, decline: float = 0.0) -> AcceptLaw:
    """A law giving ``accept_len`` at ``steps``; each position's rate ``decline`` below the one before.

    ``decline`` 0 is the geometric law the engine always used (``model.alpha_for``).
    """
    if decline == 0.0:
        return AcceptLaw((alpha_for(accept_len, steps),))
    lo, hi = 0.0, 1.0
    for _ in range(60):  # the first position's rate, by bisection, the rest following it down
        mid = (lo + hi) / 2
        law = _declining(mid, decline, steps)
        if law.accept_len(steps) < accept_len:
            lo = mid
        else:
            hi = mid
    return _declining((lo + hi) / 2, decline, steps)


def match_expected_law(accept_len: float) -> AcceptLaw:
    """SGLang's simulated acceptance (SGLANG_SIMULATE_ACC_METHOD=match-expected), as a law per position.

    SGLang draws each verify's accept length as floor(a) or floor(a)+1 around
    SGLANG_SIMULATE_ACC_LEN = a, clamped to the depth + 1 (speculative/spec_utils.py,
    ``_sample_simulated_acc_len``): the accepted drafts are a - 1 whatever the depth,
    so position k is always accepted below a - 1, with the fraction at it, never
    beyond. At 2.8: rates 1, 0.8, 0 (depth 2 yields as much as depth 3); at 2.0:
    1, 0 (depth 1 as much as any). The GPU sweeps that simulate acceptance see this
    law, not a trained head's, so it predicts them.
    """
    drafts = accept_len - 1.0
    if drafts < 0:
        raise ValueError(f"accept_len must be at least 1, got {accept_len}")
    whole = int(drafts)
    rates = [1.0] * whole + [round(drafts - whole, 9)] + [0.0]
    return AcceptLaw(tuple(rates))


def _declining(first: float, decline: float, steps: int) -> AcceptLaw:
    return AcceptLaw(tuple(max(0.0, first - decline * k) for k in range(max(steps, 16))))


def context_per_request(workload: Workload) -> float:
    """Mean context a running request holds: its prompt and, on average, half its output."""
    return (workload.input_min + workload.input_max) / 2 + (workload.output_min + workload.output_max) / 4


def cost_table(params: PerfParams, workload: Workload, depths: Sequence[int] = DEPTHS,
               buckets: Sequence[int] = BUCKETS, source: str = "") -> DepthCosts:
    """Seconds per decode step per (batch, depth) from the performance model, at the mean context."""
    per_req = context_per_request(workload)
    rows = []
    for bs in buckets:
        ctx = int(bs * per_req)
        rows.append(tuple(off_s(params, bs, ctx) if d == 0 else spec_s(params, bs, ctx, d) for d in depths))
    return DepthCosts(tuple(buckets), tuple(depths), tuple(rows), source)


def policy_costs(params: PerfParams, workload: Workload, candidates: Sequence[int]) -> DepthCosts | None:
    """The table a simulated server hands its policy at start: None without a candidates setting.

    As on a real server, the policy only chooses depths with a table; the
    simulator's is its own model, so the policy prices exactly what it gets.
    """
    if not candidates:
        return None
    return cost_table(params, workload, tuple(sorted(set(candidates))), source="simulator model")


def main(argv: list[str] | None = None) -> int:
    """Write a preset's predicted cost table (JSON, step times in ms) for ``--depth-costs``."""
    from specctl.runtime.sim.presets import PRESETS

    ap = argparse.ArgumentParser(prog="python -m specctl.runtime.sim.depth", description=main.__doc__)
    ap.add_argument("--preset", choices=sorted(PRESETS), required=True)
    ap.add_argument("--depths", default="0,1,2,3", help="depths to price (default 0,1,2,3)")
    ap.add_argument("--out", help="file to write (default: standard output)")
    ns = ap.parse_args(argv)
    try:
        depths = tuple(sorted({int(d) for d in ns.depths.split(",")}))
    except ValueError:
        ap.error(f"--depths must be integers like 0,1,2,3, got {ns.depths!r}")
    preset = PRESETS[ns.preset]
    try:
        table = cost_table(preset.params, preset.workload, depths,
                           source=f"simulator preset {preset.name} (predicted, not measured)")
    except DepthCostsError as exc:  # a depth past 16, a negative one: the table's own check says which
        ap.error(f"--depths {ns.depths}: {exc}")
    text = json.dumps(table.as_dict()) + "\n"
    if ns.out:
        try:
            write_atomic(ns.out, text, mode=0o644)  # through a descriptor, never a planted link
        except OSError as exc:
            ap.error(f"--out {ns.out}: {exc.strerror or exc}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
