"""The policy choosing a draft depth: settings, the acceptance estimate, the choice, determinism."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specctl.runtime.core.depth_model import (
    AcceptStats,
    DepthCosts,
    DepthCostsError,
    costs_from_dict,
    expected_from_rates,
    pool_rising,
    read_costs,
)
from specctl.runtime.core.policy import REASONS, SpecPolicy
from specctl.runtime.core.settings import PolicySettings, SettingsError, settings_from_wire

# A table where each depth wins somewhere at acceptance 0.7 a position: 3 alone, 2 around
# 16 requests, 1 around 48, nothing from 96 (step seconds; shaped like the H200's Triton rows).
TABLE = DepthCosts(
    buckets=(1, 16, 48, 96),
    depths=(0, 1, 2, 3),
    step_s=((6e-3, 7e-3, 8e-3, 8.6e-3),
            (8e-3, 10.5e-3, 12.5e-3, 15e-3),
            (14e-3, 19e-3, 26e-3, 32e-3),
            (20e-3, 36e-3, 48e-3, 60e-3)),
)
DEPTHS = PolicySettings(candidates=(0, 1, 2, 3), off_at=1000, on_at=999, dwell=4)


def geometric(rng: random.Random, rate: float, depth: int) -> int:
    """Accepted drafts of one request at ``depth`` when each position is accepted with ``rate``."""
    n = 0
    while n < depth and rng.random() < rate:
        n += 1
    return n


def run(p: SpecPolicy, sizes: list[int], rate: float = 0.7, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    out = []
    for bs in sizes:
        d = p.decide(bs)
        out.append(d)
        if d:
            p.on_verify([geometric(rng, rate, d) for _ in range(bs)], d)
    return out


def best_depth(bs: int, rate: float) -> int:
    """What a policy that knew the acceptance exactly would choose."""
    expected = expected_from_rates([rate] * 3)
    row = TABLE.row(bs)
    return max(range(4), key=lambda d: (1 + expected[d]) / row[d])


# -- settings ------------------------------------------------------------------


def test_candidates_default_to_off_and_steps() -> None:
    assert PolicySettings().depths() == (0, 3)
    assert PolicySettings(steps=2).depths() == (0, 2)


@pytest.mark.parametrize("text, depths", [("0,1,2,3", (0, 1, 2, 3)), (" 3, 0 ,1", (0, 1, 3)), ("", ())])
def test_candidates_from_text(text: str, depths: tuple[int, ...]) -> None:
    assert PolicySettings().with_changes({"candidates": text}).candidates == depths


@pytest.mark.parametrize("changes, field", [
    ({"candidates": "1,2,3"}, "candidates"),  # no off state
    ({"candidates": "0"}, "candidates"),
    ({"candidates": "0,1,2"}, "steps"),  # steps 3 has no runtime state
    ({"candidates": "0,1,17"}, "candidates"),
    ({"candidates": "0,a"}, "candidates"),
    ({"candidates": 7}, "candidates"),  # a number is the wire's mask, not a setting
    ({"candidates": "0,1,2,3", "steps": 4}, "steps"),
])
def test_bad_candidates_are_refused_by_name(changes: dict, field: str) -> None:
    with pytest.raises(SettingsError) as err:
        PolicySettings().with_changes(changes)
    assert err.value.field == field


def test_steps_caps_the_depth_in_auto() -> None:
    s = DEPTHS.with_changes({"steps": 2})
    assert s.depths() == (0, 1, 2)


def test_candidates_travel_as_a_mask_and_come_back() -> None:
    s = PolicySettings().with_changes({"candidates": "0,1,3"})
    wire = s.to_wire(["candidates"])
    assert wire == {"specctl_candidates": 0b1011}
    assert settings_from_wire(PolicySettings(), wire).candidates == (0, 1, 3)
    assert settings_from_wire(PolicySettings(), s.to_wire()) == s
    assert s.as_dict()["candidates"] == [0, 1, 3]
    assert PolicySettings().with_changes(s.as_dict()) == s  # the journal's form reads back
    with pytest.raises(SettingsError):
        settings_from_wire(PolicySettings(), {"specctl_candidates": -1})


# -- the cost table ------------------------------------------------------------


def test_cost_table_interpolates_between_buckets_and_extrapolates_above() -> None:
    assert TABLE.row(1)[0] == pytest.approx(6e-3)
    assert TABLE.row(32)[0] == pytest.approx(11e-3)  # halfway between 16 and 48
    assert TABLE.row(192)[0] == pytest.approx(32e-3)  # the 48-96 slope continued
    assert TABLE.row(0) == TABLE.row(1)


@given(st.lists(st.floats(min_value=1e-4, max_value=1.0), min_size=1, max_size=17))
def test_pooled_rows_rise_keep_the_mean_and_leave_rising_rows_alone(row: list[float]) -> None:
    pooled = pool_rising(row)
    assert len(pooled) == len(row)
    assert all(a <= b * (1 + 1e-12) for a, b in zip(pooled, pooled[1:]))
    assert sum(pooled) == pytest.approx(sum(row))
    ascending = sorted(row)
    assert pool_rising(ascending) == pytest.approx(ascending)


def test_a_deeper_draft_is_never_priced_cheaper_but_the_file_keeps_the_measurement(tmp_path: Path) -> None:
    """The GPU sweep's batch-8 row: depths 1, 2, 3 read 10.84, 10.35, 10.26 ms (noise)."""
    measured = DepthCosts(buckets=(8,), depths=(0, 1, 2, 3), step_s=((6.25e-3, 10.84e-3, 10.3509e-3, 10.2601e-3),))
    row = measured.row(8)
    assert row[0] < row[1] and row[2] == row[3] == pytest.approx((10.84e-3 + 10.3509e-3 + 10.2601e-3) / 3)
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(measured.as_dict()))
    assert read_costs(path).step_s == measured.step_s, "the table reads back as measured"


