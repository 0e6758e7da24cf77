"""The GPU bench tools, run here against the simulator: what they measure, and the tables they print.

bench/gpu/ runs on the device machine, where a mistake costs scarce GPU
minutes; these tests run the same scripts as processes over real HTTP.
"""

from __future__ import annotations

import csv
import gzip
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from support.sim_process import sim_process

pytestmark = pytest.mark.bench  # tests a bench/ script: the second tier

GPU = Path(__file__).resolve().parent.parent / "bench" / "gpu"
DEADLINE_S = 60.0


def idle_simulator(tmp_path: Path, *settings: str) -> Iterator[str]:
    """A simulator (Triton preset) with no load of its own and ``settings`` (KEY=VALUE); stopped at the end."""
    sets = [w for kv in ("off_at=1000", "on_at=999", *settings) for w in ("--set", kv)]
    with sim_process(tmp_path, "--load", "idle", *sets) as url:
        yield url


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[str]:
    """A simulator (Triton preset) with no load of its own; stopped at the end."""
    yield from idle_simulator(tmp_path)


def tool(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=300)


TOK_TPOT = ["label", "concurrency", "mode", "round", "tok_s", "tpot_ms"]  # the columns report.py's sweep tables read


def write_csv(path: Path, fields: list[str], rows: Iterable[Sequence[Any]]) -> None:
    """A CSV as interleave.py writes it: a header, then one line per window."""
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(fields)
        writer.writerows(rows)


def test_interleave_switches_the_mode_per_window_under_one_load(sim: str, tmp_path: Path) -> None:
    out = tmp_path / "windows.csv"
    done = tool(str(GPU / "interleave.py"), "--url", sim, "--concs", "2", "8", "--modes", "on", "off",
                "--rounds", "2", "--window", "1", "--settle", "0.3", "--warmup", "0.5",
                "--input-len", "32", "--output-len", "16", "--label", "specctl-sim", "--csv", str(out),
                "--switch", f"{sys.executable} {GPU / 'ctl.py'} {sim} mode {{mode}}")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = list(csv.DictReader(out.open()))
    assert [(r["concurrency"], r["mode"], r["round"]) for r in rows] == [
        (c, m, r) for c in ("2", "8") for r in ("0", "1") for m in ("on", "off")]
    assert all(float(r["tok_s"]) > 0 and r["switch_rc"] == "0" for r in rows)
    assert all(0 <= float(r["cpu_busy"]) <= 100 and 0 <= float(r["cpu_steal"]) <= 100 for r in rows)
    assert {r["mode"]: r["steps"] for r in rows if r["concurrency"] == "8"} == {"on": "3.0", "off": "0.0"}
    # the accept-length gauge lands in its column (depth_table.py reads it): drafts accepted while on, none off
    accept = {m: [float(r["accept_len"]) for r in rows if r["mode"] == m] for m in ("on", "off")}
    assert min(accept["on"]) > 1.0 and max(accept["off"]) < min(accept["on"]), accept
    assert "c=8 off:" in done.stdout


def test_interleave_rotates_which_mode_takes_the_first_window(sim: str, tmp_path: Path) -> None:
    out = tmp_path / "windows.csv"
    done = tool(str(GPU / "interleave.py"), "--url", sim, "--concs", "2", "8", "--modes", "on", "off",
                "--rounds", "2", "--rotate", "--window", "0.5", "--settle", "0.2", "--warmup", "0.3",
                "--input-len", "32", "--output-len", "16", "--label", "specctl-sim", "--csv", str(out),
                "--switch", f"{sys.executable} {GPU / 'ctl.py'} {sim} mode {{mode}}")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = list(csv.DictReader(out.open()))
    assert [(r["concurrency"], r["round"], r["mode"]) for r in rows] == [
        ("2", "0", "on"), ("2", "0", "off"), ("2", "1", "off"), ("2", "1", "on"),
        ("8", "0", "off"), ("8", "0", "on"), ("8", "1", "on"), ("8", "1", "off")]
    # the server really was in each mode when its window was measured
    assert {r["mode"]: r["steps"] for r in rows if r["concurrency"] == "8"} == {"on": "3.0", "off": "0.0"}


def test_auto_gets_its_own_settle_before_its_window(sim: str, tmp_path: Path) -> None:
    """--auto-settle: auto's window starts that long after its switch, every other mode's after --settle.

    A window ends (t_unix) a settle plus a window after the one before it ended; the sleep makes
    each gap at least that long, so the lower bounds below hold on any machine, however loaded.
    """
    out = tmp_path / "windows.csv"
    done = tool(str(GPU / "interleave.py"), "--url", sim, "--concs", "4", "--modes", "off", "auto", "on",
                "--rounds", "1", "--window", "0.5", "--settle", "0.2", "--auto-settle", "2.5", "--warmup", "0.3",
                "--input-len", "32", "--output-len", "16", "--label", "specctl-sim", "--csv", str(out),
                "--switch", f"{sys.executable} {GPU / 'ctl.py'} {sim} mode {{mode}}")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = list(csv.DictReader(out.open()))
    assert [r["mode"] for r in rows] == ["off", "auto", "on"]
    ends = [float(r["t_unix"]) for r in rows]
    assert ends[1] - ends[0] >= 2.5 + 0.5 - 0.1  # t_unix is rounded to 0.1 s
    assert ends[2] - ends[1] >= 0.2 + 0.5 - 0.1


def test_an_auto_settle_that_does_not_fit_the_budget_skips_the_load(sim: str, tmp_path: Path) -> None:
    out = tmp_path / "windows.csv"
    done = tool(str(GPU / "interleave.py"), "--url", sim, "--concs", "4", "--modes", "off", "auto",
                "--rounds", "1", "--window", "0.5", "--settle", "0.2", "--auto-settle", "60", "--warmup", "0.3",
                "--budget-s", "20", "--input-len", "32", "--output-len", "16", "--csv", str(out),
                "--switch", f"{sys.executable} {GPU / 'ctl.py'} {sim} mode {{mode}}")
    assert done.returncode == 1, done.stdout + done.stderr  # no window measured
    assert "skip c=4 and above: budget" in done.stdout
    assert not out.exists() or len(list(csv.DictReader(out.open()))) == 0


def test_the_steps_column_reads_specctls_gauge_before_sglangs() -> None:
    """SGLang 0.5.17 refreshes its steps gauge every 40 batches; specctl's plugin sets its own at every switch.

    At 256 requests the fourth sitting's pinned depth-1 windows read 1.12 and 0.0 from SGLang's gauge.
    """
    sys.path.insert(0, str(GPU))
    from interleave import gauge_mean

    stale_and_fresh = [{"sglang:spec_num_steps": 3.0, "specctl:spec_steps": 1.0}] * 3
    assert gauge_mean(stale_and_fresh, "steps") == 1.0
    sglang_only = [{"sglang:spec_num_steps": 3.0}, {"sglang:spec_num_steps": 1.0}]
    assert gauge_mean(sglang_only, "steps") == 2.0  # a server without the plugin
    assert gauge_mean([{}], "steps") == ""


