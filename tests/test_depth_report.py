"""bench/gpu/depth_report.py: issue 22's goal table, read as a reader reads it.

The script runs as a process (as the operator and run_fast_off.sh's depthauto
phase run it) over the GPU's own depth CSVs and over small CSVs whose numbers
make the goal met or missed at known concurrencies.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.bench  # tests a bench/ script: the second tier

GPU = Path(__file__).resolve().parent.parent / "bench" / "gpu"
DEPTH = GPU / "results" / "depth"
REAL = [DEPTH / "triton-nospec.csv", DEPTH / "triton-depthsweep.csv", DEPTH / "triton-depthauto.csv"]
FIELDS = ["label", "concurrency", "mode", "round", "window_s", "tok_s", "tpot_ms", "running", "accept_len", "steps"]
RATIO_COLUMNS = ("best static", "auto / best static", "auto / best static, auto's server", "middle / binary")


def depth_report(*paths: Path | str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(GPU / "depth_report.py"), *map(str, paths)],
                          capture_output=True, text=True, timeout=120)


def rows_of(stdout: str) -> list[dict[str, str]]:
    """Every table's rows as {column: cell}, in the order printed."""
    lines = [ln for ln in stdout.splitlines() if ln.startswith("| ")]
    out, header = [], None
    for line in lines:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == "c":
            header = cells
        elif header and not cells[0].startswith("---"):
            out.append(dict(zip(header, cells)))
    return out


def by_c(stdout: str) -> dict[int, dict[str, str]]:
    return {int(r["c"]): r for r in rows_of(stdout)}


def summary(stdout: str, start: str) -> str:
    """The summary line that starts with ``start``."""
    found = [ln for ln in stdout.splitlines() if ln.startswith(start)]
    assert len(found) == 1, stdout
    return found[0]


def write(path: Path, rows: Iterable[tuple[str, int, str, float, float]]) -> Path:
    """An interleave.py CSV of (label, c, mode, tok_s, steps) windows, round 0 unless repeated."""
    seen: dict[tuple[str, int, str], int] = {}
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(FIELDS)
        for label, c, mode, tok_s, steps in rows:
            r = seen[label, c, mode] = seen.get((label, c, mode), -1) + 1
            w.writerow([label, c, mode, r, 4.0, repr(tok_s), 5.0, c, 2.0, steps])
    return path


def three_servers(tmp_path: Path, grid: dict[int, dict[str, float]], scale: float = 1.0) -> list[Path]:
    """The three servers' files from {c: {column: tok_s}} (none, d1-d3, off, auto, auto d3, auto off)."""
    sources = {"none": ("nospec", "-"), "d1": ("depth", "d1"), "d2": ("depth", "d2"), "d3": ("depth", "d3"),
               "off": ("depth", "off"), "auto": ("depthauto", "auto"), "auto d1": ("depthauto", "d1"),
               "auto d2": ("depthauto", "d2"), "auto d3": ("depthauto", "d3"), "auto off": ("depthauto", "off")}
    files: dict[str, list[tuple[str, int, str, float, float]]] = {"nospec": [], "depth": [], "depthauto": []}
    for c, cols in grid.items():
        for name, tok in cols.items():
            kind, mode = sources[name]
            steps = 0.0 if mode in ("-", "off") else (2.0 if mode == "auto" else float(mode[1]))
            files[kind].append((f"{kind}-triton", c, mode, tok * scale, steps))
    return [write(tmp_path / f"{kind}.csv", rows) for kind, rows in files.items()]


# c=1: d3 wins, auto meets it; c=8: d2 wins by 1.10 x max(none, d3), auto 0.95 of it (missed);
# c=64: none wins, auto 0.96 of it (missed); c=256: none wins, auto 1.0
GRID = {
    1: {"none": 200.0, "d1": 260.0, "d2": 340.0, "d3": 360.0, "off": 198.0, "auto": 356.0, "auto d3": 350.0,
        "auto off": 200.0},
    8: {"none": 1300.0, "d1": 1400.0, "d2": 2000.0, "d3": 1818.2, "off": 1250.0, "auto": 1900.0,
        "auto d3": 1800.0, "auto off": 1300.0},
    64: {"none": 6000.0, "d1": 3100.0, "d2": 3500.0, "d3": 3700.0, "off": 5000.0, "auto": 5760.0,
         "auto d3": 3600.0, "auto off": 5000.0},
    256: {"none": 8000.0, "d1": 3200.0, "d2": 3900.0, "d3": 4100.0, "off": 8000.0, "auto": 8000.0,
          "auto d3": 4100.0, "auto off": 8400.0},
}


