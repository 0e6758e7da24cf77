"""The simulator's draft depth: acceptance per position, the cost table, auto against static depths."""

from __future__ import annotations

import csv
import json
import random
import re
import subprocess
import sys
from pathlib import Path

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


# -- calibrate --depth-csv: the preset against the GPU's static-depth windows ------------------------------------
SWEEP = Path(__file__).resolve().parent.parent / "bench/gpu/results/depth/triton-depthsweep.csv"
ROW = re.compile(r"^\| (d\d+|off|nospec) \| (\d+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", re.M)


def calibrate(*argv: str) -> subprocess.CompletedProcess[str]:
    """The real CLI in its own process (the timeout only stops a hung run)."""
    return subprocess.run([sys.executable, "-m", "specctl.runtime.sim.calibrate", *argv],
                          capture_output=True, text=True, timeout=600)


def test_calibrate_prints_a_row_per_depth_and_concurrency_of_the_gpu_sweep() -> None:
    done = calibrate("--preset", "h200-llama8b", "--depth-csv", str(SWEEP))
    assert done.returncode == 0 and done.stderr == "", done.stderr
    depth = done.stdout.split("depth check (not fitted): depth-triton")[1]
    assert "SGLang's simulated acceptance 2.8 (match-expected: 2.00 at d1, 2.80 at d2, 2.80 at d3)" in depth
    with SWEEP.open(newline="") as fh:
        windows = {(r["mode"], int(r["concurrency"])): float(r["tok_s"]) for r in csv.DictReader(fh)}
    rows = {(m[1], int(m[2])): (float(m[3]), float(m[4]), float(m[5])) for m in ROW.finditer(depth)}
    assert set(rows) == set(windows) and len(rows) == 40  # d1 d2 d3 off at 10 concurrencies
    for key, (measured, simulated, ratio) in rows.items():
        assert measured == windows[key] and ratio == pytest.approx(simulated / measured, abs=6e-4), key
    # the depths are really run: one draft step yields 2 tokens a verify, two and three 2.8 under SGLang's law
    assert rows["d1", 1][1] < rows["d3", 1][1] < rows["d2", 1][1] and rows["off", 256][1] > rows["d3", 256][1]
    for part, cs in (("c < 48", [c for _, c in rows if c < 48]), ("c >= 48", [c for _, c in rows if c >= 48])):
        worst = max((abs(r[2] - 1), key) for key, r in rows.items() if key[1] in cs)
        said = re.search(rf"worst point at {part}: ([\d.]+) % off \((\w+) at c=(\d+)\)", depth)
        assert said and float(said[1]) == pytest.approx(worst[0] * 100, abs=0.1), part
        assert (said[2], int(said[3])) == worst[1]
    assert "best by c, measured / simulated" in depth and "c=4 d2 / d2" in depth and "c=256 off / off" in depth


def test_calibrate_averages_a_states_windows_and_leaves_auto_out(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep.csv"
    sweep.write_text("label,concurrency,mode,round,tok_s\n"
                     "mine,4,d2,0,1200.0\nmine,4,d2,1,1300.0\nmine,4,auto,0,1250.0\nmine,4,off,0,700.0\n"
                     "server2,4,-,0,730.0\n", encoding="utf-8")
    done = calibrate("--preset", "h200-llama8b", "--depth-csv", str(sweep), "--acc-len", "2.0")
    assert done.returncode == 0, done.stderr
    mine, other = done.stdout.split("depth check (not fitted): mine")[1].split("depth check (not fitted): server2")
    assert "SGLang's simulated acceptance 2 (match-expected: 2.00 at d2)" in mine
    assert [(m[1], m[2], m[3]) for m in ROW.finditer(mine)] == [("d2", "4", "1250.0"), ("off", "4", "700.0")]
    assert [(m[1], m[3]) for m in ROW.finditer(other)] == [("nospec", "730.0")]
    assert "worst point at c < 48" in mine and "c >= 48" not in mine


@pytest.mark.parametrize(("text", "said"), [
    (None, "No such file or directory"),
    ("mode,tok_s\nd1,3.0\n", "not a sweep CSV (no label, concurrency column)"),
    ("label,concurrency,mode,tok_s\nx,4,d2,fast\n", "line 2: tok_s 'fast' is not a number"),
    ("label,concurrency,mode,tok_s\nx,4,on,900\n", "line 2: mode 'on' is none of dN, off, - or auto"),
    ("label,concurrency,mode,tok_s\nx,4,auto,900\n", "no windows of a dN, off or - mode"),
    (b"\xff\xfe\x00garbled\x81", "not a sweep CSV"),
])
def test_calibrate_refuses_an_unreadable_sweep_in_one_line(tmp_path: Path, text: str | bytes | None,
                                                           said: str) -> None:
    path = tmp_path / "sweep.csv"
    if isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text, encoding="utf-8")
    done = calibrate("--preset", "h200-llama8b", "--depth-csv", str(path))
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"calibrate: --depth-csv: {path}")
    assert said in done.stderr and "Traceback" not in done.stderr


def test_calibrate_wants_one_preset_for_a_sweep() -> None:
    done = calibrate("--depth-csv", str(SWEEP))
    assert done.returncode == 2 and "--depth-csv needs one --preset" in done.stderr and done.stdout == ""