@pytest.mark.parametrize("n", range(1, 8))
def test_the_turn_order_balances_first_windows_and_predecessors(n: int) -> None:
    # a plain rotation kept auto right after off in every depthauto round (2026-12-02); over the design's rows
    # every mode takes the first window equally often and follows every other mode equally often
    sys.path.insert(0, str(GPU))
    from interleave import turn_order

    modes = [f"m{i}" for i in range(n)]
    rows = [turn_order(modes, k) for k in range(n if n % 2 == 0 else 2 * n)]
    assert all(sorted(r) == modes for r in rows)
    firsts = {m: sum(r[0] == m for r in rows) for m in modes}
    assert len(set(firsts.values())) == 1, firsts
    follows = {(a, b): 0 for a in modes for b in modes if a != b}
    for r in rows:
        for a, b in zip(r, r[1:]):
            follows[(a, b)] += 1
    assert len(set(follows.values())) <= 1, follows
    assert turn_order(modes, len(rows)) == rows[0]  # the design repeats
    if n in (2, 3):  # there its first rows are the rotation the earlier sittings ran
        assert rows[1] == modes[1:] + modes[:1]


def test_interleave_refuses_modes_without_a_switch_command(tmp_path: Path) -> None:
    done = tool(str(GPU / "interleave.py"), "--modes", "on", "off")
    assert done.returncode == 2 and "need --switch" in done.stderr


def test_interleave_refuses_a_cpu_list_it_cannot_read() -> None:
    done = tool(str(GPU / "interleave.py"), "--cpus", "0-x")
    assert done.returncode == 2 and "--cpus takes a CPU list" in done.stderr and "Traceback" not in done.stderr


def test_report_puts_each_mode_in_its_column_with_the_ratios(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    rows = [("nospec-x", 64, "-", 0, 1000, 60), ("nospec-x", 64, "-", 1, 1100, 58),
            ("specctl-x", 64, "on", 0, 800, 80), ("specctl-x", 64, "off", 0, 1050, 61),
            ("specctl-x", 64, "auto", 0, 1040, 62)]
    write_csv(path, TOK_TPOT, rows)
    done = tool(str(GPU / "report.py"), str(path))
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("| 64 |"))
    # off / none = 1050 / 1050; auto / max(static 800, none 1050) = 1040 / 1050
    assert "| 1.000 (0.95-1.05) | 0.990 (0.95-1.04) |" in line
    assert line.startswith("| 64 | 1050 (1000-1100) [59.0] | 800 [80.0] |")


def test_report_drops_a_window_in_which_the_server_stalled_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    rows = [("nospec-x", 32, "-", 0, 1800, 17), ("nospec-x", 32, "-", 1, 0.0, ""),
            ("specctl-x", 32, "on", 0, 4300, 7), ("specctl-x", 32, "off", 0, 3800, 8),
            ("specctl-x", 32, "auto", 0, 4270, 7)]
    write_csv(path, TOK_TPOT, rows)
    done = tool(str(GPU / "report.py"), str(path))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "dropped a window with no tokens (nospec-x c=32 mode=- round=1)" in done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("| 32 |"))
    assert line.startswith("| 32 | 1800 [17.0] |"), "the stalled window is out of the mean"


def test_report_drops_a_window_whose_switch_failed_and_says_so(tmp_path: Path) -> None:
    # the ninth MoE sitting: `specctl auto` was refused while the server paused, so "auto" ran forced off
    path = tmp_path / "w.csv"
    rows = [("nospec-x", 1, "-", 0, 190, 5, ""), ("specctl-x", 1, "on", 0, 300, 3, 0),
            ("specctl-x", 1, "off", 0, 200, 5, 0), ("specctl-x", 1, "auto", 0, 135, 6, 1),
            ("specctl-x", 1, "auto", 1, 310, 3, 0)]
    write_csv(path, [*TOK_TPOT, "switch_rc"], rows)
    done = tool(str(GPU / "report.py"), str(path))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "dropped a window whose switch failed (specctl-x c=1 mode=auto round=0, rc 1)" in done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("| 1 |"))
    assert "| 310 [3.0] |" in line, "the failed switch's window is out of auto's mean"