def test_the_gpus_depth_csvs_read_as_issue_22s_table() -> None:
    done = depth_report(*REAL)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith("## triton, llama8b: auto against every static depth (issue 22)")
    rows = by_c(done.stdout)
    assert sorted(rows) == [1, 4, 8, 16, 24, 32, 48, 64, 128, 256]
    assert rows[4]["best static"] == "d2 1273.7"
    assert rows[1]["auto"] == "355.5" and rows[1]["auto's depth"] == "2.00"
    assert rows[48]["middle / binary"] == "1.096" and rows[48]["auto / best static"] == "0.869"
    assert rows[64]["best static"] == "none 6218.7" and rows[64]["middle / binary"] == "-"
    assert rows[256]["d1"] == "3274.6" and rows[256]["auto / best static, auto's server"] == "1.035"
    goal = summary(done.stdout, "- auto / best static < 0.97")
    assert goal.endswith("at 5 of 10 concurrencies: c=4 0.902 (best d2), c=8 0.949 (best d2), "
                         "c=48 0.869 (best d2), c=64 0.705 (best none), c=128 0.815 (best none).")
    middle = summary(done.stdout, "- A middle depth (d1, d2) is the best static at 4 concurrencies")
    assert "c=4 d2 1.037, auto 0.935; c=8 d2 1.034, auto 0.981; c=32 d2 1.003, auto 1.034; c=48 d2 1.096" in middle
    assert "ran on different servers" in done.stdout
    assert "  - d3 auto-server / d3 sweep-server: c=1 0.962, c=4 0.954," in done.stdout
    assert "  - off auto-server / off sweep-server: c=1 1.024," in done.stdout and "(range 0.802-1.057)" in done.stdout
    assert "no none row" not in done.stdout


def test_without_the_no_spec_server_off_stands_in_for_none_and_the_table_says_so() -> None:
    done = depth_report(*REAL[1:])
    assert done.returncode == 0, done.stderr
    rows = by_c(done.stdout)
    assert rows[48]["none"] == "-" and rows[48]["best static"] == "off* 4734.2"
    assert rows[4]["best static"] == "d2* 1273.7" and rows[4]["middle / binary"] == "1.037"  # over max(off, d3)
    assert "(*) no none row at c=1, c=4, c=8, c=16, c=24, c=32, c=48, c=64, c=128, c=256" in done.stdout


def test_the_summary_lists_exactly_the_points_that_miss_the_goal(tmp_path: Path) -> None:
    done = depth_report(*three_servers(tmp_path, GRID))
    assert done.returncode == 0, done.stderr
    assert summary(done.stdout, "- auto / best static").endswith(
        "at 2 of 4 concurrencies: c=8 0.950 (best d2), c=64 0.960 (best none).")
    assert summary(done.stdout, "- A middle depth").endswith(": c=8 d2 1.100, auto 1.045.")
    rows = by_c(done.stdout)
    assert [rows[c]["best static"] for c in (1, 8, 64, 256)] == ["d3 360.0", "d2 2000.0", "none 6000.0", "none 8000.0"]
    assert "  - off auto-server / off sweep-server: c=1 1.010, c=8 1.040, c=64 1.000, c=256 1.050" in done.stdout


def test_where_auto_meets_the_goal_everywhere_and_no_middle_depth_wins_the_summary_says_so(tmp_path: Path) -> None:
    grid = {c: {**cols, "d2": min(cols["d2"], cols["d3"]) - 1, "auto": max(cols.values())} for c, cols in GRID.items()}
    done = depth_report(*three_servers(tmp_path, grid))
    assert done.returncode == 0, done.stderr
    assert "- auto / best static >= 0.97 (issue 22's goal) at all 4 concurrencies with both measured." in done.stdout
    assert "- No middle depth (d1, d2) is the best static at any concurrency: the binary choice is." in done.stdout
    assert all(r["middle / binary"] == "-" for r in rows_of(done.stdout))


