"""bench/gpu/trace_load.py against the simulator: issue 22's changing-load trace, per configuration.

The GPU phase depthtrace runs it for minutes of scarce device time; here a
tiny trace (phases a tenth as long, two levels) runs against
``python -m specctl.runtime.sim`` over real HTTP, switched by the same ctl.py
calls run_fast_off.sh's depth_switch makes, and the test reads its CSV, its
prompt log and its table as the operator would.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_bench_gpu_dryrun import assert_clean, dry_run

from support.benches import load_bench
from support.sim_process import sim_process

pytestmark = pytest.mark.bench  # tests a bench/ script: the second tier

REPO = Path(__file__).resolve().parent.parent
GPU = REPO / "bench" / "gpu"
sys.path.insert(0, str(GPU))
from trace_schedule import TRACE_S, trace_levels  # noqa: E402  (bench/gpu is not a package)

SEED, TRACE, SCALE, LEVELS = 3, 5.0, 0.1, (2, 6)  # 50 s of schedule shrunk to 5 s: phases of 1-2 s
TINY = ["--trace-s", str(TRACE), "--trace-seed", str(SEED), "--time-scale", str(SCALE),
        "--levels", ",".join(map(str, LEVELS)), "--input-len", "32", "--output-len", "16", "--settle", "0.2"]


def tool(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(GPU / "trace_load.py"), *argv], capture_output=True, text=True,
                          timeout=300)


def read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def prompt_sets(path: Path) -> dict[str, set[str]]:
    """The prompt log: '# CONFIG' lines, then one SHA-1 per prompt that configuration sent."""
    sets: dict[str, set[str]] = {}
    current = ""
    for line in path.read_text().splitlines():
        if line.startswith("# "):
            current = line[2:]
            sets[current] = set()
        else:
            sets[current].add(line)
    return sets


@pytest.fixture
def depth_sim(tmp_path: Path) -> Iterator[str]:
    """A specctl simulator built with depths 0-3 (as depthtrace's server), no load of its own."""
    with sim_process(tmp_path, "--load", "idle", "--steps", "3", "--set", "candidates=0,1,2,3") as url:
        yield url


def depth_switch(tmp_path: Path, url: str) -> str:
    """run_fast_off.sh's depth_switch: dN pins depth N forced on (min_accept 0, or the policy refuses depth 1),
    off and auto at steps 3 with the server's own acceptance floor; a refused change exits non-zero."""
    floor = json.loads(subprocess.run([sys.executable, str(GPU / "ctl.py"), url, "state"], capture_output=True,
                                      text=True, timeout=60).stdout)["settings"]["min_accept"]
    script = tmp_path / "depth.sh"
    ctl = f"{sys.executable} {GPU / 'ctl.py'} {url} set"
    script.write_text("ok() { grep -Eq '\"set\": \\[true(, true)*\\]'; }\n"
                      f"case $1 in\n  d*) {ctl} min_accept=0 mode=1 steps=${{1#d}} | ok ;;\n"
                      f"  off) {ctl} mode=2 steps=3 min_accept={floor} | ok ;;\n"
                      f"  auto) {ctl} mode=0 steps=3 min_accept={floor} | ok ;;\nesac\n")
    return f"bash {script} {{mode}}"


def test_the_gpu_trace_is_the_first_phases_of_the_simulators() -> None:
    """policy_envelope's run_trace and trace_load draw from one function: a shorter trace is a prefix."""
    envelope = load_bench("policy_envelope")
    assert envelope.trace_levels is trace_levels
    full, short = trace_levels(0, TRACE_S), trace_levels(0, 120.0)
    assert short == full[:len(short)] and 120.0 <= short[-1][0] < 140.0
    assert all(10.0 <= b[0] - a[0] <= 20.0 for a, b in zip([(0.0, 0), *short], short))
    done = tool("--plan", "--trace-s", "120")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:len(short)] == [f"{u:.1f}:{lvl}" for u, lvl in short]


def test_the_traces_ceiling_prices_each_phase_at_the_sweeps_best_static() -> None:
    """policy_envelope's ceiling: the seconds at each level (trace_schedule.phase_seconds) times the best rate there."""
    envelope = load_bench("policy_envelope")
    from specctl.runtime.sim.offline import PointResult

    spent = envelope.phase_seconds(0, 120.0)
    assert sum(spent.values()) == pytest.approx(trace_levels(0, 120.0)[-1][0])  # every phase, the last whole
    # none 100 tok/s everywhere; depth 2 300 at the levels below 32, 10 above; depth 3 50 everywhere
    rows = [(c, {"none": PointResult(c, 100.0, 1.0, None, None),
                 "2": PointResult(c, 300.0 if c < 32 else 10.0, 2.8, 1.0, 0),
                 "3": PointResult(c, 50.0, 2.8, 1.0, 0)}) for c in envelope.DEPTH_CONCURRENCIES]
    low = sum(t for c, t in spent.items() if c < 32)
    totals = {"none": 100.0 * sum(spent.values()), "2": 300.0 * low + 10.0 * (sum(spent.values()) - low)}
    best = max(totals, key=totals.__getitem__)
    top = (300.0 * low + 100.0 * (sum(spent.values()) - low)) / totals[best]
    line = envelope.ceiling_line(rows, (0, 2, 3), 120.0)
    assert line == (f"ceiling (every phase at the sweep's best static for its load, switches free): {top:.3f} x the"
                    f" best single static ({best}); none or 3 only: {100.0 * sum(spent.values()) / totals[best]:.3f}")
    assert "no point at c = 4" in envelope.ceiling_line([r for r in rows if r[0] != 4], (0, 2, 3), 120.0)