def test_report_reads_the_static_tree_beside_the_chain_under_specctl(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    rows = [("nospec-x", 1, "-", 0, 200, 5), ("tree-x", 1, "-", 0, 250, 4), ("specctl-x", 1, "on", 0, 330, 3),
            ("specctl-x", 1, "off", 0, 198, 5), ("specctl-x", 1, "auto", 0, 325, 3),
            ("nospec-x", 64, "-", 0, 1000, 60), ("specctl-x", 64, "auto", 0, 990, 61)]
    write_csv(path, TOK_TPOT, rows)
    done = tool(str(GPU / "report.py"), str(path))
    assert done.returncode == 0, done.stderr
    header = next(x for x in done.stdout.splitlines() if x.startswith("| c | no spec"))
    assert "| static tree |" in header and header.endswith("| auto / tree |")
    one = next(x for x in done.stdout.splitlines() if x.startswith("| 1 |"))
    assert one.startswith("| 1 | 200 [5.0] | 330 [3.0] | 250 [4.0] | 198 [5.0] | 325 [3.0] |")
    assert one.endswith("| 1.300 (1.30-1.30) |")  # auto 325 over the tree's 250
    sixty_four = next(x for x in done.stdout.splitlines() if x.startswith("| 64 |"))
    assert sixty_four.endswith("| - |")  # no tree window at 64: no ratio invented
def test_report_reads_the_tree_under_the_switch_beside_the_static_tree_and_no_speculation(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    rows = [("nospec-x", 1, "-", 0, 200, 5), ("tree-x", 1, "-", 0, 340, 3), ("treesw-x", 1, "on", 0, 330, 3),
            ("treesw-x", 1, "off", 0, 196, 5), ("treesw-x", 1, "auto", 0, 320, 3),
            ("nospec-x", 64, "-", 0, 5900, 11), ("tree-x", 64, "-", 0, 2900, 22), ("treesw-x", 64, "on", 0, 2850, 22),
            ("treesw-x", 64, "off", 0, 5600, 11), ("treesw-x", 64, "auto", 0, 5500, 12)]
    write_csv(path, TOK_TPOT, rows)
    done = tool(str(GPU / "report.py"), str(path))
    assert done.returncode == 0, done.stderr
    assert "The tree under specctl's switch (SPECCTL_TREE_SWITCH=1)" in done.stdout
    lines = [x for x in done.stdout.split("The tree under specctl's switch")[1].splitlines() if x.startswith("| ")]
    one = next(x for x in lines if x.startswith("| 1 |"))
    # on / static tree 330 / 340; off / none 196 / 200; auto / max(tree 340, none 200); auto / max(on 330, off 196)
    assert one == ("| 1 | 200 [5.0] | 340 [3.0] | 330 [3.0] | 196 [5.0] | 320 [3.0] | 0.971 (0.97-0.97) | "
                   "0.980 (0.98-0.98) | 0.941 (0.94-0.94) | 0.970 (0.97-0.97) |")
    sixty_four = next(x for x in lines if x.startswith("| 64 |"))
    assert "| 0.949 (0.95-0.95) | 0.932 (0.93-0.93) | 0.982 (0.98-0.98) |" in sixty_four  # none is the best at 64


def test_report_reads_a_moe_runs_labels_as_any_other(tmp_path: Path) -> None:
    """run_fast_off.sh's MODEL=qwen3moe appends the model to every label; the kinds are read as ever."""
    path = tmp_path / "moe.csv"
    write_csv(path, TOK_TPOT, [("nospec-fa3-qwen3moe", 64, "-", 0, 1000, 60),
                               ("specctl-fa3-qwen3moe", 64, "on", 0, 1200, 50),
                               ("specctl-fa3-qwen3moe", 64, "off", 0, 990, 61),
                               ("specctl-fa3-qwen3moe", 64, "auto", 0, 1180, 51),
                               ("mixed-nospec-fa3-qwen3moe", 128, "-", 0, 900, 28),
                               ("mixed-off-fa3-qwen3moe", 128, "-", 0, 880, 29)])
    done = tool(str(GPU / "report.py"), str(path))
    assert done.returncode == 0, done.stderr
    assert "| 64 | 1000 [60.0] | 1200 [50.0] | 990 [61.0] | 1180 [51.0] | 0.990 (0.99-0.99) | 0.983 (0.98-0.98) |" \
        in done.stdout
    assert "| with arrivals | 128 | 900 [28.0] | 880 [29.0] | 0.978 (0.98-0.98) |" in done.stdout


def test_report_refuses_files_of_two_models(tmp_path: Path) -> None:
    """A MoE run's rows and a Llama run's would land in the same cells: it says so and prints no table."""
    llama, moe = tmp_path / "llama.csv", tmp_path / "moe.csv"
    write_csv(llama, TOK_TPOT, [("nospec-triton", 64, "-", 0, 1000, 60), ("specctl-on-triton", 1, "on", 0, 9, 1)])
    write_csv(moe, TOK_TPOT, [("specctl-triton-qwen3moe", 64, "off", 0, 990, 61)])
    done = tool(str(GPU / "report.py"), str(llama), str(moe))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("report.py: these files hold more than one target model (llama8b, qwen3moe); "
                           "give each model's files apart\n")
    assert tool(str(GPU / "report.py"), str(llama)).returncode == 0, "a Llama file alone: llama8b throughout"


def test_report_reads_the_scatter_from_auto_against_the_mode_it_ran_as(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    rows = [("specctl-x", 1, "on", 0, 300, 3.0), ("specctl-x", 1, "off", 0, 200, 0.0),
            ("specctl-x", 1, "auto", 0, 330, 3.0),
            ("specctl-x", 64, "on", 0, 800, 3.0), ("specctl-x", 64, "off", 0, 1000, 0.0),
            ("specctl-x", 64, "auto", 0, 950, 0.0),
            ("specctl-x", 128, "on", 0, 900, 3.0), ("specctl-x", 128, "off", 0, 1200, 0.0),
            ("specctl-x", 128, "auto", 0, 1100, 1.5)]
    write_csv(path, ["label", "concurrency", "mode", "round", "tok_s", "steps"], rows)
    done = tool(str(GPU / "report.py"), str(path))
    assert done.returncode == 0, done.stderr
    table = done.stdout.split("auto against the forced mode")[1]
    assert "| 1 | on (3 steps) | 1 / 1 | 1.100 (1.10-1.10) |" in table
    assert "| 64 | off (0 steps) | 1 / 1 | 0.950 (0.95-0.95) |" in table
    assert "| 128 |" not in table, "auto switched inside its window: no twin to read it against"


def test_report_compares_the_off_server_with_no_spec_per_load_shape(tmp_path: Path) -> None:
    path = tmp_path / "offcost.csv"
    rows = [("decodeonly-nospec-x", 256, "-", 0, 1000, 16), ("decodeonly-off-x", 256, "-", 0, 1010, 16),
            ("mixed-nospec-x", 256, "-", 0, 900, 28), ("mixed-nospec-x", 256, "-", 1, 1000, 27),
            ("mixed-off-x", 256, "cold", 0, 855, 30), ("mixed-off-x", 256, "warm", 0, 760, 32)]
    write_csv(path, TOK_TPOT, rows)
    done = tool(str(GPU / "report.py"), str(path))
    assert done.returncode == 0, done.stderr
    assert "static (forced on)" not in done.stdout, "no sweep rows, so no sweep table"
    decode = next(x for x in done.stdout.splitlines() if x.startswith("| decode only | 256 |"))
    assert "| 1010 [16.0] | 1.010 (1.01-1.01) | - | - |" in decode
    mixed = next(x for x in done.stdout.splitlines() if x.startswith("| with arrivals | 256 |"))
    # cold / none = 855 / 950, warm / none = 760 / 950
    assert mixed.endswith("| 0.900 (0.85-0.95) | 760 [32.0] | 0.800 (0.76-0.84) |")


def test_resume_compares_proposals_after_resuming_with_the_always_on_run(tmp_path: Path) -> None:
    trace = tmp_path / "drafts.jsonl.1"
    lines = [{"rid": "on:0", "len": n, "draft": [1, n, n, n]} for n in (10, 11, 12)]
    lines += [{"rid": "cold:0", "len": 11, "draft": [1, 0, 0, 0]},
              {"rid": "cold:0", "len": 12, "draft": [1, 12, 12, 12]}]
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    done = tool(str(GPU / "resume.py"), "on", str(trace))
    assert done.returncode == 0, done.stderr
    row = next(x for x in done.stdout.splitlines() if x.startswith("| cold |"))
    assert row.split("|")[2:4] == [" 0.0 % (3) ", " 100.0 % (3) "]


def test_cpu_ops_splits_each_scheduler_span_by_the_kind_of_step_it_serves(tmp_path: Path) -> None:
    def ev(cat: str, name: str, ts: float, dur: float, tid: int = 1) -> dict[str, object]:
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid}

    events = []
    for step, kind in enumerate(("DECODE", "DECODE", "EXTEND", "DECODE")):
        t0 = step * 10_000.0
        events += [ev("user_annotation", "scheduler.get_next_batch_to_run", t0, 1000),
                   ev("user_annotation", "scheduler.run_batch", t0 + 1500, 2000),
                   ev("user_annotation", f"step[{kind} bs=2]", t0 + 1600, 1500),
                   ev("user_annotation", "scheduler.process_batch_result", t0 + 4000, 500)]
        if kind == "DECODE":  # 2 x (select 100 µs holding a nested op) + item 50 µs
            events += [ev("cpu_op", "aten::select", t0 + 10, 100), ev("cpu_op", "aten::as_strided", t0 + 20, 10),
                       ev("cpu_op", "aten::select", t0 + 200, 100), ev("cpu_op", "aten::item", t0 + 400, 50),
                       ev("cpu_op", "aten::item", t0 + 500, 50, tid=2)]  # another thread's op: not this span's
        else:
            events += [ev("cpu_op", "aten::cat", t0 + 1550 + 100, 40)]
    trace = tmp_path / "t.trace.json.gz"
    with gzip.open(trace, "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    done = tool(str(GPU / "cpu_ops.py"), str(trace))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    at = lines.index("scheduler.get_next_batch_to_run [DECODE]: 1.000 ms/step, 0.250 ms in 3 top-level ops/step "
                     "(0.750 ms between them)")
    assert lines[at + 1].split() == ["0.200", "ms", "2.0/step", "aten::select"]
    assert lines[at + 2].split() == ["0.050", "ms", "1.0/step", "aten::item"]
    assert "scheduler.get_next_batch_to_run [EXTEND]: 1.000 ms/step, 0.000 ms in 0 top-level ops/step" in done.stdout
    assert "scheduler.run_batch [EXTEND]: 2.000 ms/step, 0.040 ms in 1 top-level ops/step" in done.stdout
    # each process_batch_result handles the batch launched one step earlier: the first has none
    assert "scheduler.process_batch_result [?]: 0.500 ms/step" in done.stdout
    assert "scheduler.process_batch_result [EXTEND]: 0.500 ms/step" in done.stdout
    assert done.stdout.count("scheduler.process_batch_result [") == 3
    assert "CPU probe (median us per call): aten::as_strided 10.00\n" in done.stdout


def test_cpu_ops_diff_tells_extra_ops_from_slower_ops(tmp_path: Path) -> None:
    """B's prefill: the same linear 10 % slower a call, and one op A does not run at all."""
    def trace(name: str, linear_us: float, extra: bool) -> str:
        events: list[dict[str, object]] = []
        for step in range(2):
            t0 = step * 10_000.0
            events += [{"ph": "X", "cat": "user_annotation", "name": "scheduler.run_batch", "ts": t0, "dur": 5000,
                        "tid": 1},
                       {"ph": "X", "cat": "user_annotation", "name": "step[EXTEND bs=1]", "ts": t0 + 1,
                        "dur": 4000, "tid": 1}]
            events += [{"ph": "X", "cat": "cpu_op", "name": "aten::linear", "ts": t0 + 10 + 100 * i,
                        "dur": linear_us, "tid": 1} for i in range(4)]
            if extra:
                events.append({"ph": "X", "cat": "cpu_op", "name": "aten::zeros", "ts": t0 + 900, "dur": 30,
                               "tid": 1})
        path = tmp_path / name
        with gzip.open(path, "wt") as fh:
            json.dump({"traceEvents": events}, fh)
        return str(path)

    a, b = trace("a.json.gz", 40.0, False), trace("b.json.gz", 44.0, True)
    done = tool(str(GPU / "cpu_ops.py"), a, b, "--diff", "scheduler.run_batch [EXTEND]")
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert rows[2:] == ["| aten::zeros | 0.0 | 1.0 | 0 | 30 | 0.0 | 30.0 |",
                        "| aten::linear | 4.0 | 4.0 | 160 | 176 | 40.0 | 44.0 |",
                        "| all top-level ops | 4 | 5 | 160 | 206 | 40.0 | 41.2 |"]
    assert done.stdout.startswith("scheduler.run_batch [EXTEND]: 2 steps in A")
    one = tool(str(GPU / "cpu_ops.py"), a, "--diff", "scheduler.run_batch [EXTEND]")
    assert one.returncode == 2 and "--diff compares exactly two traces" in one.stderr


def test_cpu_ops_says_which_spans_a_trace_lacks(tmp_path: Path) -> None:
    trace = tmp_path / "t.trace.json.gz"
    with gzip.open(trace, "wt") as fh:
        json.dump({"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "scheduler.run_batch",
                                    "ts": 0, "dur": 10, "tid": 1}]
                   + [{"ph": "X", "cat": "cpu_op", "name": "aten::view", "ts": t, "dur": d, "tid": 1}
                      for t, d in ((1, 1.0), (2, 3.0), (3, 2.5))]}, fh)
    done = tool(str(GPU / "cpu_ops.py"), str(trace))
    assert done.returncode == 0, done.stderr
    assert "CPU probe (median us per call): aten::view 2.50\n" in done.stdout
    assert "scheduler.run_batch [?]: 0.010 ms/step" in done.stdout
    assert "scheduler.process_batch_result: not in this trace" in done.stdout