def test_rounds_are_averaged_with_their_range_and_missing_cells_print_a_dash(tmp_path: Path) -> None:
    sweep = write(tmp_path / "sweep.csv", [("depth-triton", 4, "d3", 1000.0, 3.0),
                                           ("depth-triton", 4, "d3", 1200.0, 3.0),
                                           ("depth-triton", 4, "off", 700.0, 0.0)])
    auto = write(tmp_path / "auto.csv", [("depthauto-triton", 4, "auto", 1050.0, 3.0),
                                         ("depthauto-triton", 4, "auto", 1150.0, 2.0)])
    done = depth_report(sweep, auto)
    assert done.returncode == 0, done.stderr
    row = by_c(done.stdout)[4]
    assert (row["d3"], row["auto"]) == ("1100.0 (1000-1200)", "1100.0 (1050-1150)")
    assert row["auto's depth"] == "2.50 (2.00-3.00)"
    assert row["d1"] == row["d2"] == row["none"] == "-"
    assert row["auto / best static"] == "1.000 (0.88-1.15)"  # report.py's range: worst window over best, and back
    assert "d3 auto-server / d3 sweep-server: not measured on both" in done.stdout


def test_each_backend_gets_its_own_table(tmp_path: Path) -> None:
    triton = write(tmp_path / "t.csv", [("depth-triton", 1, "d3", 360.0, 3.0),
                                        ("depthauto-triton", 1, "auto", 350.0, 3.0)])
    fa3 = write(tmp_path / "f.csv", [("depth-fa3", 1, "d3", 420.0, 3.0), ("depthauto-fa3", 1, "auto", 421.0, 3.0)])
    done = depth_report(triton, fa3)
    assert done.returncode == 0, done.stderr
    assert [ln for ln in done.stdout.splitlines() if ln.startswith("## ")] == [
        "## fa3, llama8b: auto against every static depth (issue 22)",
        "## triton, llama8b: auto against every static depth (issue 22)"]
    assert [r["auto"] for r in rows_of(done.stdout)] == ["421.0", "350.0"]


def assert_refused(done: subprocess.CompletedProcess[str], says: str) -> None:
    assert done.returncode == 2, done.stdout
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("depth_report.py: "), done.stderr
    assert says in done.stderr, done.stderr


def test_refuses_a_missing_file(tmp_path: Path) -> None:
    assert_refused(depth_report(REAL[0], tmp_path / "nope.csv"), "nope.csv: cannot read it (FileNotFoundError")


def test_refuses_a_csv_without_the_columns_it_reads(tmp_path: Path) -> None:
    path = tmp_path / "old.csv"
    path.write_text("label,concurrency,mode,tok_s\ndepth-triton,1,d3,360\n")
    assert_refused(depth_report(path), "old.csv: not an interleave.py CSV (no column steps)")


