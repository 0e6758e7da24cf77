"""The simulator's draft depth: acceptance per position, the cost table, auto against static depths."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from specctl.runtime.core.depth_model import costs_from_dict
from specctl.runtime.core.thresholds import for_backend
from specctl.runtime.sim.costs import alpha_for, off_s, spec_s
from specctl.runtime.sim.depth import AcceptLaw, context_per_request, cost_table, law_for, policy_costs
from specctl.runtime.sim.offline import run_point
from specctl.runtime.sim.presets import PRESETS

TRITON = PRESETS["h200-llama8b"]
FA3 = PRESETS["h200-llama8b-fa3"]


def test_the_geometric_law_is_the_engines_own() -> None:
    law = law_for(2.8, 3)
    assert law.rates == (alpha_for(2.8, 3),)
    assert law.accept_len(3) == pytest.approx(2.8)
    assert law.accept_len(1) < law.accept_len(2) < 2.8


def test_a_declining_law_keeps_the_calibrated_accept_length_at_its_steps() -> None:
    law = law_for(2.8, 3, decline=0.15)
    assert law.accept_len(3) == pytest.approx(2.8, abs=1e-6)
    assert law.rate(1) - law.rate(2) == pytest.approx(0.15)
    assert law.accept_len(1) > law_for(2.8, 3).accept_len(1), "falling later: the first position is easier"


@pytest.mark.parametrize("law", [AcceptLaw((0.7,)), AcceptLaw((0.9, 0.6, 0.3))])
def test_draws_follow_the_law_at_every_depth(law: AcceptLaw) -> None:
    rng = random.Random(1)
    for depth in (1, 2, 3):
        draws = law.draw(rng, 20_000, depth)
        assert max(draws) <= depth
        assert sum(draws) / len(draws) == pytest.approx(law.expected(depth)[depth], abs=0.03)


def test_cost_table_prices_each_depth_with_the_engines_model() -> None:
    table = cost_table(TRITON.params, TRITON.workload)
    ctx = int(16 * context_per_request(TRITON.workload))
    row = table.row(16)
    assert row[0] == pytest.approx(off_s(TRITON.params, 16, ctx))
    assert row[3] == pytest.approx(spec_s(TRITON.params, 16, ctx, 3))
    assert row[0] < row[1] < row[2] < row[3]
    assert costs_from_dict(json.loads(json.dumps(table.as_dict()))).row(16) == pytest.approx(row)


def test_a_server_without_a_candidates_setting_gets_no_table() -> None:
    assert policy_costs(TRITON.params, TRITON.workload, ()) is None
    assert policy_costs(TRITON.params, TRITON.workload, (0, 1, 3)).depths == (0, 1, 3)


def test_the_predicted_table_is_written_for_the_launcher(tmp_path) -> None:
    out = tmp_path / "costs.json"
    done = subprocess.run([sys.executable, "-m", "specctl.runtime.sim.depth", "--preset", "h200-llama8b-fa3",
                           "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    raw = json.loads(out.read_text())
    assert raw["depths"] == [0, 1, 2, 3] and "predicted" in raw["source"]


@pytest.mark.parametrize(("argv", "said"), [
    (["--depths", "0,1,17"], "--depths 0,1,17: depths must be ascending step counts 0..16"),
    (["--depths=-1,2"], "--depths -1,2: depths must be"),
    (["--out", "/nonexistent-folder/costs.json"], "--out /nonexistent-folder/costs.json: No such file or directory"),
])
def test_a_bad_table_request_is_a_usage_error_not_a_traceback(argv: list[str], said: str) -> None:
    done = subprocess.run([sys.executable, "-m", "specctl.runtime.sim.depth", "--preset", "h200-llama8b", *argv],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.stdout == ""


def point(preset, c: int, server: str, law: AcceptLaw, **settings) -> float:
    return run_point(preset, c, server, settings=settings, warmup_s=6, window_s=12, accept_law=law).tok_s


def test_auto_over_depths_takes_the_middle_depth_where_it_wins() -> None:
    """FA3 at accept length 2.0, 128 requests: one draft step beats none and three (SIMULATED)."""
    law = law_for(2.0, 3)
    statics = {d: point(FA3, 128, "on", law, candidates="0,1,2,3", steps=d, min_accept=0) for d in (1, 3)}
    none = point(FA3, 128, "nospec", law)
    auto = point(FA3, 128, "auto", law, candidates="0,1,2,3", **for_backend("fa3"))  # as the supervisor sets it
    assert statics[1] > max(statics[3], none) * 1.03, "the preset must make a middle depth win here"
    assert auto >= 0.97 * statics[1]
    assert auto >= 1.03 * max(statics[3], none)


@pytest.mark.parametrize("c", [1, 128])
def test_auto_over_depths_keeps_the_on_off_envelope_where_no_middle_depth_wins(c: int) -> None:
    law = law_for(2.8, 3)
    best = max(point(TRITON, c, "nospec", law), point(TRITON, c, "on", law, min_accept=0))
    assert point(TRITON, c, "auto", law, candidates="0,1,2,3", **for_backend("triton")) >= 0.97 * best


def test_sglangs_simulated_acceptance_accepts_the_same_drafts_at_every_depth() -> None:
    """What SGLANG_SIMULATE_ACC_LEN=2.8 (match-expected) gives: 2 at depth 1, 2.8 at depths 2 and 3."""
    from specctl.runtime.sim.depth import match_expected_law

    law = match_expected_law(2.8)
    assert [round(law.accept_len(d), 6) for d in (1, 2, 3)] == [2.0, 2.8, 2.8]
    flat = match_expected_law(2.0)
    assert [flat.accept_len(d) for d in (1, 2, 3)] == [2.0, 2.0, 2.0]
    draws = law.draw(random.Random(0), 10_000, 3)
    assert set(draws) == {1, 2} and sum(draws) / len(draws) == pytest.approx(1.8, abs=0.02)
