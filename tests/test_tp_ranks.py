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
from collections.abc import Callable, Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from specctl.runtime.core.adaptive_config import write_config
from specctl.runtime.core.settings import PolicySettings
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


def applied(params: SpecctlParams, wire: dict[str, Any]) -> bool:
    """A broadcast settings change, as the plugin's handler applies it on each rank: all or nothing."""
    try:
        params.apply_settings(params.validate_wire(wire))
    except ValueError:
        return False
    return True


def serve(params: SpecctlParams, conn: Any, on_step: Callable[[int, list[int]], Any]) -> tuple[list[Any], int]:
    """A rank's loop: each broadcast settings change applied (all or nothing), each step handed to ``on_step``;
    returns what ``on_step`` answered per step and how many settings changes were refused."""
    decisions: list[Any] = []
    refused = 0
    while (msg := conn.recv()) is not None:
        if msg[0] == "settings":
            refused += not applied(params, msg[1])
        else:
            decisions.append(on_step(msg[1], msg[2]))
    return decisions, refused


def rank_main(rank: int, cfg: str, conn: Any) -> None:
    """One scheduler rank: apply what arrives, in order; report every decision."""
    params = SpecctlParams(3, cfg, settings=PolicySettings(dwell=2))

    def step(bs: int, accepts: list[int]) -> tuple[Any, ...]:
        steps = params.get_steps_for_batch(bs)
        params.on_verify_complete(accepts if steps else [0] * bs, bs)
        return (steps, *warmth(bs, steps))

    decisions, refused = serve(params, conn, step)
    conn.send({"rank": rank, "decisions": decisions, "refused": refused,
               "switches": [(s["step"], s["on"], s["reason"]) for s in params.state()["recent_switches"]],
               "count": params.state()["switches"]})


def run_ranks(main: Callable[..., None], args: tuple[Any, ...], stream: Iterable[Any]) -> list[dict[str, Any]]:
    """RANKS real processes (spawned, as SGLang's schedulers are), each fed the same broadcast messages
    in the same order (what SGLang's step-boundary broadcast guarantees); their reports, in rank order."""
    ctx = mp.get_context("spawn")
    pipes = [ctx.Pipe() for _ in range(RANKS)]
    procs = [ctx.Process(target=main, args=(r, *args, child)) for r, (_, child) in enumerate(pipes)]
    for p in procs:
        p.start()
    try:
        for msg in stream:
            for parent, _ in pipes:
                parent.send(msg)
        for parent, _ in pipes:
            parent.send(None)
        return [parent.recv() for parent, _ in pipes]
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()


def test_every_rank_decides_the_same_at_every_step(tmp_path: Path) -> None:
    cfg = str(write_config(tmp_path / "adaptive.json", 3))
    reports = run_ranks(rank_main, (cfg,), broadcast_stream(seed=7, steps=3000))
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


# -- several depths: every rank must choose the same depth, not only on/off ------------

DEPTH_COSTS = {"source": "test", "buckets": [1, 16, 48, 96], "depths": [0, 1, 2, 3],
               "step_ms": [[6, 7, 8, 8.6], [8, 10.5, 12.5, 15], [14, 19, 26, 32], [20, 36, 48, 60]]}


def depth_stream(seed: int, steps: int) -> list[tuple[Any, ...]]:
    """Load that moves the best depth, acceptance that drifts, and an operator pinning depths."""
    rng = random.Random(seed)
    stream: list[tuple[Any, ...]] = []
    rate = 0.7
    for i in range(steps):
        if i % 211 == 100:  # pin a depth, then give control back
            stream.append(("settings", {"specctl_mode": 1, "specctl_steps": rng.choice([1, 2, 3])}))
        if i % 211 == 140:
            stream.append(("settings", {"specctl_mode": 0, "specctl_steps": 3}))
        if i % 307 == 200:  # narrow and widen the candidates live (0b1011: 0, 1, 3)
            stream.append(("settings", {"specctl_candidates": rng.choice([0b1011, 0b1111, 0b1101])}))
        if i % 401 == 300:  # refused on every rank: no state for depth 4
            stream.append(("settings", {"specctl_candidates": 0b11111}))
        if i % 500 == 0:
            rate = rng.choice([0.1, 0.5, 0.7, 0.9])
        bs = rng.choice([1, 2, 8, 16, 24, 48, 64, 96, 200])
        if i % 97 < 6:  # now and then between on_at and off_at: the band the ceiling holds off in
            bs = 120
        accepted = []
        for _ in range(bs):
            n = 0
            while n < 3 and rng.random() < rate:
                n += 1
            accepted.append(n)
        stream.append(("step", bs, accepted))
    return stream


def depth_rank_main(rank: int, cfg: str, costs_path: str, conn: Any) -> None:
    """One scheduler rank choosing depths from the table the launcher named."""
    from specctl.runtime.sglang_plugin.plugin import costs_from_env

    settings = PolicySettings(candidates=(0, 1, 2, 3), dwell=4, min_accept=0.3, off_at=150, on_at=100,
                              accept_window=16, probe_after=300)
    params = SpecctlParams(3, cfg, settings=settings, costs=costs_from_env({"SPECCTL_DEPTH_COSTS": costs_path}))
    in_flight: list[tuple[int, list[int]]] = []

    def step(bs: int, accepts: list[int]) -> int:
        depth = params.get_steps_for_batch(bs)
        in_flight.append((bs, [min(a, depth) for a in accepts]))
        if len(in_flight) == 2:  # overlap: batch k's result after batch k+1 is decided
            done_bs, done = in_flight.pop(0)
            params.on_verify_complete(done, done_bs)
        return depth

    decisions, refused = serve(params, conn, step)
    state = params.state()
    conn.send({"rank": rank, "decisions": decisions, "refused": refused,
               "switches": [(s["step"], s["from"], s["to"], s["reason"]) for s in state["recent_switches"]],
               "count": state["switches"], "state": state})