def test_refuses_a_window_whose_rate_is_not_a_number(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.csv", [("depth-triton", 1, "d3", 360.0, 3.0)])
    path.write_text(path.read_text().replace("360.0", "fast"))
    assert_refused(depth_report(path), "bad.csv:2: tok_s, concurrency, steps or tpot_ms is not a number")


def test_refuses_a_file_without_depth_rows(tmp_path: Path) -> None:
    path = write(tmp_path / "sweep2.csv", [("specctl-triton", 1, "on", 360.0, 3.0)])
    assert_refused(depth_report(path), "sweep2.csv: no rows labelled nospec-, depth- or depthauto-")


def test_refuses_two_backends_in_one_file(tmp_path: Path) -> None:
    path = write(tmp_path / "mixed.csv", [("depth-triton", 1, "d3", 360.0, 3.0), ("depth-fa3", 1, "d3", 420.0, 3.0)])
    assert_refused(depth_report(path), "mixed.csv: rows of backends fa3, triton; give each backend's rows in its own")


def test_refuses_files_of_two_models(tmp_path: Path) -> None:
    llama = write(tmp_path / "llama.csv", [("depth-triton", 1, "d3", 360.0, 3.0)])
    moe = write(tmp_path / "moe.csv", [("depthauto-triton-qwen3moe", 1, "auto", 300.0, 3.0)])
    assert_refused(depth_report(llama, moe), "more than one target model (llama8b, qwen3moe)")
    assert depth_report(moe).returncode == 0, "a MoE file alone is one model"


def test_refuses_a_depth_label_without_a_backend(tmp_path: Path) -> None:
    path = write(tmp_path / "bare.csv", [("depth", 1, "d3", 360.0, 3.0)])
    assert_refused(depth_report(path), "label 'depth' names no backend (expected depth-BACKEND)")


def test_refuses_no_file_at_all() -> None:
    assert_refused(depth_report(), "give interleave.py's CSVs (usage: depth_report.py FILE.csv")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(power=st.integers(min_value=-4, max_value=8).filter(lambda p: p != 0))
def test_scaling_every_rate_alike_changes_no_ratio_and_no_verdict(tmp_path: Path, power: int) -> None:
    """A machine uniformly faster or slower by 2**power (exact in floating point) reads the same."""
    base, scaled = tmp_path / "base", tmp_path / f"scaled{power}"
    base.mkdir(exist_ok=True)
    scaled.mkdir(exist_ok=True)
    one, other = depth_report(*three_servers(base, GRID)), depth_report(*three_servers(scaled, GRID, 2.0 ** power))
    assert one.returncode == other.returncode == 0, other.stderr

    def verdicts(out: str) -> list[str]:
        return [ln for ln in out.splitlines() if ln.startswith(("- auto", "- A middle", "- No middle", "  - "))]

    def ratios(out: str) -> list[list[str]]:
        return [[r[k].split(" ")[0] if k == "best static" else r[k] for k in RATIO_COLUMNS] for r in rows_of(out)]

    assert ratios(other.stdout) == ratios(one.stdout)
    assert verdicts(other.stdout) == verdicts(one.stdout)


def test_auto_beside_every_static_on_its_own_server_is_judged_there_too(tmp_path: Path) -> None:
    # auto's server ran d1-d3 and off beside it (depthauto since the first sitting): the same-server line judges
    # auto against the best of them, free of the scatter between server starts that the first line carries
    grid = {
        4: {"none": 700.0, "d1": 900.0, "d2": 1300.0, "d3": 1200.0, "off": 700.0,
            "auto": 1000.0, "auto d1": 800.0, "auto d2": 1010.0, "auto d3": 990.0, "auto off": 600.0},
        64: {"none": 4600.0, "d1": 3000.0, "d2": 3500.0, "d3": 3700.0, "off": 4600.0,
             "auto": 4000.0, "auto d1": 2900.0, "auto d2": 3300.0, "auto d3": 3400.0, "auto off": 4500.0},
    }
    done = depth_report(*three_servers(tmp_path, grid))
    assert done.returncode == 0, done.stderr
    rows = by_c(done.stdout)
    assert rows[4]["auto / best static"] == "0.769"  # 1000 / the sweep server's d2 1300: another server start
    assert rows[4]["auto / best static, auto's server"] == "0.990"  # 1000 / its own d2 1010
    assert rows[64]["auto / best static, auto's server"] == "0.889"  # 4000 / its own off 4500
    line = summary(done.stdout, "- On auto's own server")
    assert "beside d1, d2, d3, off" in line and "< 0.97 at 1 of 2 concurrencies: c=64 0.889." in line
    assert "not issue 22's set" not in line


def test_auto_beside_part_of_the_statics_says_it_is_not_the_issues_set(tmp_path: Path) -> None:
    grid = {8: {"none": 1300.0, "d1": 1400.0, "d2": 1900.0, "d3": 1850.0, "off": 1250.0,
                "auto": 1850.0, "auto d3": 1800.0, "auto off": 1200.0}}
    line = summary(depth_report(*three_servers(tmp_path, grid)).stdout, "- On auto's own server")
    assert "beside d3, off" in line and ">= 0.97 at all 1 concurrencies" in line and "not issue 22's set" in line


def test_the_traces_ceiling_prices_its_phases_at_each_statics_rate(tmp_path: Path) -> None:
    # bench/gpu/trace_schedule.py's seed-0 trace of 30 s: its phases' concurrencies and lengths, read the same way
    sys.path.insert(0, str(GPU))
    from trace_schedule import trace_levels

    phases = trace_levels(0, 30.0)
    spent: dict[int, float] = {}
    start = 0.0
    for until, c in phases:
        spent[c] = spent.get(c, 0.0) + until - start
        start = until
    # d3 twice as fast as none at the first phase's load, none twice d3's elsewhere: an oracle gains over both
    first = phases[0][1]
    grid = {c: {"none": 100.0 if c == first else 200.0, "d1": 10.0, "d2": 10.0,
                "d3": 200.0 if c == first else 100.0, "off": 100.0, "auto": 150.0} for c in spent}
    done = depth_report("--trace-s", "30", *three_servers(tmp_path, grid))
    assert done.returncode == 0, done.stderr
    totals = {"none": sum(t * grid[c]["none"] for c, t in spent.items()),
              "d3": sum(t * grid[c]["d3"] for c, t in spent.items())}
    oracle = sum(t * 200.0 for t in spent.values())
    best = max(totals, key=totals.__getitem__)
    line = summary(done.stdout, "- The trace's ceiling from these windows (30 s, seed 0,")
    assert f"gives {oracle / totals[best]:.3f} x the best single static ({best})" in line
    assert f"between none and d3 {oracle / totals[best]:.3f} x" in line  # the middle depths never win here


def test_the_traces_ceiling_needs_every_load_the_trace_visits(tmp_path: Path) -> None:
    grid = {4: {"none": 700.0, "d1": 900.0, "d2": 1300.0, "d3": 1200.0, "off": 700.0, "auto": 1250.0}}
    line = summary(depth_report("--trace-s", "120", *three_servers(tmp_path, grid)).stdout, "- The trace's ceiling")
    assert "no windows of every static at c=" in line


def test_trace_options_are_refused_in_one_line() -> None:
    for argv in (["--trace-s", "x", str(REAL[0])], ["--trace-seed", "1", str(REAL[0])], ["--trace-s"],
                 ["--trace-s", "0", str(REAL[0])], ["--trace-s", "60"]):
        done = depth_report(*argv)
        assert done.returncode == 2 and done.stdout == "", argv
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, argv


def test_depthauto_alone_is_judged_by_its_own_servers_statics(tmp_path: Path) -> None:
    # the next sitting's shape: no sweep server, auto's server ran d1-d3 and off beside it, none on its own
    grid = {4: {"none": 700.0, "auto": 1200.0, "auto d1": 900.0, "auto d2": 1250.0, "auto d3": 1150.0,
                "auto off": 690.0}}
    done = depth_report(*(f for f in three_servers(tmp_path, grid) if f.stem != "depth"))  # no sweep file
    assert done.returncode == 0, done.stderr
    row = by_c(done.stdout)[4]
    assert row["d2"] == "1250.0" and row["best static"] == "d2 1250.0"  # its own windows fill the static columns
    assert row["auto / best static"] == row["auto / best static, auto's server"] == "0.960"
    assert row["middle / binary"] == "1.087"  # 1250 / max(none 700, d3 1150)
    assert "are auto's own server's (no sweep server ran them)" in done.stdout
    assert summary(done.stdout, "- One specctl server ran auto and every static depth beside it")
    assert "at 1 of 1 concurrencies: c=4 0.960 (best d2)." in summary(done.stdout, "- auto / best static")


def test_where_auto_ran_the_best_statics_own_state_the_summary_names_it_as_noise() -> None:
    # the third sitting at 2.8: auto ran off (steps 0) in every window from 32 up, as off did beside it, and read
    # 0.899-1.004 of it; that spread is two reads of one state, and the summary says so
    done = depth_report(DEPTH / "triton-depthauto3.csv")
    assert done.returncode == 0, done.stderr
    line = summary(done.stdout, "- Where auto ran its own server's best static's state in every window")
    assert "c=32 off 0.932, c=48 off 0.968, c=64 off 1.004, c=128 off 0.899; median 0.950" in line
    assert "c=8" not in line  # there auto ran d3 and d2 was best: a choice, not noise


def test_no_same_state_line_where_auto_never_ran_the_best_statics_state(tmp_path: Path) -> None:
    grid = {4: {"none": 700.0, "auto": 1200.0, "auto d1": 900.0, "auto d2": 1150.0, "auto d3": 1250.0,
                "auto off": 690.0}}  # three_servers writes auto's windows at depth 2 while d3 is best
    done = depth_report(*(f for f in three_servers(tmp_path, grid) if f.stem != "depth"))
    assert done.returncode == 0, done.stderr
    assert "state in every window" not in done.stdout


def test_cells_that_mix_two_files_are_named() -> None:
    # the second and third sittings both ran auto's server at 8, 32 and 48: those cells average two server starts
    done = depth_report(DEPTH / "triton-depthauto2.csv", DEPTH / "triton-depthauto3.csv")
    assert done.returncode == 0, done.stderr
    line = summary(done.stdout, "- Cells averaged over several files")
    assert "(triton-depthauto2.csv, triton-depthauto3.csv: server starts apart): depthauto at c=8, 32, 48." in line
    alone = depth_report(DEPTH / "triton-depthauto3.csv")
    assert "Cells averaged over several files" not in alone.stdout