def test_cost_table_reads_from_json(tmp_path: Path) -> None:
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(TABLE.as_dict()))
    assert read_costs(path) == TABLE


@pytest.mark.parametrize("raw, words", [
    ({"buckets": [1], "depths": [0, 1]}, "step_ms"),
    ({"buckets": [4, 1], "depths": [0], "step_ms": [[1], [1]]}, "ascending"),
    ({"buckets": [1], "depths": [0, 1], "step_ms": [[1]]}, "one step time per depth"),
    ({"buckets": [1], "depths": [0], "step_ms": [[-1]]}, "positive"),
    ([1, 2], "JSON object"),
])
def test_bad_cost_tables_are_refused_with_the_reason(raw: object, words: str) -> None:
    with pytest.raises(DepthCostsError, match=words):
        costs_from_dict(raw)  # type: ignore[arg-type]


def test_unreadable_cost_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "costs.json"
    path.write_text("{")
    with pytest.raises(DepthCostsError, match="costs.json"):
        read_costs(path)


# -- the acceptance estimate ---------------------------------------------------


def test_expected_accepted_per_depth_from_the_deepest_histogram() -> None:
    stats = AcceptStats(window=10_000)
    rng = random.Random(3)
    for _ in range(400):
        stats.add([geometric(rng, 0.7, 3) for _ in range(32)], 3)
    truth = expected_from_rates([0.7] * 3)
    assert stats.expected(3) == pytest.approx(truth, abs=0.02)


def test_a_shallow_depth_still_estimates_the_deeper_ones() -> None:
    """At depth 1 only position 1 is seen; deeper positions keep what was seen, then fade to it."""
    stats = AcceptStats(window=64)
    rng = random.Random(5)
    for _ in range(50):  # first at depth 3: position 1 accepted 0.8, later ones 0.5
        stats.add([min(3, (rng.random() < 0.8) * (1 + geometric(rng, 0.5, 2))) for _ in range(16)], 3)
    at_three = stats.expected(3)
    assert at_three[3] - at_three[2] == pytest.approx(0.8 * 0.5 * 0.5, abs=0.05)
    for _ in range(30):  # a short while at depth 1: deeper positions still known
        stats.add([int(rng.random() < 0.8) for _ in range(16)], 1)
    assert stats.expected(3)[3] == pytest.approx(at_three[3], abs=0.06)
    for _ in range(16_000):  # long at depth 1 (IDLE_MEMORY windows): deeper positions fade to position 1's rate
        stats.add([int(rng.random() < 0.8) for _ in range(16)], 1)
    assert stats.rates(3) == pytest.approx([0.8, 0.8, 0.8], abs=0.05)


