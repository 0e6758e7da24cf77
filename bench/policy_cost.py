"""Policy cost per decision, in microseconds: it runs inside SGLang's scheduler every decode step.

Measures decide() alone, in auto mode with thresholds that make it switch now
and then; decide() in auto against an acceptance floor that rises with the
batch (the low_accept and quiet rules then run at every step); and
decide()+on_verify() for a batch of 1, 64 and 256 requests.
Goal: decide() < 5 us.

    python bench/policy_cost.py
"""

from __future__ import annotations

import timeit

from specctl.runtime.core.depth_model import DepthCosts
from specctl.runtime.core.policy import SpecPolicy
from specctl.runtime.core.settings import PolicySettings

N = 200_000


def bench_decide() -> float:
    p = SpecPolicy(PolicySettings(off_at=64, on_at=32, dwell=8))
    sizes = [(i * 37) % 96 for i in range(1024)]

    def loop() -> None:
        decide = p.decide
        for i in range(N):
            decide(sizes[i & 1023])

    return min(timeit.repeat(loop, number=1, repeat=3)) / N * 1e6


def bench_floor() -> float:
    """Triton's floor (0.3 + 0.05 per request) with a mean of 1.0: off above 14 requests, back at 10 or fewer."""
    p = SpecPolicy(PolicySettings(min_accept=0.3, accept_slope=0.05, off_at=56, on_at=48, dwell=8))
    sizes = [(i * 37) % 32 for i in range(1024)]

    def loop() -> None:
        decide, verify = p.decide, p.on_verify_mean
        for i in range(N):
            if decide(sizes[i & 1023]):
                verify(1.0)

    return min(timeit.repeat(loop, number=1, repeat=3)) / N * 1e6


def bench_step(batch: int) -> float:
    p = SpecPolicy(PolicySettings(mode="on", min_accept=0.5, dwell=8))  # always verifying
    accepted = [2] * batch
    n = N // 10

    def loop() -> None:
        for _ in range(n):
            if p.decide(batch):
                p.on_verify(accepted)

    return min(timeit.repeat(loop, number=1, repeat=3)) / n * 1e6


COSTS = DepthCosts(buckets=(1, 16, 48, 96), depths=(0, 1, 2, 3),
                   step_s=((6e-3, 7e-3, 8e-3, 8.6e-3), (8e-3, 10.5e-3, 12.5e-3, 15e-3),
                           (14e-3, 19e-3, 26e-3, 32e-3), (20e-3, 36e-3, 48e-3, 60e-3)))


def depth_policy() -> SpecPolicy:
    """Auto over depths 0-3 with evidence in, so every dwelt step scores all four."""
    p = SpecPolicy(PolicySettings(candidates=(0, 1, 2, 3), off_at=1000, on_at=999, dwell=8), COSTS)
    for i in range(200):
        if p.decide(16):
            p.on_verify([i % 4 if i % 4 <= p.depth else p.depth] * 16)
    return p


def bench_depth() -> float:
    """decide() alone over batch sizes that move the best depth; the estimate is cached between verifies."""
    p = depth_policy()
    sizes = [(i * 37) % 128 for i in range(1024)]

    def loop() -> None:
        decide = p.decide
        for i in range(N):
            decide(sizes[i & 1023])

    return min(timeit.repeat(loop, number=1, repeat=3)) / N * 1e6


def bench_depth_step(batch: int) -> float:
    """decide()+on_verify() at depth: the estimate is rebuilt once per verify."""
    p = depth_policy()
    by_depth = [[min(a, d) for a in [0, 1, 2, 3] * (batch // 4)] for d in range(4)]
    n = N // 10

    def loop() -> None:
        for i in range(n):
            d = p.decide(batch if i & 64 else 1)
            if d:
                p.on_verify(by_depth[d], d)

    return min(timeit.repeat(loop, number=1, repeat=3)) / n * 1e6


def main() -> None:
    d = bench_decide()
    print(f"decide()                         {d:6.2f} us   (goal < 5 us: {'met' if d < 5 else 'MISSED'})")
    f = bench_floor()
    print(f"decide()+on_verify_mean(), floor {f:6.2f} us   (goal < 5 us: {'met' if f < 5 else 'MISSED'})")
    for batch in (1, 64, 256):
        print(f"decide()+on_verify(), batch {batch:>3}  {bench_step(batch):6.2f} us")
    d = bench_depth()
    print(f"decide(), depths 0-3 + table     {d:6.2f} us   (goal < 5 us: {'met' if d < 5 else 'MISSED'})")
    print(f"decide()+on_verify(), depths, 64 {bench_depth_step(64):6.2f} us")


if __name__ == "__main__":
    main()
