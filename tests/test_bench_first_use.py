"""bench/gpu/first_use.py against specctl's simulator, and run_fast_off.sh's coldswitch phase dry-run.

The GPU call that maps each state's first-use pause (and then checks that the
switch warm-up leaves none) has one try on a fresh machine: its caches are
cold only once. A mistake found there (a refused state that leaves the server
forced off, a CSV without one of the two runs, a log that does not say which
start had the warm-up) costs that machine. These run the tool and the phase as
the operator does, against the simulator on loopback, and read what the
operator reads: the exit status, the table, the CSV, the log, the pack.

What they cannot show: a compile. The simulator writes no JIT cache, so the
kernel columns stay empty here; the naming of cache files is checked on a
folder laid out as Triton's, TVM-FFI's and FlashInfer's caches are.
"""

from __future__ import annotations

import csv
import json
import os
import socket
import subprocess
import sys
import tarfile
import urllib.request
from itertools import product
from pathlib import Path

import pytest
from test_bench_gpu_dryrun import assert_clean, dry_run

from specctl.runtime.core.settings import MODE_CODES

from support.sim_process import sim_process

pytestmark = pytest.mark.bench  # tests a bench/ script: the second tier

REPO = Path(__file__).resolve().parent.parent
GPU = REPO / "bench" / "gpu"
sys.path.insert(0, str(GPU))
import first_use  # noqa: E402  (bench/gpu is not a package)

COLUMNS = ["label", "state", "batch", "first_s", "second_s", "excess_s", "kernels_first", "kernels_second"]


def run_first_use(url: str, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """first_use.py as the phase runs it (one batched /generate a burst, which the simulator takes too)."""
    return subprocess.run([sys.executable, str(GPU / "first_use.py"), "--url", url, "--csv", str(out),
                           "--new-tokens", "4", "--prompt-len", "8", *args],
                          capture_output=True, text=True)


def settings(url: str) -> dict[str, object]:
    with urllib.request.urlopen(f"{url}/server_info") as resp:
        return json.load(resp)["internal_states"][0]["specctl"]["settings"]


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames == COLUMNS
        return list(reader)


def test_every_state_at_every_bucket_ascending_in_the_table_and_the_csv(tmp_path: Path) -> None:
    out = tmp_path / "first.csv"
    empty = tmp_path / "triton"
    empty.mkdir()
    with sim_process(tmp_path, "--load", "idle", "--steps", "3") as url:
        done = run_first_use(url, out, "--states", "off 3", "--buckets", "4 1 2", "--label", "coldA-sim",
                             "--cache-dirs", f"{empty},{tmp_path / 'not-there'}")
        assert done.returncode == 0, done.stderr
        again = run_first_use(url, out, "--states", "off", "--buckets", "1", "--label", "coldB-sim", "--append",
                              "--seed", "1")
        assert again.returncode == 0, again.stderr
        after = settings(url)
    assert done.stderr == "" and "Traceback" not in done.stdout
    lines = done.stdout.splitlines()
    assert lines[0].startswith("first_use coldA-sim: states off 3, buckets 1 2 4")
    assert "watching 2 cache dirs" in lines[0]
    assert lines[1].split() == ["state", "batch", "first", "s", "second", "s", "excess", "s", "new", "kernels"]
    table = [line.split() for line in lines[2:]]
    assert [(cells[0], cells[1]) for cells in table] == [
        ("off", "1"), ("3", "1"), ("off", "2"), ("3", "2"), ("off", "4"), ("3", "4")]
    assert all(cells[5] == "-" for cells in table)  # the simulator compiles nothing
    rows = read_csv(out)
    assert [(r["label"], r["state"], r["batch"]) for r in rows] == [
        ("coldA-sim", s, b) for b, s in product("124", ("off", "3"))] + [("coldB-sim", "off", "1")]
    for r in rows:
        first, second, excess = float(r["first_s"]), float(r["second_s"]), float(r["excess_s"])
        assert first > 0 and second > 0 and abs(excess - (first - second)) < 1e-3
        assert r["kernels_first"] == r["kernels_second"] == ""
    assert after["mode"] == "auto" and after["steps"] == 3, after  # put back after forcing off and on


def test_a_refused_state_is_one_line_exit_2_and_mode_auto_is_put_back(tmp_path: Path) -> None:
    out = tmp_path / "refused.csv"
    with sim_process(tmp_path, "--load", "idle", "--steps", "3") as url:  # builds depths 0 and 3, not 7
        done = run_first_use(url, out, "--states", "off 7", "--buckets", "1 2", "--label", "coldA-sim")
        after = settings(url)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        'first_use: the server refused {"specctl_mode": 1, "specctl_steps": 7} (answer [false])']
    assert "Traceback" not in done.stdout
    assert after["mode"] == "auto" and after["steps"] == 3, after  # not left forced off
    assert [(r["state"], r["batch"]) for r in read_csv(out)] == [("off", "1")]  # what ran before is kept