def test_each_configuration_runs_the_seeded_schedule_with_its_own_prompts(depth_sim: str, tmp_path: Path) -> None:
    out, prompts = tmp_path / "trace.csv", tmp_path / "prompts.txt"
    done = tool("--url", depth_sim, "--configs", "d1", "off", "auto", "--switch", depth_switch(tmp_path, depth_sim),
                "--prompt-seed", "100", "--label", "t", "--csv", str(out), "--prompts-log", str(prompts), *TINY)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = read(out)
    expected = [(round(u * SCALE, 2), lvl) for u, lvl in trace_levels(SEED, TRACE / SCALE, LEVELS)]
    assert len({lvl for _, lvl in expected}) == 2  # the seed makes the level change
    summaries = {r["config"]: r for r in rows if r["phase"] == "all"}
    assert set(summaries) == {"d1", "off", "auto"}
    for config in summaries:
        phases = [r for r in rows if r["config"] == config and r["phase"] != "all"]
        assert [(float(r["until_s"]), int(r["level"])) for r in phases] == expected
        assert [int(r["phase"]) for r in phases] == list(range(len(expected)))
        assert all(float(r["tok_s"]) > 0 for r in phases), phases
    for r in summaries.values():
        assert float(r["tok_s"]) > 0 and float(r["completion_tok_s"]) > 0 and float(r["tpot_p50_ms"]) > 0, r
        assert int(r["reqs_done"]) > 0 and r["switch_rc"] == "0" and r["errors"] == "0", r
    # the pins hold: the steps gauge reads the depth each configuration was switched to
    assert float(summaries["d1"]["steps"]) == 1.0 and float(summaries["d1"]["on_share"]) == 1.0
    assert float(summaries["off"]["steps"]) == 0.0 and float(summaries["off"]["on_share"]) == 0.0
    # own prompt seeds (--prompt-seed + position), so no configuration resends another's prompts
    assert [summaries[c]["prompt_seed"] for c in ("d1", "off", "auto")] == ["100", "101", "102"]
    assert len({r["prompt_sha"] for r in summaries.values()}) == 3
    sent = prompt_sets(prompts)
    assert set(sent) == {"d1", "off", "auto"} and all(sent.values())
    assert not (sent["d1"] & sent["off"]) and not (sent["d1"] & sent["auto"]) and not (sent["off"] & sent["auto"])
    assert "auto / best single static" in done.stdout and "goal >= 1.05" in done.stdout
    for config in summaries:
        assert f"| {config} | {summaries[config]['tok_s']} |" in done.stdout


def test_none_runs_unswitched_on_a_server_without_speculation(tmp_path: Path) -> None:
    """depthtrace's 'none': no switch command, no specctl gauges; its row joins the same table."""
    out = tmp_path / "trace.csv"
    with sim_process(tmp_path, "--load", "idle", "--no-speculation") as url:
        done = tool("--url", url, "--configs", "none", "--label", "t", "--csv", str(out), *TINY)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = [r for r in read(out) if r["phase"] == "all"]
    assert len(summary) == 1 and summary[0]["config"] == "none"
    assert float(summary[0]["tok_s"]) > 0 and summary[0]["steps"] == "" and summary[0]["switch_rc"] == ""
    table = tool("--table", str(out), "--label", "t")
    assert table.returncode == 0 and "| none |" in table.stdout
    assert "needs auto and at least one static configuration" in table.stdout


@pytest.mark.parametrize(("argv", "said"), [
    (["--configs", "none", "d1", "--switch", "x"], "'none' (a server without speculation) goes alone"),
    (["--configs", "d1", "auto"], "need --switch"),
    (["--configs", "d1", "d1", "--switch", "x"], "named twice"),
    (["--levels", "0,4"], "--levels"),
    (["--table", "/nonexistent/trace.csv"], "cannot read /nonexistent/trace.csv"),
])
def test_bad_arguments_are_one_line_and_no_run(argv: list[str], said: str) -> None:
    done = tool(*argv)
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_the_table_leaves_out_a_static_whose_switch_failed_and_reads_several_csvs(tmp_path: Path) -> None:
    """A pin the server refused ran in another mode: it must not become 'the best static'."""
    fields = ["label", "config", "phase", "until_s", "level", "tok_s", "tpot_p50_ms", "switch_rc", "trace_seed"]

    def write(path: Path, rows: list[tuple[str, str, str, str]]) -> str:
        with path.open("w", newline="") as fh:
            out = csv.writer(fh)
            out.writerow(fields)
            for config, tok, tpot, rc in rows:
                out.writerow(["t", config, 0, 12.0, 4, tok, tpot, rc, 0])
                out.writerow(["t", config, "all", 12.0, "", tok, tpot, rc, 0])
        return str(path)

    first = write(tmp_path / "a.csv", [("d1", "1000", "5", "1"), ("d2", "800", "6", "0")])
    second = write(tmp_path / "b.csv", [("auto", "880", "5.4", "0"), ("none", "700", "7", "")])
    done = tool("--table", first, second, "--label", "t")
    assert done.returncode == 0, done.stderr
    assert "| d1 (SWITCH FAILED, rc 1) | 1000 |" in done.stdout and "| none | 700 |" in done.stdout
    assert "auto / best single static (d2, of d2, none): tok/s 1.100 (goal >= 1.05: met), p50 TPOT 0.900" \
        in done.stdout


