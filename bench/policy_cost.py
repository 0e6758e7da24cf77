"""Policy cost per decision, in microseconds: it runs inside SGLang's scheduler every decode step.

Measures decide() alone and decide()+on_verify() for a batch of 64 and 256
requests, in auto mode with thresholds that make it switch now and then.
Goal: decide() < 5 us.

    python bench/policy_cost.py
"""

from __future__ import annotations

import timeit

from specctl.runtime.policy import PolicySettings, SpecPolicy

N = 200_000


def bench_decide() -> float:
    p = SpecPolicy(PolicySettings(off_at=64, on_at=32, dwell=8))
    sizes = [(i * 37) % 96 for i in range(1024)]

    def loop() -> None:
        decide = p.decide
        for i in range(N):
            decide(sizes[i & 1023])

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


def main() -> None:
    d = bench_decide()
    print(f"decide()                         {d:6.2f} us   (goal < 5 us: {'met' if d < 5 else 'MISSED'})")
    for batch in (1, 64, 256):
        print(f"decide()+on_verify(), batch {batch:>3}  {bench_step(batch):6.2f} us")


if __name__ == "__main__":
    main()