def test_same_kernels_compares_only_kernels_launched_alike(tmp_path: Path) -> None:
    def trace(path: Path, gemm_us: float, extra: list[dict[str, object]]) -> str:
        events = [{"ph": "X", "cat": "kernel", "name": "gemm", "ts": i, "dur": gemm_us,
                   "args": {"grid": [2, 66, 1], "block": [384, 1, 1]}} for i in range(3)]
        events += [{"ph": "X", "cat": "cpu_op", "name": "gemm", "ts": 0, "dur": 999}]  # not a kernel
        with gzip.open(path, "wt") as fh:
            json.dump({"traceEvents": events + extra}, fh)
        return str(path)

    other_grid = [{"ph": "X", "cat": "kernel", "name": "gemm", "ts": 9, "dur": 500.0,
                   "args": {"grid": [1, 132, 1], "block": [384, 1, 1]}} for _ in range(3)]
    a = trace(tmp_path / "a.json.gz", 100.0, [])
    b = trace(tmp_path / "b.json.gz", 110.0, other_grid)  # same launches 10 % slower, plus other work
    done = tool(str(GPU / "same_kernels.py"), a, b, "--min-calls", "3")
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("  ")]
    assert len(rows) == 1 and rows[0][0] == "1.100" and "grid=[2," in done.stdout
    assert "median ratio over these 1: 1.100" in done.stdout
    assert tool(str(GPU / "same_kernels.py"), a, b, "--min-calls", "4").returncode == 1


def test_report_pairs_turns_of_fresh_or_resident_servers_within_each_sitting(tmp_path: Path) -> None:
    def write(name: str, rows: list[tuple[str, int, str, float]]) -> str:
        path = tmp_path / name
        write_csv(path, TOK_TPOT, [(label, c, mode, 0, tok, 10) for label, c, mode, tok in rows])
        return str(path)

    offab = write("ab.csv", [("mixed-nospec-x", 128, "-", 1000), ("mixed-nospec-x", 128, "-", 1200),
                             ("mixed-off-x", 128, "cold", 990), ("mixed-off-x", 128, "warm", 500),
                             ("mixed-off-x", 128, "cold", 1210),  # warm left out: one turn of 1100
                             ("mixed-nospec-x", 128, "-", 1000), ("mixed-off-x", 128, "-", 800)])
    offpair = write("pair.csv", [("mixed-nospec-x", 256, "-", 2000), ("mixed-off-x", 256, "-", 1900),
                                 ("mixed-nospec-x", 256, "-", 2000), ("mixed-off-x", 256, "-", 2100),
                                 ("decodeonly-nospec-x", 256, "-", 5000)])  # not a turn with arrivals
    done = tool(str(GPU / "report.py"), offab, offpair)
    assert done.returncode == 0, done.stderr
    rows = {line.split("|")[1].strip(): line for line in done.stdout.splitlines()
            if line.startswith("| 128 | off |") or line.startswith("| 256 | off |")}
    assert rows["128"] == "| 128 | off | 2 | 1.000, 0.800 | 0.900 | 0.80-1.00 | 0.900 (2) | - | - |"
    assert rows["256"] == "| 256 | off | 2 | 0.950, 1.050 | 1.000 | 0.95-1.05 | 1.000 (2) | - | - |"


def turns_csv(path: Path, turns: list[tuple[str, float]]) -> Path:
    """offpair's CSV: one 4 s window a turn at 128 requests, after 10 s of warm-up, per (server, tok/s)."""
    write_csv(path, ["label", "concurrency", "mode", "round", "window_s", "tok_s", "t_unix"],
              [(f"mixed-{kind}-x", 128, "-", 0, 4.0, tok, 14.0 * i) for i, (kind, tok) in enumerate(turns)])
    return path


def test_report_averages_the_two_orders_of_a_pair_and_reads_the_null_test(tmp_path: Path) -> None:
    # A B, then B A; whoever goes first reads 1,200, not 1,000; the off server's two turns in a row
    # are two turns, the warm-up between them says so
    path = turns_csv(tmp_path / "pair.csv", [("nospec", 1200), ("off", 1000), ("off", 1200), ("nospec", 1000),
                                             ("nospec2", 900)])
    write_csv(tmp_path / "null.csv", TOK_TPOT, [("mixed-nospec-x", 128, "-", 0, 1000, 10),
                                                ("mixed-nospec2-x", 128, "-", 0, 1100, 10)])
    done = tool(str(GPU / "report.py"), str(path), str(tmp_path / "null.csv"))
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 128 |") and line.count("|") == 10]
    assert rows == ["| 128 | nospec2 | 2 | 0.750, 1.100 | 0.925 | 0.75-1.10 | 0.925 (2) | - | - |",
                    "| 128 | off | 2 | 0.833, 1.200* | 1.017 | 0.83-1.20 | 0.833 (1) | 1.200 (1) | 1.017 |"]


