"""`specctl depth-costs`: the cost table measured from a real simulator's journal, pinned depth by depth.

The simulator runs under `specctl run --headless`, each depth is pinned through the real CLI until its
decode steps are enough for a cell, and the command reads the journal the supervisor wrote.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specctl.runtime.core import records
from specctl.runtime.core.depth_model import read_costs
from specctl.runtime.sim.depth import cost_table
from specctl.runtime.sim.presets import PRESETS
from specctl.runtime.supervisor.depth_fit import DEFAULT_BUCKETS, MAX_GAP_S, MIN_INTERVAL_S, intervals

from support.headless import Headless, wait_for

PRESET = "h200-llama8b"  # the simulator's default preset
BATCH = 8  # steady:c=8 keeps 7-8 requests running: bucket 8
STEPS_PER_DEPTH = 400  # decode steps pinned at each depth: about 15 intervals of 0.2 s, three times a cell's need


def specctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specctl.console.cli.main", *args],
                          capture_output=True, text=True, timeout=120)


def steps_at(sample: dict[str, Any], depth: int) -> int:
    spec = sample["spec"]
    return spec["steps_off"] if depth == 0 else spec["steps_at"].get(str(depth), 0)


def _pin(sup: Headless, depth: int) -> None:
    """Pin ``depth`` through the CLI and wait until the server ran STEPS_PER_DEPTH decode steps at it."""
    done = sup.cli(*(("force-on", "--steps", str(depth)) if depth else ("force-off",)))
    assert done.returncode == 0, done.stderr
    start = wait_for(lambda: (s := sup.records("sample")[-1])["spec"]["depth"] == depth and s,
                     f"depth {depth} in the samples")
    wait_for(lambda: steps_at(sup.records("sample")[-1], depth) - steps_at(start, depth) >= STEPS_PER_DEPTH,
             f"{STEPS_PER_DEPTH} decode steps at depth {depth}")


@pytest.fixture(scope="module")
def pinned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A journal with each depth pinned in turn at a steady batch, and the preset's predicted table."""
    tmp = tmp_path_factory.mktemp("depthfit")
    prior = tmp / "prior.json"
    made = subprocess.run([sys.executable, "-m", "specctl.runtime.sim.depth", "--preset", PRESET, "--out", str(prior)],
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    sup = Headless(tmp, "--sim-load", f"steady:c={BATCH}", "--speculative-candidate-steps", "0,1,2,3",
                   "--set", "min_accept=0.3")
    try:
        sup.ready_sample()
        for depth in (1, 2, 3, 0):
            _pin(sup, depth)
    finally:
        assert sup.stop() == 0
    return {"journal": sup.journal, "prior": prior, "tmp": tmp}


@pytest.mark.slow
def test_pinned_depths_are_measured_in_the_simulators_order_and_the_table_starts_a_server(
        pinned: dict[str, Path]) -> None:
    table_path = pinned["tmp"] / "T.json"
    out = specctl("depth-costs", str(pinned["journal"]), "--prior", str(pinned["prior"]), "--out", str(table_path))
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.split()[:1] == [str(BATCH)])
    assert row.count(" ms (") == 4, out.stdout  # all four depths measured at the load that ran
    assert f"wrote {table_path}" in out.stdout

    table = read_costs(table_path)  # what the plugin and `run --depth-costs` read
    doc = json.loads(table_path.read_text())
    i = table.buckets.index(BATCH)
    assert all(cell is not None for cell in doc["evidence"][i]), doc["evidence"][i]
    measured = dict(zip(table.depths, table.step_s[i]))
    preset = PRESETS[PRESET]
    model = dict(zip(table.depths, cost_table(preset.params, preset.workload, table.depths, (BATCH,)).step_s[0]))
    for d in table.depths:  # the simulator's step includes its modelled overheads: a generous factor
        assert 0.5 <= measured[d] / model[d] <= 2.0, (d, measured[d], model[d])
    # Ordered as the model orders them where its margin (40 % off against on, 12 % between 1 and 3 steps)
    # is well above an interval's jitter; 1 against 2 and 2 against 3 differ by 5 %, within it.
    assert model[0] < model[1] < model[3]
    assert measured[0] < min(measured[1], measured[2], measured[3]) and measured[1] < measured[3], measured

    prior = read_costs(pinned["prior"])
    assert table.buckets == prior.buckets and table.depths == prior.depths
    for j, b in enumerate(table.buckets):
        if b != BATCH:  # no evidence there: the prior's values, unchanged
            assert table.step_s[j] == pytest.approx(prior.step_s[j], rel=1e-9, abs=1e-12), b
            assert doc["evidence"][j] == [None] * 4

    (pinned["tmp"] / "again").mkdir()
    sup = Headless(pinned["tmp"] / "again", "--speculative-candidate-steps", "0,1,2,3",
                   "--depth-costs", str(table_path), "--set", "min_accept=0.3")
    try:  # `run` checks the table at start (check_depth_costs: exit 2 on one it refuses), then hands it over
        wait_for(lambda: sup.proc.poll() is not None
                 or any(r["server"]["state"] == "ready" for r in sup.records("sample")),
                 "the server ready, or a refusal")
        assert sup.proc.poll() is None, sup.told()
        sample = sup.ready_sample()
        argv = Path(f"/proc/{sample['server']['pid']}/cmdline").read_bytes().split(b"\0")
        assert str(table_path.resolve()).encode() in argv  # the simulator prices with the measured table
        assert sample["spec"]["depth_model"] is True
    finally:
        assert sup.stop() == 0