def test_depthtrace_refuses_to_start_without_a_cost_table(sock_dir: Path) -> None:
    run = dry_run(sock_dir, "depthtrace", "pack", DEPTHS="0,1,2,3", TRACE_S="5")
    assert run.rc == 3 and "no cost table: run depthsweep first or set DEPTH_COSTS" in run.log, run.log[-3000:]
    assert "starting depthtrace" not in run.log and run.log.rstrip().endswith("done; FAILED: depthtrace")


def test_depthtrace_runs_each_configuration_then_none_and_prints_the_goals(sock_dir: Path) -> None:
    """The phase as the operator starts it (dry run): the specctl server's pins and auto, then the no-spec
    server's 'none', in one CSV and one table."""
    costs = sock_dir / "costs.json"
    made = subprocess.run([sys.executable, "-m", "specctl.runtime.sim.depth", "--preset", "h200-llama8b",
                           "--depths", "0,1,2,3", "--out", str(costs)], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    run = dry_run(sock_dir, "depthtrace", "pack", DEPTHS="0,1,2,3", DEPTH_COSTS=str(costs), TRACE_S="5",
                  TRACE_SEED="1", TRACE_CONFIGS="d2 auto", IL_INPUT="64", IL_OUTPUT="32")
    assert_clean(run, "depthtrace", "pack")
    assert re.search(r"depthtrace: 3 traces of \d+s \(TRACE_S=5, seed 1\) \+ 2 server start\(s\)", run.log)
    rows = read(run.out / "trace-triton.csv")
    summaries = {r["config"]: r for r in rows if r["phase"] == "all"}
    assert list(summaries) == ["auto", "d2", "none"]  # TRACE_SEED 1 rotates the order by one; none comes last
    assert float(summaries["d2"]["steps"]) == 2.0 and summaries["none"]["steps"] == ""
    assert len({r["prompt_seed"] for r in summaries.values()}) == 3
    expected = [(round(u, 2), lvl) for u, lvl in trace_levels(1, 5.0)]
    for config in summaries:
        phases = [r for r in rows if r["config"] == config and r["phase"] != "all"]
        assert [(float(r["until_s"]), int(r["level"])) for r in phases] == expected
        assert float(summaries[config]["tok_s"]) > 0
    table = (run.out / "trace-table-triton.txt").read_text()
    assert "auto / best single static" in table and "| none |" in table and "goal >= 1.05" in table


def test_the_table_says_how_far_the_same_state_read_apart_in_the_gpus_trace() -> None:
    """The GPU's first trace (committed): at 48 and 128 requests auto and off both ran off."""
    gpu = Path(__file__).resolve().parents[1] / "bench/gpu/results/depth/triton-trace.csv"
    done = tool("--table", str(gpu))
    assert done.returncode == 0, done.stderr
    assert "auto / best single static (off, of off): tok/s 1.051" in done.stdout
    assert "phases where auto ran off's own state throughout (level: auto / off; the traces' noise, not a choice): " \
        "48: 0.925, 128: 0.970" in done.stdout


def test_two_traces_of_the_same_configurations_get_a_table_each_and_their_mean() -> None:
    """The GPU's two traces (second and third sittings): off and auto in both, d2 in the second only.

    Before, the second trace's rows stood for both (and d2 joined the first);
    each trace now has its own best static, and the goal reads over the two.
    """
    depth = Path(__file__).resolve().parents[1] / "bench/gpu/results/depth"
    done = tool("--table", str(depth / "triton-trace.csv"), str(depth / "triton-trace2.csv"))
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.split("## trace 2 of 2")
    assert "## trace 1 of 2" in first and "| d2 |" not in first and "| d2 |" in second
    assert "auto / best single static (off, of off): tok/s 1.051" in first
    assert "auto / best single static (off, of d2, off): tok/s 1.047" in second
    assert "48: 0.925, 128: 0.970" in first and "128: 0.939" in second and "0.970" not in second
    assert "tok/s mean 1.049 (1.051, 1.047; goal >= 1.05), p50 TPOT mean 0.940" in second