def test_report_gives_the_order_balanced_ratio_its_standard_error(tmp_path: Path) -> None:
    path = turns_csv(tmp_path / "pair.csv", [
        ("nospec", 1000), ("off", 900), ("off", 1100), ("nospec", 1000),  # rounds 1-2: 0.9, 1.1*
        ("nospec", 1000), ("off", 700), ("off", 1300), ("nospec", 1000)])  # rounds 3-4: 0.7, 1.3*
    done = tool(str(GPU / "report.py"), str(path))
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("| 128 | off |"))
    # each order: mean 0.8 / 1.2, variance 0.02 over 2 pairs; SE = 0.5 * sqrt(0.01 + 0.01) = 0.0707
    assert row.endswith("| 0.800 (2) | 1.200 (2) | 1.000 +- 0.071 |"), row


def test_report_matches_turns_on_the_turn_just_before_them(tmp_path: Path) -> None:
    path = turns_csv(tmp_path / "pair.csv", [("nospec", 1000), ("off", 900), ("off", 1100), ("nospec", 1000),
                                             ("nospec", 1200), ("off", 800)])
    done = tool(str(GPU / "report.py"), str(path))
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| pair.csv |")]
    # the first turn follows nothing; after another server's turn off read 900 and 800 against 1,000,
    # after its own 1,100 against 1,200
    assert rows == ["| pair.csv | 128 | other | off | 1 / 2 | 0.850 |",
                    "| pair.csv | 128 | own | off | 1 / 1 | 0.917 |"]


def test_report_tells_the_servers_role_from_its_start_position(tmp_path: Path) -> None:
    # off started second reads 1.1 (order-balanced), started first 0.9: role sqrt(1.1 x 0.9), position sqrt(1.1 / 0.9)
    second = turns_csv(tmp_path / "pair.csv", [("nospec", 1000), ("off", 1000), ("off", 1200), ("nospec", 1000),
                                               ("nospec", 1000), ("off", 1200), ("off", 1000), ("nospec", 1000)])
    first = turns_csv(tmp_path / "swap.csv", [("off", 800), ("nospec", 1000), ("nospec", 1000), ("off", 1000),
                                              ("off", 1000), ("nospec", 1000), ("nospec", 1000), ("off", 800)])
    null = turns_csv(tmp_path / "null.csv", [("nospec", 1000), ("nospec2", 1050)])  # one position only: no row
    done = tool(str(GPU / "report.py"), str(second), str(first), str(null))
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 128 |") and line.count("|") == 7]
    # each position: two orders of two pairs, variance 0.02, SE 0.0707; relative errors 0.064 and 0.079
    assert rows == ["| 128 | off | 1.100 (4) | 0.900 (4) | 0.995 +- 0.051 | 1.106 |"]
    assert tool(str(GPU / "report.py"), str(second)).stdout.count("start position") == 0


def test_report_reads_the_sittings_apart_and_pairs_auto_like_off(tmp_path: Path) -> None:
    # three sittings; each file's order-balanced off / none, then their mean and its standard error;
    # auto pairs with no spec as off does, but in one file only: no row over the files for it
    a = turns_csv(tmp_path / "a.csv", [("nospec", 1000), ("off", 900), ("off", 1100), ("nospec", 1000),
                                       ("auto", 990), ("nospec", 1000)])
    b = turns_csv(tmp_path / "b.csv", [("nospec", 1000), ("off", 1000), ("off", 1000), ("nospec", 1000)])
    c = turns_csv(tmp_path / "c.csv", [("off", 1000), ("nospec", 1000), ("nospec", 1000), ("off", 1200)])
    done = tool(str(GPU / "report.py"), str(a), str(b), str(c))
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 128 |") and line.count("|") == 6]
    # per file 1.0, 1.0, 1.1: mean 1.033, standard deviation 0.0577, over sqrt(3): 0.033
    assert rows == ["| 128 | off | 3 | 1.000, 1.000, 1.100 | 1.033 +- 0.033 |"]
    assert any(line.startswith("| 128 | auto | 1 | 0.990 |") for line in done.stdout.splitlines()), done.stdout


def test_report_pairs_auto_with_the_forced_off_server_where_a_sitting_has_no_spec(tmp_path: Path) -> None:
    # offpair's PAIR="off auto": the same off state in both servers, so the ratio is the policy's cost
    path = turns_csv(tmp_path / "offauto.csv", [("off", 1000), ("auto", 950), ("auto", 1050), ("off", 1000)])
    done = tool(str(GPU / "report.py"), str(path))
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 128 |") and line.count("|") == 10]
    assert rows == ["| 128 | auto/off | 2 | 0.950, 1.050* | 1.000 | 0.95-1.05 | 0.950 (1) | 1.050 (1) | 1.000 |"]


def test_report_pairs_decode_only_turns_only_with_each_other(tmp_path: Path) -> None:
    # offpair's PAIR_LOAD=decode labels its turns decodeonly-ROLE-ATTN; with arrivals they are mixed-ROLE-ATTN
    path = tmp_path / "both.csv"
    write_csv(path, ["label", "concurrency", "mode", "round", "window_s", "tok_s", "t_unix"],
              [(f"{load}-{kind}-x", 128, "-", 0, 4.0, tok, 14.0 * i) for i, (load, kind, tok) in enumerate([
                  ("decodeonly", "nospec", 1000), ("decodeonly", "off", 1000),
                  ("mixed", "nospec", 1000), ("mixed", "off", 900)])])
    done = tool(str(GPU / "report.py"), str(path))
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 128 |") and line.count("|") == 10]
    assert rows == ["| 128 | off | 1 | 0.900 | 0.900 | 0.90-0.90 | 0.900 (1) | - | - |",
                    "| 128 | off (decode only) | 1 | 1.000 | 1.000 | 1.00-1.00 | 1.000 (1) | - | - |"]
    assert any(line.startswith("| decode only | 128 | 1000 ") for line in done.stdout.splitlines()), done.stdout