@pytest.mark.slow  # reads the journal the pinned fixture takes ~18 s of real windows to write
def test_without_a_prior_the_cells_without_evidence_are_named_and_nothing_is_written(pinned: dict[str, Path]) -> None:
    table_path = pinned["tmp"] / "none.json"
    out = specctl("depth-costs", str(pinned["journal"]), "--out", str(table_path))
    assert out.returncode == 1 and not table_path.exists()
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "batch 1: depth 0,1,2,3" in out.stderr and "batch 256: depth 0,1,2,3" in out.stderr
    assert f"batch {BATCH}:" not in out.stderr  # measured
    assert "specctl force-on --steps" in out.stderr and "--prior" in out.stderr
    rows = {line.split()[0]: line for line in out.stdout.splitlines() if line.split()[:1] != ["batch"]}
    assert rows[str(BATCH)].count(" ms (") == 4 and rows["1"].split()[1:] == ["-"] * 4

    out = specctl("depth-costs", str(pinned["journal"]))  # no --out: the coverage only
    assert out.returncode == 1 and "nothing written" in out.stderr


# -- refusals: one line, exit 2, nothing written ------------------------------------------------------------
def _sample(t: float, *, pid: int = 100, uptime: float = 10.0, step: int = 0, at: dict[str, int] | None = None,
            running: float = 8.0, built: list[int] | None = None, spec: bool = True) -> dict[str, Any]:
    """A sample as the supervisor journals it (records.sample), with the fields the fit reads."""
    server: records.Server = {"state": "ready", "running": running, "pid": pid, "restarts": 0, "uptime_s": uptime}
    policy: records.Spec = {"step": step, "steps_at": dict(at or {}), "depth": 0,
                            "settings": {"candidates": [0, 1, 2, 3] if built is None else built}}
    return dict(records.sample(server, policy if spec else None, [], [], sim=True, t=t))


def _journal(path: Path, samples: list[dict[str, Any]]) -> Path:
    path.write_text("".join(records.dumps(s) + "\n" for s in samples), encoding="utf-8")
    return path


def _steady(n: int = 20, built: list[int] | None = None) -> list[dict[str, Any]]:
    return [_sample(1000 + 0.25 * k, uptime=10 + 0.25 * k, step=25 * k, built=built) for k in range(n)]


@pytest.mark.parametrize("case", ["missing journal", "a folder for a journal", "no several-depth server",
                                  "not a journal", "garbled prior", "a prior that is no table",
                                  "out in no folder", "out is a folder"])