def test_a_server_that_is_not_there_is_one_line_exit_2(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on once this is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = run_first_use(f"http://127.0.0.1:{port}", tmp_path / "none.csv", "--states", "off", "--buckets", "1",
                         "--label", "x")
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith(f"first_use: cannot reach http://127.0.0.1:{port} (/server_info):")
    assert not (tmp_path / "none.csv").exists()


def test_new_cache_files_name_the_kernels_that_compiled(tmp_path: Path) -> None:
    assert first_use.MODE_CODES == MODE_CODES  # bench/gpu/ctl.py's copy of the wire codes
    triton, ffi, flashinfer = tmp_path / "triton", tmp_path / "tvm-ffi", tmp_path / "flashinfer"
    old = triton / "aaaa" / "old_kernel.json"
    for path in (old, triton / "aaaa" / "__grp__old_kernel.json", flashinfer / "cached_ops" / "old_op" / "old_op.so"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    dirs = [triton, ffi, flashinfer, tmp_path / "not-there"]
    before = first_use.listing(dirs)
    # a new Triton kernel (its metadata, group file and binary), a TVM-FFI and a FlashInfer op, a config that
    # is no kernel, and the old kernel's metadata rewritten
    for name in ("bbbb/assign_extend_cache_locs.json", "bbbb/__grp__assign_extend_cache_locs.json",
                 "bbbb/assign_extend_cache_locs.cubin", "cccc/orphan.json"):
        (triton / name).parent.mkdir(parents=True, exist_ok=True)
        (triton / name).write_text("{}")
    (ffi / "x").mkdir(parents=True)
    (ffi / "x" / "tvm_ffi_op.so").write_bytes(b"")
    (flashinfer / "cached_ops" / "sampling").mkdir(parents=True)
    (flashinfer / "cached_ops" / "sampling" / "sampling.so").write_bytes(b"")
    os.utime(old, ns=(before[old] + 10**9, before[old] + 10**9))
    assert first_use.new_kernels(before, first_use.listing(dirs)) == [
        "assign_extend_cache_locs", "old_kernel", "sampling", "tvm_ffi_op"]
    assert first_use.new_kernels(first_use.listing(dirs), first_use.listing(dirs)) == []
    prompts = first_use.Prompts(0, 2)
    taken = [tuple(p) for _ in range(50) for p in prompts.take(40)]
    assert len(set(taken)) == len(taken) == 2000  # never the same prompt twice: no radix-cache hit
    assert all(first_use.ID_LOW <= t < first_use.ID_HIGH for p in taken for t in p)


def test_coldswitch_maps_both_runs_and_moves_the_caches_aside_between_them(sock_dir: Path) -> None:
    leftover = sock_dir / "root" / "jitcache" / "triton" / "dddd" / "from_before.json"  # a cache not cold
    leftover.parent.mkdir(parents=True)
    leftover.write_text("{}")
    run = dry_run(sock_dir, "coldswitch", "pack", COLD_BUCKETS="1 2 4")
    assert_clean(run, "coldswitch", "pack")
    rows = read_csv(run.out / "coldswitch-triton.csv")
    assert sorted((r["label"], r["state"], r["batch"]) for r in rows) == sorted(
        product(("coldA-triton", "coldB-triton"), ("off", "3"), ("1", "2", "4")))
    log = run.log
    assert "coldA: start-up " in log and "s with the switch warm-up off (SPECCTL_WARMUP=0)" in log
    assert "s with the switch warm-up on" in log.split("starting coldB")[1]
    assert log.index("starting coldA") < log.index("first_use coldA-triton") < log.index("starting coldB") \
        < log.index("first_use coldB-triton")
    # the run before coldA's start found a cache: moved aside, as coldA's own before coldB's start
    assert (run.root / "jitcache.before-coldswitch" / "triton" / "dddd" / "from_before.json").exists()
    assert f"moved {run.root}/jitcache aside to {run.root}/jitcache.coldA" in log
    assert (run.root / "jitcache.coldA").is_dir() and (run.root / "jitcache" / "triton").is_dir()
    assert "cache after coldB: " in log
    with tarfile.open(run.out / "keep-triton.tgz") as tar:
        kept = {Path(name).name for name in tar.getnames()}
    assert {"server-coldA.log.tail", "server-coldB.log.tail", "coldswitch-triton.csv",
            "coldswitch-triton.txt"} <= kept


def test_coldswitch_refuses_a_cold_start_that_the_budget_cannot_hold(sock_dir: Path) -> None:
    run = dry_run(sock_dir, "coldswitch", COLD_BUCKETS="1", COLD_NEED="100000")
    assert run.rc == 3
    assert "coldA: not started: " in run.log and "coldB: not started: " in run.log
    assert "starting coldA" not in run.log and "starting coldB" not in run.log
    assert run.log.rstrip().splitlines()[-1].endswith("done; FAILED: coldswitch")