def test_rank_switches_compares_every_ranks_switches_step_by_step(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    from specctl.runtime.sglang_plugin.plugin import log_switch

    # the plugin's own lines, prefixed per rank as SGLang's log format does
    with caplog.at_level(logging.INFO, logger="specctl.plugin"):
        log_switch({"switches": 1, "last_switch_step": 412, "on": False, "reason": "load", "batch_size": 57})
        log_switch({"switches": 2, "last_switch_step": 900, "on": True, "reason": "quiet", "batch_size": 3})
    lines = [r.getMessage() for r in caplog.records]
    agree = tmp_path / "agree.log"
    agree.write_text("".join(f"[2026-11-29 16:22:0{i} TP{r}] {line}\n" for i, line in enumerate(lines) for r in (0, 1))
                     + "[2026-11-29 16:22:09 TP0] Decode batch, #running-req: 3\n")
    done = tool(str(GPU / "rank_switches.py"), str(agree))
    assert done.returncode == 0, done.stdout
    assert "every rank (2) switched at the same steps, 2 switches" in done.stdout

    late = tmp_path / "late.log"
    late.write_text(agree.read_text().replace("TP1] specctl: switch 2 at step 900",
                                              "TP1] specctl: switch 2 at step 901"))
    done = tool(str(GPU / "rank_switches.py"), str(late))
    assert done.returncode == 1
    assert "ranks DISAGREE: switch 2: TP0 at step 900 (on, quiet), TP1 at step 901 (on, quiet)" in done.stdout

    quiet = tmp_path / "quiet.log"
    quiet.write_text("[2026-11-29 16:22:09] Decode batch, #running-req: 3\n")
    assert tool(str(GPU / "rank_switches.py"), str(quiet)).returncode == 2


def test_threads_finds_the_busy_thread_of_a_process_tree(tmp_path: Path) -> None:
    """A parent that sleeps and a child that burns half a CPU-second: the table names the child's process."""
    ready, done = tmp_path / "ready", tmp_path / "done"
    burner = ("import pathlib, sys, time\n"
              "pathlib.Path(sys.argv[1]).touch()\n"
              "while not pathlib.Path(sys.argv[2]).exists(): time.sleep(0.01)\n"
              "t = time.process_time()\n"
              "while time.process_time() - t < 0.5: pass\n"
              "pathlib.Path(sys.argv[2] + '.burnt').touch()\n"
              "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c",
                               "import subprocess, sys; subprocess.run([sys.executable, '-c'] + sys.argv[1:])",
                               burner, str(ready), str(done)])
    log = tmp_path / "threads.jsonl"
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not ready.exists():
            assert parent.poll() is None and time.monotonic() < deadline, "the burner did not start"
            time.sleep(0.02)
        snap = [sys.executable, str(GPU / "threads.py"), "snap", str(log), "off", "128", str(parent.pid)]
        subprocess.run(snap, check=True)
        done.touch()
        while not Path(str(done) + ".burnt").exists():
            assert time.monotonic() < deadline, "the burner did not finish"
            time.sleep(0.02)
        subprocess.run(snap, check=True)
    finally:
        for proc in __import__("psutil").Process(parent.pid).children(recursive=True):
            proc.kill()
        parent.kill()
        parent.wait()
    snaps = [json.loads(line) for line in log.read_text().splitlines()]
    wall = snaps[1]["t"] - snaps[0]["t"]
    table = subprocess.run([sys.executable, str(GPU / "threads.py"), "table", str(log)], check=True,
                           capture_output=True, text=True).stdout
    assert table.startswith("== off c=128: 1 turns")
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| ") and "pathlib" in line]
    assert len(rows) == 1, table  # the burner's process; the sleeping parent is under 1 % or shown apart
    assert float(rows[0][2]) * wall / 100 >= 0.45
    on = rows[0][4].rstrip(" |").split()  # the CPUs the burner was on at the two snapshots
    assert on and {int(c) for c in on} <= os.sched_getaffinity(0), rows[0]


def test_threads_refuses_a_command_it_does_not_know() -> None:
    run = subprocess.run([sys.executable, str(GPU / "threads.py"), "snapshot"], capture_output=True, text=True)
    assert run.returncode == 2 and "threads.py snap FILE.jsonl" in run.stderr


@pytest.fixture
def depth_sim(tmp_path: Path) -> Iterator[str]:
    """A simulator built with depths 0-3 (as a server launched with --speculative-candidate-steps 0,1,2,3)."""
    yield from idle_simulator(tmp_path, "candidates=0,1,2,3", "min_accept=0.3")


def test_depth_accept_reads_acceptance_right_after_each_change(depth_sim: str, tmp_path: Path) -> None:
    out = tmp_path / "depth.csv"
    done = tool(str(GPU / "depth_accept.py"), depth_sim, "--depths", "1,3,0,2", "--period", "1.5",
                "--concurrency", "8", "--output-len", "400", "--csv", str(out))
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(out.open()))
    assert {r["depth"] for r in rows} >= {"1", "2", "3", "0"}
    by_depth, by_period = done.stdout.split("\n\n", 1)
    lines = {line.split("|")[1].strip(): line for line in by_depth.splitlines() if line.startswith("| ")}
    assert [line.split("|")[2:4] for line in by_period.splitlines()[2:]] == [
        [" 1 ", " - "], [" 3 ", " 1 "], [" 2 ", " 0 "]], by_period  # each period, the depth pinned before it
    for depth in ("1", "2", "3"):
        cells = [c.strip() for c in lines[depth].split("|")[1:-1]]
        assert cells[1] != "-", f"depth {depth} read no acceptance after its change: {lines[depth]}"
        # the simulator draws each depth from one law: right after a change is as good as settled
        assert 0.7 < float(cells[3]) < 1.3, lines[depth]
    state = json.loads(tool(str(GPU / "ctl.py"), depth_sim, "state").stdout)
    assert state["settings"]["accept_window"] == 64 and state["settings"]["mode"] == "auto", "settings restored"