def test_bad_input_is_refused_in_one_line_and_nothing_is_written(tmp_path: Path, case: str) -> None:
    good = _journal(tmp_path / "good.jsonl", _steady())
    out_path = tmp_path / "T.json"
    journal, extra = str(good), ["--out", str(out_path)]
    if case == "missing journal":
        journal = str(tmp_path / "absent.jsonl")
    elif case == "a folder for a journal":
        journal = str(tmp_path)
    elif case == "no several-depth server":
        journal = str(_journal(tmp_path / "single.jsonl", _steady(built=[])))
    elif case == "not a journal":
        (tmp_path / "junk.jsonl").write_bytes(b"\x00\xffnot json\n{\"kind\": 3}\n")
        journal = str(tmp_path / "junk.jsonl")
    elif case == "garbled prior":
        (tmp_path / "p.json").write_text("{\"buckets\": [1, 2")
        extra += ["--prior", str(tmp_path / "p.json")]
    elif case == "a prior that is no table":
        (tmp_path / "p.json").write_text(json.dumps({"buckets": [1], "depths": [0, 1], "step_ms": [[0, 1]]}))
        extra += ["--prior", str(tmp_path / "p.json")]
    elif case == "out in no folder":
        out_path = tmp_path / "nowhere" / "T.json"
        extra = ["--out", str(out_path)]
    elif case == "out is a folder":
        out_path = tmp_path / "dir"
        out_path.mkdir()
        extra = ["--out", str(out_path)]
    before = sorted(p.name for p in tmp_path.iterdir())
    out = specctl("depth-costs", journal, *extra)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.startswith("specctl depth-costs: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert case != "out is a folder" or not any(out_path.iterdir())


def test_a_prior_fills_what_the_journal_did_not_measure_and_its_cell_is_replaced(tmp_path: Path) -> None:
    """A made-up journal: depth 0 only, 25 decode steps every 0.25 s (10 ms a step) at batch 8."""
    good = _journal(tmp_path / "good.jsonl", _steady())
    prior = tmp_path / "p.json"
    prior.write_text(json.dumps({"buckets": [1, 8], "depths": [0, 1, 2, 3], "step_ms": [[4, 5, 6, 7], [8, 9, 9, 9]]}))
    out = specctl("depth-costs", str(good), "--prior", str(prior), "--out", str(tmp_path / "T.json"))
    assert out.returncode == 0, out.stderr
    assert "10.000 ms (475/19)" in out.stdout, out.stdout
    # measured d0 10 ms beside the prior's 9 ms for d1-d3: a deeper draft reads cheaper, the policy pools the row
    pooled = [line for line in out.stdout.splitlines() if "the policy prices these depths alike" in line]
    assert pooled and pooled[0].endswith(": batch 8: d0-d3 at 9.250 ms"), out.stdout  # batch 1's row rises
    table = read_costs(tmp_path / "T.json")
    assert table.buckets == (1, 8) and table.depths == (0, 1, 2, 3)
    assert [[round(v * 1e3, 6) for v in row] for row in table.step_s] == [[4, 5, 6, 7], [10, 9, 9, 9]]

    short = _journal(tmp_path / "short.jsonl", _steady(3))  # 2 intervals: no cell measured, the prior's own table
    out = specctl("depth-costs", str(short), "--prior", str(prior), "--out", str(tmp_path / "S.json"))
    assert out.returncode == 1 and not (tmp_path / "S.json").exists() and "Traceback" not in out.stderr
    assert "no cell has enough evidence" in out.stderr and "prior [50/2]" in out.stdout, (out.stdout, out.stderr)
    assert "prices these depths alike" not in out.stdout, "the prior's 9, 9, 9 are equal, not pooled"

    narrow = tmp_path / "narrow.json"  # a prior without a column for built depths 1 and 2: those stay empty
    narrow.write_text(json.dumps({"buckets": [1, 8], "depths": [0, 3], "step_ms": [[4, 7], [8, 9]]}))
    out = specctl("depth-costs", str(good), "--prior", str(narrow), "--out", str(tmp_path / "N.json"))
    assert out.returncode == 1 and not (tmp_path / "N.json").exists()
    assert "no value for 4 cells (batch 1: depth 1,2; batch 8: depth 1,2)" in out.stderr, out.stderr


# -- the interval rule, on synthetic samples ----------------------------------------------------------------
# Nearest of DEFAULT_BUCKETS, by hand: a tie (6 between 4 and 8) goes to the smaller.
NEAREST = {0.0: None, 1.0: 1, 4.0: 4, 6.0: 4, 7.0: 8, 8.0: 8, 9.0: 8, 30.0: 32}
tick = st.fixed_dictionaries({
    "dt": st.sampled_from([0.05, 0.2, 0.25, 0.3, 1.9, 2.5]),
    "restart": st.sampled_from([None, None, None, None, "pid", "count"]),
    "unreachable": st.sampled_from([False] * 7 + [True]),
    "moves": st.dictionaries(st.integers(0, 3), st.integers(0, 30), max_size=3),
    "running": st.sampled_from(sorted(NEAREST)),
})


@settings(max_examples=300, deadline=None)
@given(start_running=st.sampled_from(sorted(NEAREST)), ticks=st.lists(tick, max_size=25))
def test_only_steady_single_depth_intervals_of_one_server_start_are_counted(
        start_running: float, ticks: list[dict[str, Any]]) -> None:
    t, pid, restarts, uptime, step, at, running = 1000.0, 100, 0, 5.0, 0, {}, start_running
    samples = [_sample(t, pid=pid, uptime=uptime, step=step, at=at, running=running)]
    samples[0]["server"]["restarts"] = restarts
    expected = []
    reachable = True
    for k in ticks:
        before, t = t, t + k["dt"]
        n = sum(k["moves"].values())
        if k["restart"] == "pid":
            pid, uptime, step, at = pid + 1, 0.5, 0, {}
        elif k["restart"] == "count":
            restarts, uptime, step, at = restarts + 1, 0.5, 0, {}
        else:
            uptime += k["dt"]
        step += n
        at = dict(at)
        for depth, count in k["moves"].items():
            if depth and count:
                at[str(depth)] = at.get(str(depth), 0) + count
        depths = {d for d, c in k["moves"].items() if c}
        counted = (reachable and not k["unreachable"] and k["restart"] is None
                   and MIN_INTERVAL_S <= k["dt"] <= MAX_GAP_S and n > 0 and len(depths) == 1
                   and NEAREST[running] is not None and NEAREST[running] == NEAREST[k["running"]])
        if counted:
            expected.append((before, depths.pop(), n))
        running, reachable = k["running"], not k["unreachable"]
        sample = _sample(t, pid=pid, uptime=uptime, step=step, at=at, running=running, spec=reachable)
        sample["server"]["restarts"] = restarts
        samples.append(sample)
    found = intervals(samples, DEFAULT_BUCKETS)
    assert [(i.start, i.depth, i.steps) for i in found] == expected
    for i in found:
        assert i.step_s == pytest.approx(next(b["t"] - a["t"] for a, b in zip(samples, samples[1:])
                                              if a["t"] == i.start) / i.steps)