def test_every_rank_chooses_the_same_depth_at_every_step(tmp_path: Path) -> None:
    import json

    cfg = str(write_config(tmp_path / "adaptive.json", 3, candidates=[0, 1, 2, 3]))
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps(DEPTH_COSTS))
    reports = run_ranks(depth_rank_main, (cfg, str(costs)), depth_stream(seed=11, steps=4000))
    first = reports[0]
    assert set(first["decisions"]) == {0, 1, 2, 3}, "every depth must be chosen somewhere"
    reasons = {s[3] for s in first["switches"]}
    assert {"depth", "forced"} <= reasons and first["count"] >= 100
    assert first["refused"] > 0
    for other in reports[1:]:
        assert other["decisions"] == first["decisions"], f"rank {other['rank']} diverged"
        assert other["switches"] == first["switches"] and other["count"] == first["count"]
        assert decided(other["state"]) == decided(first["state"]) and other["refused"] == first["refused"]
        assert meter_counts(other["state"]) == meter_counts(first["state"])  # its times are each rank's own


def decided(state: dict[str, Any]) -> dict[str, Any]:
    """A rank's policy state but its step meter: the meter times each rank's own steps, which differ."""
    return {k: v for k, v in state.items() if k != "meter"}


def meter_counts(state: dict[str, Any]) -> dict[str, Any]:
    """The meter's verify counts and acceptance (the same on every rank); its step times are each rank's clock's,
    and so is which steps it leaves out as stalls."""
    return {b: {d: [c[3], c[4]] for d, c in depths.items()} for b, depths in state["meter"].items()}


# -- calibration: learned settings arrive on every rank at the same step ------------------------------

def step_cost(bs: int, depth: int) -> float:
    """A made-up GPU: drafting 3 steps costs 1.6x a plain decode at one request and 2.6x at 200."""
    return (0.004 + 0.00004 * bs) * (1.0 + (0.6 + 0.005 * bs) * (depth > 0))


def calibrated_stream(seed: int, steps: int) -> tuple[list[tuple[Any, ...]], int]:
    """Rank 0's policy as the supervisor reads it (its state, timed by ``step_cost``), the Calibrator's plans
    sent back as /set_internal_state bodies between two steps: the broadcast the ranks receive, and how many
    of its settings messages are calibration's."""
    from specctl.runtime.core.calibration import Calibrator
    from specctl.runtime.core.policy import SpecPolicy

    rng = random.Random(seed)
    observed = SpecPolicy(PolicySettings(dwell=2))
    calibrator = Calibrator()
    stream: list[tuple[Any, ...]] = []
    pushed = 0
    bs = 4
    for i in range(steps):
        if i % 600 == 0:
            bs = rng.choice([2, 4, 64, 192])
        if i % 25 == 0:  # a poll
            plan = calibrator.observe(observed.state())
            changes: dict[str, Any] = dict(plan.publish)
            if plan.probe is not None:
                changes["mode"] = plan.probe
            if changes:
                wire = observed.settings.with_changes(changes).to_wire(changes.keys())
                observed.apply(changes)
                stream.append(("settings", wire))
                pushed += bool(plan.publish)
        depth = observed.decide(bs)
        accepts = [min(depth, int(rng.random() < 0.8) + int(rng.random() < 0.6)) for _ in range(bs)]
        if depth:
            observed.on_verify(accepts, depth)
        observed.step_time(step_cost(bs, depth))
        stream.append(("step", bs, accepts if depth else [0] * bs))
    return stream, pushed


def settings_rank_main(rank: int, cfg: str, conn: Any) -> None:
    """One scheduler rank: applies each broadcast settings change; reports its decisions and, at each step,
    the settings it decided with."""
    params = SpecctlParams(3, cfg, settings=PolicySettings(dwell=2))

    def step(bs: int, accepts: list[int]) -> tuple[int, str]:
        steps = params.get_steps_for_batch(bs)
        params.on_verify_complete(accepts, bs)
        s = params.policy.settings
        return steps, f"{s.mode} {s.off_at} {s.on_at} {s.min_accept} {s.accept_slope}"

    decisions, refused = serve(params, conn, step)
    conn.send({"rank": rank, "decisions": decisions, "refused": refused})


def test_calibrated_settings_arrive_on_every_rank_at_the_same_step(tmp_path: Path) -> None:
    cfg = str(write_config(tmp_path / "adaptive.json", 3))
    stream, pushed = calibrated_stream(seed=5, steps=6000)
    assert pushed >= 1, "the calibrator must publish learned settings in this stream"
    reports = run_ranks(settings_rank_main, (cfg,), stream)
    first = reports[0]
    assert first["refused"] == 0
    seen = {d[1] for d in first["decisions"]}
    assert len(seen) > 2, "learned thresholds and probes must change the settings ranks decide with"
    for other in reports[1:]:
        assert other["decisions"] == first["decisions"], f"rank {other['rank']} diverged"