def write_accept_rows(path: Path, periods: Sequence[tuple[int, Sequence[float]]]) -> None:
    """depth_accept.py's --csv rows: per pinned period, one read per verify with its accept mean."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t", "turn", "pinned", "depth", "verifies", "since_change", "accept_mean"])
        verifies = 0
        for turn, (depth, means) in enumerate(periods):
            for since, mean in enumerate(means):
                w.writerow([turn, turn, depth, depth, verifies + since, since, mean])
            verifies += len(means)


def test_depth_accept_leaves_the_old_depths_verifies_out_of_right_after(tmp_path: Path) -> None:
    # the plugin's accept mean covers its last 4 verifies: depth 1 accepts exactly 1.0 at every
    # verify, but the reads 1-3 verifies after leaving depth 3 (2.5) still hold depth 3's
    window = [2.5, 2.125, 1.75, 1.375]
    out = tmp_path / "accept.csv"
    write_accept_rows(out, [(3, [2.5] * 30), (1, window + [1.0] * 26)])
    done = tool(str(GPU / "depth_accept.py"), str(out), "--summarise", "--window", "4", "--first", "8")
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("| 1 |"))
    assert row == "| 1 | 1.000 | 1.000 | 1.000 | 1 |"
    # a new depth that starts cold reads under its settled level, from its own verifies alone
    write_accept_rows(out, [(1, [1.0] * 30), (3, [1.0] * 4 + [1.5] * 5 + [2.5] * 21)])
    done = tool(str(GPU / "depth_accept.py"), str(out), "--summarise")
    row = next(line for line in done.stdout.splitlines() if line.startswith("| 3 |"))
    assert row == "| 3 | 1.500 | 2.500 | 0.600 | 1 |"


def test_depth_accept_refuses_what_it_cannot_summarise(tmp_path: Path) -> None:
    missing = tool(str(GPU / "depth_accept.py"), str(tmp_path / "none.csv"), "--summarise")
    assert missing.returncode == 2 and "cannot read" in missing.stderr and "Traceback" not in missing.stderr
    other = tmp_path / "other.csv"
    other.write_text("label,tok_s\nx,1\n")
    wrong = tool(str(GPU / "depth_accept.py"), str(other), "--summarise")
    assert wrong.returncode == 2 and "not a depth_accept.py --csv file" in wrong.stderr
    garbled = tmp_path / "garbled.csv"
    write_accept_rows(garbled, [(1, [1.0] * 12)])
    garbled.write_text(garbled.read_text().replace("\n0,0,1,1,0,0,1.0", "\n0,0,one,1,0,0,1.0"))
    bad = tool(str(GPU / "depth_accept.py"), str(garbled), "--summarise")
    assert bad.returncode == 2 and "a cell is not a number" in bad.stderr and "Traceback" not in bad.stderr
    narrow = tool(str(GPU / "depth_accept.py"), str(other), "--summarise", "--window", "9")
    assert narrow.returncode == 2 and "--window 9 > --first 8" in narrow.stderr


def test_the_table_heads_gpu_reads_depth_one_at_one_accepted_draft_right_after_a_change() -> None:
    # the committed GPU file: a depth-1 draft is accepted at most once a verify, and right after
    # a change from depth 3 it read 1.097 before the old verifies were left out
    done = tool(str(GPU / "depth_accept.py"), str(GPU / "results" / "depth" / "triton-table-depth-accept.csv"),
                "--summarise")
    assert done.returncode == 0, done.stderr
    assert "| 1 | 1.000 | 1.000 | 1.000 | 2 |" in done.stdout
    # the eraser-less head's parity: depth 3 read by what came before it
    for line in ("| 1 | 3 | 1 | 1.750 | 1.750 |", "| 4 | 3 | 0 | 2.292 | 2.500 |", "| 7 | 3 | 2 | 1.000 | 1.145 |"):
        assert line in done.stdout


def test_correctness_cycles_depths_mid_generation(depth_sim: str, tmp_path: Path) -> None:
    out = tmp_path / "cycle.json"
    done = tool(str(GPU / "correctness.py"), "run", depth_sim, "cycle", str(out), "--toggle", "0.05",
                "--cycle-steps", "1,3,0,2", "--n", "4")
    assert done.returncode == 0, done.stderr + done.stdout
    record = json.loads(out.read_text())
    assert record["flips"] >= 4 and record["flip_errors"] == []
    depths = {sw["to"] for sw in record["state_after"]["recent_switches"]}
    assert depths == {0, 1, 2, 3}


def test_depth_table_turns_static_windows_into_the_policys_cost_table(tmp_path: Path) -> None:
    from specctl.runtime.core.depth_model import read_costs

    fields = ["label", "concurrency", "mode", "round", "tok_s", "tpot_ms", "accept_len"]
    rows = []
    for c, base in ((1, 6.0), (64, 14.0)):
        rows.append(["x", c, "off", 0, 1.0, base, 1.0])
        rows.append(["x", c, "auto", 0, 1.0, 99.0, 2.0])  # not a static depth: left out
        for d in (1, 2, 3):
            for r, jitter in enumerate((0.9, 1.1)):
                rows.append(["x", c, f"d{d}", r, 1.0, (base + 2 * d) * jitter / (1 + 0.7 * d), 1 + 0.7 * d])
    write_csv(tmp_path / "il.csv", fields, rows)
    out = tmp_path / "costs.json"
    done = tool(str(GPU / "depth_table.py"), str(out), str(tmp_path / "il.csv"))
    assert done.returncode == 0, done.stderr
    costs = read_costs(out)  # what the plugin reads from SPECCTL_DEPTH_COSTS
    assert costs.buckets == (1, 64) and costs.depths == (0, 1, 2, 3)
    assert costs.row(1)[0] == pytest.approx(6e-3) and costs.row(64)[3] == pytest.approx(20e-3)
    assert "c=64: d0 14.00 ms" in done.stdout


def test_depth_table_says_which_window_is_missing(tmp_path: Path) -> None:
    fields = ["label", "concurrency", "mode", "round", "tok_s", "tpot_ms", "accept_len"]
    write_csv(tmp_path / "il.csv", fields, [["x", 1, "off", 0, 1, 6, 1], ["x", 1, "d1", 0, 1, 4, 1.7],
                                            ["x", 8, "off", 0, 1, 7, 1]])
    done = tool(str(GPU / "depth_table.py"), str(tmp_path / "o.json"), str(tmp_path / "il.csv"))
    assert done.returncode != 0 and "(8, 1)" in done.stderr


def test_depth_table_reads_only_the_label_it_is_given(tmp_path: Path) -> None:
    """run_fast_off.sh appends every phase to one CSV: sweep2's off windows at other concurrencies stay out."""
    fields = ["label", "concurrency", "mode", "round", "tok_s", "tpot_ms", "accept_len"]
    write_csv(tmp_path / "il.csv", fields, [
        ["depth-x", 1, "off", 0, 1, 6, 1], ["depth-x", 1, "d1", 0, 1, 4, 1.5],
        ["specctl-x", 8, "off", 0, 1, 7, 1], ["depthauto-x", 1, "off", 0, 1, 60, 1]])
    out = tmp_path / "o.json"
    done = tool(str(GPU / "depth_table.py"), str(out), str(tmp_path / "il.csv"), "--label", "depth-x")
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["step_ms"] == [[6.0, 6.0]] and "c=1: d0 6.00 ms  d1 6.00 ms" in done.stdout


def test_rank_switches_compares_the_depth_when_there_are_several(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    from specctl.runtime.sglang_plugin.plugin import log_switch

    state = {"switches": 1, "last_switch_step": 50, "on": True, "reason": "depth", "batch_size": 40, "steps": 1,
             "candidates": [0, 1, 2, 3], "recent_switches": [{"from": 3, "to": 1}]}
    with caplog.at_level(logging.INFO, logger="specctl.plugin"):
        log_switch(state)
    line = caplog.records[0].getMessage()
    assert line.endswith("batch 40, depth 3 -> 1")
    agree = tmp_path / "agree.log"
    agree.write_text(f"[2026-12-01 10:00:00 TP0] {line}\n[2026-12-01 10:00:00 TP1] {line}\n")
    assert tool(str(GPU / "rank_switches.py"), str(agree)).returncode == 0
    apart = tmp_path / "apart.log"
    apart.write_text(f"[2026-12-01 10:00:00 TP0] {line}\n"
                     f"[2026-12-01 10:00:00 TP1] {line.replace('-> 1', '-> 2')}\n")
    done = tool(str(GPU / "rank_switches.py"), str(apart))
    assert done.returncode == 1
    assert "TP0 at step 50 (on at depth 1, depth), TP1 at step 50 (on at depth 2, depth)" in done.stdout


def test_ctl_exits_non_zero_when_the_server_refuses_a_set(sim: str) -> None:
    refused = tool(str(GPU / "ctl.py"), sim, "set", "on_at=2000")  # above off_at (1000): refused as a whole
    assert refused.returncode == 1
    assert '"set": [false]' in refused.stdout and "ctl: the server refused set on_at=2000" in refused.stderr
    assert json.loads(tool(str(GPU / "ctl.py"), sim, "state").stdout)["settings"]["on_at"] == 999  # unchanged
    accepted = tool(str(GPU / "ctl.py"), sim, "set", "on_at=500")
    assert accepted.returncode == 0 and accepted.stderr == ""
    assert json.loads(accepted.stdout)["specctl"]["settings"]["on_at"] == 500


def decode_line(ts: str, running: int, tps: float, spec: bool = False) -> str:
    """One `Decode batch` line as SGLang 0.5.17 logs it (the tree's off server adds accept len and rate)."""
    accept = "accept len: 1.00, accept rate: 0.00, " if spec else ""
    return (f"[2026-12-03 {ts}] Decode batch, #running-req: {running}, #token: 36059, token usage: 0.11, "
            f"{accept}cuda graph: True, gen throughput (token/s): {tps}, #queue-req: 0")


def test_decode_lines_reads_each_servers_decode_rate_per_load(tmp_path: Path) -> None:
    base, other = tmp_path / "server-pair-nospec.log", tmp_path / "server-pair-treeoff.log"
    base.write_text("\n".join([
        "[2026-12-03 12:50:40] Prefill batch, #new-seq: 8, #new-token: 4096",
        decode_line("12:50:55", 64, 17.8),  # a turn's first line: it spans the other server's turn
        decode_line("12:50:55", 64, 5000.0), decode_line("12:50:56", 63, 5200.0), decode_line("12:50:56", 64, 5400.0),
        decode_line("12:50:57", 40, 3000.0),  # the load ramping: not 64
        decode_line("12:51:30", 256, 10.0),  # a new turn's first line
        decode_line("12:51:30", 255, 9000.0), decode_line("12:51:31", 256, 9200.0),
    ]) + "\n")
    other.write_text("\n".join([
        decode_line("12:51:10", 64, 20.0, spec=True),
        decode_line("12:51:11", 64, 4600.0, spec=True), decode_line("12:51:11", 65, 4700.0, spec=True),
        decode_line("12:51:12", 64, 4800.0, spec=True),
    ]) + "\n")
    done = tool(str(GPU / "decode_lines.py"), "--concs", "64 256", str(base), str(other))
    assert done.returncode == 0, done.stderr
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in done.stdout.splitlines() if line.startswith("| ") and line.split("|")[1].strip().isdigit()}
    assert rows["64"] == ["5200 (3)", "4700 (3)", f"{4700 / 5200:.3f}"]
    assert rows["256"] == ["9100 (2)", "- (0)", "-"]  # no line of the other server at 256