def test_verifies_at_every_depth_add_to_one_estimate() -> None:
    stats = AcceptStats(window=100_000)
    rng = random.Random(9)
    for i in range(600):
        depth = 1 + i % 3
        stats.add([geometric(rng, 0.6, depth) for _ in range(16)], depth)
    assert stats.rates(3) == pytest.approx([0.6, 0.6, 0.6], abs=0.03)


# -- the choice ------------------------------------------------------------------


def test_off_and_steps_alone_reproduce_the_on_off_policy_exactly() -> None:
    rng = random.Random(11)
    sizes = [rng.choice([1, 4, 12, 30, 40, 90]) for _ in range(3000)]
    plain = SpecPolicy(PolicySettings(dwell=2))
    with_table = SpecPolicy(PolicySettings(dwell=2, candidates=(0, 3)), TABLE)
    assert run(plain, sizes, 0.4) == run(with_table, sizes, 0.4)
    strip = [(s.step, s.on, s.reason) for s in plain.recent_switches()]
    assert strip and strip == [(s.step, s.on, s.reason) for s in with_table.recent_switches()]


def test_without_a_table_several_candidates_run_the_on_off_policy_at_steps() -> None:
    decisions = run(SpecPolicy(DEPTHS), [8] * 500)
    assert set(decisions) == {3}


@pytest.mark.parametrize("bs", [1, 16, 48])
def test_each_load_gets_the_depth_with_the_most_tokens_per_second(bs: int) -> None:
    p = SpecPolicy(DEPTHS, TABLE)
    decisions = run(p, [bs] * 600)
    assert decisions[-1] == best_depth(bs, 0.7)
    assert all(sw.reason in ("depth", "load") for sw in p.recent_switches())


def test_the_choices_cover_every_depth_and_carry_reasons() -> None:
    assert {best_depth(bs, 0.7) for bs in (1, 16, 48, 96)} == {0, 1, 2, 3}, "the table must make each win"
    p = SpecPolicy(DEPTHS, TABLE)
    decisions = run(p, [1] * 300 + [16] * 300 + [48] * 300 + [96] * 300 + [1] * 300)
    assert [decisions[i] for i in (299, 599, 899, 1199, 1499)] == [3, 2, 1, 0, 3]
    reasons = [(s.depth_from, s.depth_to, s.reason) for s in p.recent_switches()]
    assert reasons == [(3, 2, "depth"), (2, 1, "depth"), (1, 0, "load"), (0, 3, "quiet")]
    state = p.state()
    assert state["depth"] == 3 and state["candidates"] == [0, 1, 2, 3] and state["depth_model"]
    assert state["accept_by_depth"]["1"] == pytest.approx(0.7, abs=0.05)
    assert state["recent_switches"][0]["from"] == 3 and state["recent_switches"][0]["to"] == 2


def test_acceptance_too_low_for_any_depth_turns_off_and_probes_later() -> None:
    p = SpecPolicy(DEPTHS.with_changes({"probe_after": 200}), TABLE)
    decisions = run(p, [1] * 400, rate=0.05)
    first = p.recent_switches()[0]
    assert (first.depth_to, first.reason) == (0, "low_accept")
    assert "probe" in [s.reason for s in p.recent_switches()]
    assert decisions.count(0) > 300


def test_off_at_stays_a_ceiling_over_the_table() -> None:
    p = SpecPolicy(DEPTHS.with_changes({"off_at": 10, "on_at": 5}), TABLE)
    decisions = run(p, [1] * 200 + [12] * 50)
    assert decisions[-1] == 0 and p.recent_switches()[-1].reason == "load"


