"""Tensor-parallel consistency on the CPU: several rank processes, one broadcast stream.

In SGLang every TP rank runs its own scheduler; rank 0 receives requests and
broadcasts them, so each rank sees the same /set_internal_state requests at the
same step boundary and forms the same batches. Here four real processes each
hold the plugin's SpecctlParams (the object SGLang's worker consults) and are
fed one broadcast stream of settings changes and decode steps, with more than
200 forced switches mixed with load-driven ones. Every rank must decide the
same draft steps at every step, and while off the same draft warmth for the
decode step and for the prefill that follows it (draft_warmth, which reads
``warm_below``), which is what keeps the collectives in step.
"""

from __future__ import annotations

import multiprocessing as mp
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from specctl.runtime.core.adaptive_config import write_config
from specctl.runtime.core.policy import PolicySettings
from specctl.runtime.sglang_plugin import draft_warmth
from specctl.runtime.sglang_plugin.params import SpecctlParams

RANKS = 4


def broadcast_stream(seed: int, steps: int) -> list[tuple[Any, ...]]:
    """What rank 0 would broadcast: decode batches, and now and then an operator's command."""
    rng = random.Random(seed)
    modes = [2, 1, 0]  # off, on, auto: the wire codes
    stream: list[tuple[Any, ...]] = []
    for i in range(steps):
        if i % 7 == 3:
            stream.append(("settings", {"specctl_mode": modes[(i // 7) % 3]}))
        if i % 97 == 50:
            stream.append(("settings", {"specctl_off_at": rng.choice([16, 32, 64]), "specctl_on_at": 8}))
        if i % 131 == 60:  # refused as a whole on every rank: on_at above off_at
            stream.append(("settings", {"specctl_off_at": 8, "specctl_on_at": 9}))
        if i % 53 == 20:
            stream.append(("settings", {"specctl_warm_below": rng.choice([0, 10, 100])}))
        bs = rng.choice([1, 4, 12, 40, 90, 200])
        stream.append(("step", bs, [rng.randint(0, 3) for _ in range(bs)]))
    return stream


class Mode:
    """A decode or extend batch's forward mode, as draft_warmth asks it."""

    def is_idle(self) -> bool:
        return False


def warmth(bs: int, steps: int) -> tuple[bool, bool]:
    """This rank's draft warmth for an off decode step of ``bs``, and for the prefill after it."""
    decode = draft_warmth.choose((SimpleNamespace(forward_mode=Mode(), seq_lens=[0] * bs),), {})
    worker = SimpleNamespace(speculative_num_steps=steps)
    prefill = draft_warmth.cold_prefill(worker, SimpleNamespace(forward_mode=Mode()))
    return decode, prefill


def rank_main(rank: int, cfg: str, conn: Any) -> None:
    """One scheduler rank: apply what arrives, in order; report every decision."""
    params = SpecctlParams(3, cfg, settings=PolicySettings(dwell=2))
    decisions: list[int] = []
    refused = 0
    while (msg := conn.recv()) is not None:
        if msg[0] == "settings":
            try:
                params.apply_settings(params.validate_wire(msg[1]))
            except ValueError:
                refused += 1
        else:
            _, bs, accepts = msg
            steps = params.get_steps_for_batch(bs)
            params.on_verify_complete(accepts if steps else [0] * bs, bs)
            decisions.append((steps, *warmth(bs, steps)))
    conn.send({"rank": rank, "decisions": decisions, "refused": refused,
               "switches": [(s["step"], s["on"], s["reason"]) for s in params.state()["recent_switches"]],
               "count": params.state()["switches"]})


def test_every_rank_decides_the_same_at_every_step(tmp_path: Path) -> None:
    cfg = str(write_config(tmp_path / "adaptive.json", 3))
    ctx = mp.get_context("spawn")
    pipes = [ctx.Pipe() for _ in range(RANKS)]
    procs = [ctx.Process(target=rank_main, args=(r, cfg, child)) for r, (_, child) in enumerate(pipes)]
    for p in procs:
        p.start()
    try:
        for msg in broadcast_stream(seed=7, steps=3000):
            for parent, _ in pipes:
                parent.send(msg)
        for parent, _ in pipes:
            parent.send(None)
        reports = [parent.recv() for parent, _ in pipes]
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    first = reports[0]
    assert first["count"] >= 200, "the stream must exercise hundreds of switches"
    steps = {d[0] for d in first["decisions"]}
    assert first["refused"] > 0 and steps == {0, 3}
    off = [d for d in first["decisions"] if d[0] == 0]
    assert {d[1] for d in off} == {True, False} and {d[2] for d in off} == {True, False}, "warm and cold both seen"
    for other in reports[1:]:
        assert other["decisions"] == first["decisions"], f"rank {other['rank']} diverged"
        assert other["switches"] == first["switches"] and other["count"] == first["count"]
        assert other["refused"] == first["refused"]