@pytest.mark.parametrize("concs", ["64 x", "0 64", ""])
def test_decode_lines_refuses_a_load_that_is_not_a_request_count(tmp_path: Path, concs: str) -> None:
    log = tmp_path / "a.log"
    log.write_text(decode_line("12:00:00", 64, 1.0) + "\n")
    done = tool(str(GPU / "decode_lines.py"), "--concs", concs, str(log))
    assert done.returncode == 2 and "--concs" in done.stderr and "Traceback" not in done.stderr


def test_decode_lines_names_a_missing_log(tmp_path: Path) -> None:
    done = tool(str(GPU / "decode_lines.py"), "--concs", "64", str(tmp_path / "absent.log"))
    assert done.returncode == 2 and "no such log" in done.stderr and "absent.log" in done.stderr


def depth_windows(path: Path, steps_ms: dict[int, float], accepts: dict[int, float], c: int = 4) -> None:
    """Pinned windows of one load whose tok/s follow the given step times and acceptance (running = c)."""
    fields = ["label", "concurrency", "mode", "round", "tok_s", "accept_len", "running"]
    rows = [["depthauto-fa3", c, "off" if d == 0 else f"d{d}", r, c * (1 + accepts[d]) / steps_ms[d] * 1e3,
             1.0 + accepts[d] if d else 1.0, c] for d in steps_ms for r in (0, 1)]
    rows.append(["depthauto-fa3", c, "auto", 0, 1.0, 2.0, c])  # auto's own windows are not a pinned depth
    write_csv(path, fields, rows)


def test_depth_choice_shows_a_table_that_underprices_depth_picking_the_wrong_one(tmp_path: Path) -> None:
    """Deeper drafts accept next to nothing more (as at 2.0): a table pricing them like depth 1 misses d1."""
    steps = {0: 5.0, 1: 5.5, 2: 6.0, 3: 6.2}
    depth_windows(tmp_path / "w.csv", steps, {0: 0.0, 1: 1.0, 2: 1.01, 3: 1.01})
    flat = tmp_path / "flat.json"  # d3 measured cheapest: pooled, d1-d3 all cost 5.43 ms
    flat.write_text(json.dumps({"buckets": [1, 8], "depths": [0, 1, 2, 3], "step_ms": [[5.0, 5.5, 5.5, 5.3]] * 2}))
    true = tmp_path / "true.json"
    true.write_text(json.dumps({"buckets": [1, 8], "depths": [0, 1, 2, 3], "step_ms": [list(steps.values())] * 2}))
    done = tool(str(GPU / "depth_choice.py"), str(flat), str(true), "--windows", str(tmp_path / "w.csv"))
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("| 4 |"))
    d2_over_d1 = (2.01 / 6.0) / (2.0 / 5.5)
    assert row == f"| 4 | 4 | d1 (1455) | d2* (+0.0 %) | {d2_over_d1:.3f} | d1 (+8.5 %) | 1.000 |"
    assert "auto holds whichever of the two it is in (flat at c=4)." in done.stdout


def test_depth_choice_refuses_windows_without_every_pinned_depth(tmp_path: Path) -> None:
    depth_windows(tmp_path / "w.csv", {0: 5.0, 1: 5.5}, {0: 0.0, 1: 1.0})
    table = tmp_path / "t.json"
    table.write_text(json.dumps({"buckets": [1], "depths": [0, 1, 2, 3], "step_ms": [[5, 6, 7, 8]]}))
    done = tool(str(GPU / "depth_choice.py"), str(table), "--windows", str(tmp_path / "w.csv"))
    assert done.returncode == 2 and "no concurrency with windows of off, d1, d2 and d3" in done.stderr
    broken = tmp_path / "b.json"
    broken.write_text('{"buckets": [1]}')
    done = tool(str(GPU / "depth_choice.py"), str(broken), "--windows", str(tmp_path / "w.csv"))
    assert done.returncode == 2 and "needs depths, step_ms" in done.stderr and "Traceback" not in done.stderr


def test_calib_report_sets_calibrated_auto_beside_the_best_and_the_row(tmp_path: Path) -> None:
    fields = ["label", "concurrency", "mode", "round", "tok_s", "errors"]
    moe = "specctl-flashinfer-qwen3moe"
    windows = [(moe, 4, "on", 600.0, 0), (moe, 4, "off", 500.0, 0), (moe, 4, "auto", 590.0, 0),
               (moe, 4, "auto", 594.0, 0), (moe, 192, "on", 4000.0, 0), (moe, 192, "off", 3000.0, 0),
               (moe, 192, "auto", 3100.0, 0), (moe, 192, "auto", 0.0, 3),
               ("nospec-flashinfer-qwen3moe", 4, "-", 700.0, 0)]
    path = tmp_path / "interleave.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        w.writerows([(label, c, mode, 0, tok, err) for label, c, mode, tok, err in windows])
    out = subprocess.run([sys.executable, str(GPU / "calib_report.py"), str(path)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "| requests | forced on | forced off | calibrated auto | auto / best | >= 0.97 |"
    assert lines[2] == "| 4 | 600 | 500 | 592 | 0.987 | yes |"  # the mean of auto's two windows
    assert lines[3] == "| 192 | 4000 | 3000 | 3100 | 0.775 | NO |"  # the window with errors left out
    assert lines[-1] == "(1 windows left out: errors or no tok/s)"
    # with calib_switch.sh's row alone beside it
    with path.open("a", newline="") as f:
        csv.writer(f).writerow([moe, 4, "row", 0, 580.0, 0])
    out = subprocess.run([sys.executable, str(GPU / "calib_report.py"), str(path)], capture_output=True, text=True,
                         timeout=60)
    assert "| 4 | 600 | 500 | 592 | 580 | 0.987 | 1.021 | yes |" in out.stdout.splitlines()
    bad = subprocess.run([sys.executable, str(GPU / "calib_report.py"), str(tmp_path / "none.csv")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("calib_report.py: cannot read")
    assert "Traceback" not in bad.stderr