def test_off_at_the_ceiling_stays_off_until_on_at() -> None:
    """The GPU's first one-server sitting: a batch hovering at 31-32 under off_at 32 flapped
    off (load) and on (quiet) every dwell, 32 switches in 5 s, since the table said drafting
    pays at 31; the operator's band under the ceiling holds in the depth choice as in on/off."""
    p = SpecPolicy(DEPTHS.with_changes({"off_at": 32, "on_at": 24, "dwell": 8}), TABLE)
    assert best_depth(31, 0.7) > 0, "the table must favour drafting just under the ceiling"
    run(p, [8] * 300)
    before = p.state()["switches"]
    rng = random.Random(5)
    hovering = run(p, [rng.choice([30, 31, 32]) for _ in range(3000)], seed=1)
    first_off = hovering.index(0)
    assert set(hovering[first_off:]) == {0}, "off at the ceiling, never back on above on_at"
    assert p.state()["switches"] == before + 1
    assert p.recent_switches()[-1].reason == "load"
    assert run(p, [20] * 100)[-1] > 0, "at on_at or below the table decides again"
    assert p.recent_switches()[-1].reason == "quiet"


def test_forced_on_pins_the_depth_steps_names() -> None:
    p = SpecPolicy(DEPTHS, TABLE)
    run(p, [48] * 300)
    p.apply({"mode": "on", "steps": 2})
    assert run(p, [1] * 50)[-1] == 2
    assert p.recent_switches()[-1].reason == "forced"
    p.apply({"mode": "auto", "steps": 3})
    assert run(p, [1] * 100)[-1] == 3


def test_the_margin_keeps_near_ties_from_flapping() -> None:
    p = SpecPolicy(DEPTHS.with_changes({"dwell": 1}), TABLE)
    rng = random.Random(2)
    sizes = [rng.choice([30, 31, 32, 33, 34]) for _ in range(3000)]
    run(p, sizes)
    assert p.state()["switches"] <= 6


def test_operator_steps_change_in_two_state_auto_is_one_forced_switch() -> None:
    p = SpecPolicy(PolicySettings(candidates=(0, 2, 3)))
    run(p, [1] * 10)
    p.apply({"steps": 2})
    assert run(p, [1] * 10)[-1] == 2
    last = p.recent_switches()[-1]
    assert (last.depth_from, last.depth_to, last.reason) == (3, 2, "forced")


sizes_st = st.lists(st.tuples(st.sampled_from([1, 2, 8, 16, 24, 48, 96, 200]), st.floats(0, 1)), max_size=400)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 12), sizes_st)
def test_two_copies_choose_the_same_depth_at_every_step(dwell: int, inputs: list[tuple[int, float]]) -> None:
    s = DEPTHS.with_changes({"dwell": dwell, "accept_window": 8, "probe_after": 50})
    a, b = SpecPolicy(s, TABLE), SpecPolicy(s, TABLE)
    for bs, rate in inputs:
        da, db = a.decide(bs), b.decide(bs)
        assert da == db and da in s.depths()
        accepted = [min(da, int(rate * 4)) for _ in range(bs % 5 + 1)]
        a.on_verify(accepted, da)
        b.on_verify(accepted, db)
    assert a.state() == b.state()
    moves = a.recent_switches()
    assert all(sw.reason in REASONS and sw.reason != "forced" for sw in moves)
    assert all(y.step - x.step >= dwell for x, y in zip(moves, moves[1:]))


def test_lowering_steps_in_auto_caps_the_depth_at_once() -> None:
    p = SpecPolicy(DEPTHS.with_changes({"dwell": 50}), TABLE)
    run(p, [1] * 300)
    assert p.depth == 3
    p.apply({"steps": 2})
    assert run(p, [1])[-1] == 2, "not after dwell: steps is a cap"
    assert (p.recent_switches()[-1].depth_to, p.recent_switches()[-1].reason) == (2, "forced")
    p.apply({"candidates": "0,1,3", "steps": 3})
    run(p, [1] * 60)
    p.apply({"candidates": "0,1,2,3"})
    assert p.state()["candidates"] == [0, 1, 2, 3]
