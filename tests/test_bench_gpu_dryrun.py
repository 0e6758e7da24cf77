"""bench/gpu/run_fast_off.sh dry-run here (DRY_RUN=sim): its phases against specctl's simulator, tiny windows.

A phase's own mistakes (a socket in /tmp, a CSV column nobody fills, a table
fed another phase's windows) cost minutes of a 30-minute GPU session when
they are found there. These runs start the script as the operator does, with
BENCH_ROOT and OUT in a scratch folder and the servers on a free port, and read
what the operator reads: the exit status, the log, the CSVs and the tables.
"""

from __future__ import annotations

import csv
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.bench  # tests a bench/ script: the second tier

REPO = Path(__file__).resolve().parent.parent
GPU = REPO / "bench" / "gpu"
DEADLINE_S = 300.0  # only to end a hung run; nothing here asserts on timing
TINY = {"WINDOW": "1", "IL_WARMUP": "1", "MIXED_WARMUP": "1", "ROUNDS": "1", "PAIR_ROUNDS": "1", "MIXED_ROUNDS": "1",
        "MIXED_CONCS": "4", "CONCS2": "4", "CONCS3": "4", "ACCEPT_PERIOD": "1", "BUDGET_S": "400"}
# a line of the script's own that says a step did not do its work
TROUBLE = re.compile(r"^\[fastoff .*(?:did NOT|failed|unknown phase|left$|no cost table|not journal).*$", re.M)


@dataclass
class Run:
    rc: int
    log: str
    root: Path
    out: Path
    port: int

    @property
    def work(self) -> Path:
        return self.root / "keep" / "triton"

    def windows(self) -> list[dict[str, str]]:
        with (self.out / "interleave-triton.csv").open(newline="") as fh:
            return list(csv.DictReader(fh))


def free_port_pair() -> int:
    """A port P with P + 1 free too (offpair's second server), below the ephemeral range, so that no
    process binding port 0 meanwhile (every other test's servers) can take it before the script does."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20_000, 29_000)
        try:
            for p in (port, port + 1):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port
    raise AssertionError("no two free ports in a row")


def dry_run(scratch: Path, *phases: str, **knobs: str) -> Run:
    """bash run_fast_off.sh PHASES with DRY_RUN=sim; every process it leaves behind is stopped."""
    bindir = Path(sys.executable).parent  # the project's environment: python3 and specctl, as `project` installs
    assert shutil.which("specctl", path=str(bindir)), f"no specctl beside {sys.executable}: pip install -e ."
    port = free_port_pair()
    root, out = scratch / "root", scratch / "out"
    knob_names = ("TAG", "DEPTHS", "DEPTH_COSTS", "PAIR", "SITE")  # the script's own, never the caller's
    mine = {k: v for k, v in os.environ.items() if k not in knob_names}
    env = {**mine, "PATH": f"{bindir}:{os.environ['PATH']}", "DRY_RUN": "sim", "BENCH_ROOT": str(root),
           "OUT": str(out), "BENCH_PORT": str(port), "ATTN": "triton", **TINY, **knobs}
    proc = subprocess.Popen(["bash", str(GPU / "run_fast_off.sh"), *phases], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        log, _ = proc.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:  # hung: its servers (own sessions, still its children) go with it
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait()
        raise
    return Run(proc.returncode, log, root, out, port)


def assert_clean(run: Run, *phases: str) -> None:
    """What every dry run must show: each phase ran to its end, nothing failed, every server is stopped."""
    assert run.rc == 0, run.log[-4000:]
    assert "dry run: every server is specctl's simulator" in run.log
    for phase in phases:
        assert f"== phase {phase} (" in run.log
    assert run.log.rstrip().endswith("done"), run.log[-2000:]
    assert "Traceback" not in run.log, run.log[run.log.index("Traceback") - 2000:][:6000]
    assert not TROUBLE.findall(run.log), TROUBLE.findall(run.log)
    for port in (run.port, run.port + 1):
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"a server still listens on {port}"


def test_a_bad_dry_run_value_is_one_line_and_no_run(sock_dir: Path) -> None:
    run = dry_run(sock_dir, "fixcheck", DRY_RUN="gpu")
    assert run.rc == 2 and "DRY_RUN must be sim or empty, got 'gpu'" in run.log
    assert "starting" not in run.log and "Traceback" not in run.log


def test_a_phase_that_fails_is_named_at_the_end_and_the_run_exits_3_after_the_rest(sock_dir: Path) -> None:
    # On the GPU machine only the tail of the output comes back: the last line must say it.
    run = dry_run(sock_dir, "nonsense", "depthauto", "pack")  # depthauto without a cost table fails too
    assert run.rc == 3, run.log[-2000:]
    assert "unknown phase nonsense" in run.log and "== phase pack (" in run.log
    assert run.log.rstrip().splitlines()[-1].endswith("done; FAILED: nonsense depthauto")
    assert (run.out / "keep-triton.tgz").exists(), "the later phases still ran"


@pytest.mark.parametrize("phase", ["offpair", "earlypub"])
def test_offpair_and_earlypub_take_turns_between_two_resident_servers(sock_dir: Path, phase: str) -> None:
    run = dry_run(sock_dir, phase)
    assert_clean(run, phase)
    rows = run.windows()
    assert sorted((r["label"], r["concurrency"], r["round"]) for r in rows) == [
        ("mixed-nospec-triton", "4", "0"), ("mixed-off-triton", "4", "0")]
    assert all(float(r["tok_s"]) > 0 and r["errors"] == "0" for r in rows)
    assert re.search(r"KV pools: nospec \{\"max_total_num_tokens\": \d+\}, off \{", run.log)
    assert "| c | server | pairs | server / none per pair |" in run.log  # report.py's paired table
    assert re.search(r"^\| 4 \| off \| 1 \| ", run.log, re.M)
    assert "== nospec c=4: 1 turns" in run.log  # threads.py's table
    # decode_lines.py's table over both servers' logs, the second's median against the first's
    assert "| c | server-pair-nospec.log median tok/s (lines) | server-pair-off.log median tok/s (lines) |" in run.log
    assert re.search(r"^\| 4 \| ", (run.work / "decode-lines-triton.txt").read_text(), re.M)
    if phase == "offpair":
        return
    # earlypub's check after its last round: fixcheck's greedy runs against the pair's no-spec server, no KV left
    for label in ("fx-on", "fx-off", "fx-toggle", "fx-cold", "fx-auto"):
        assert f"[compare] {label}-triton vs nospec-triton: 8/8 identical" in run.log
    assert '"num_used_tokens": [0]' in (run.work / "fixcheck-triton.txt").read_text()


def test_offpair_puts_the_tree_under_the_switch_forced_off_beside_no_speculation(sock_dir: Path) -> None:
    # issue 23: the tree's off step against no speculation, both resident (not across server starts)
    run = dry_run(sock_dir, "offpair", PAIR="nospec treeoff", PAIR_CHECK_AFTER="1")
    assert_clean(run, "offpair")
    assert sorted((r["label"], r["concurrency"]) for r in run.windows()) == [
        ("mixed-nospec-triton", "4"), ("mixed-treeoff-triton", "4")]
    # the tree's flags after the launcher's chain ones and the pair's (the simulator has no tree: it says so)
    assert re.search(r"dry run: not simulated: --mem-fraction-static [\d.]+ --max-total-tokens \d+ --sleep-on-idle "
                     r"--speculative-eagle-topk 4 --speculative-num-draft-tokens 16$", run.log, re.M)
    assert re.search(r"starting pair-treeoff: .* --steps 2 ", run.log)
    assert re.search(r"KV pools: nospec \{\"max_total_num_tokens\": \d+\}, treeoff \{", run.log)
    assert re.search(r"^\| 4 \| treeoff \| 1 \| ", run.log, re.M)  # report.py's paired table
    for label in ("fx-on", "fx-off", "fx-toggle", "fx-cold", "fx-auto"):  # the check after round 1
        assert f"[compare] {label}-triton vs nospec-triton: 8/8 identical" in run.log
    # forced off again after the check, as the pair started it (ctl.py's answer to `mode off`)
    after = run.log[run.log.rindex("== KV used after"):]
    assert re.search(r'^\{"set": \[true\], "specctl": \{"mode": "off", ', after, re.M), after[:600]


def test_offpair_splits_the_server_cpus_between_its_two_servers(sock_dir: Path) -> None:
    # the twelfth sitting's tree server ran its ops 1.1-1.7x slower than its partner on the same CPU list;
    # apart (thirteenth) they ran alike: a pair now splits PIN_SERVER unless told otherwise
    cpus = sorted(os.sched_getaffinity(0))
    a, b = str(cpus[0]), str(cpus[-1])
    run = dry_run(sock_dir, "offpair", PIN_SERVER=f"{a},{b}")
    assert_clean(run, "offpair")
    assert f"pair CPUs: nospec on {a}, off on {b}" in run.log
    assert re.search(rf"starting pair-nospec: taskset -c {a} python3 -m specctl.runtime.sim ", run.log)
    assert re.search(rf"starting pair-off: taskset -c {b} python3 -m specctl.runtime.sim ", run.log)


@pytest.mark.parametrize(("knobs", "expected"), [
    ({"PIN_SERVER": "0-11"}, "0,1,2,3,4,5 6,7,8,9,10,11"),
    ({"PIN_SERVER": "0-2,8,10-11"}, "0,1,2 8,10,11"),
    ({"PIN_SERVER": "3"}, "3 3"),  # one CPU cannot be split: both on it
    ({"PIN_SERVER": ""}, "- -"),  # not pinned
    ({"PIN_SERVER": "0-11", "PAIR_PIN_A": "0-5"}, "0-5 0-11"),  # the caller's list; the other one PIN_SERVER's
    ({"PIN_SERVER": "", "PAIR_PIN_A": "1", "PAIR_PIN_B": "2"}, "1 2"),
    ({"PIN_SERVER": "0-11", "PAIR_PIN_A": "", "PAIR_PIN_B": "2"}, "- 2"),  # the first unpinned on purpose
])
def test_pair_cpus_reads_the_lists_as_documented(knobs: dict[str, str], expected: str) -> None:
    # the script's own function, sourced alone: what each server of a pair is pinned to
    script = (GPU / "run_fast_off.sh").read_text()
    body = script[script.index("pair_cpus() {"):]
    body = body[:body.index("\n}\n") + 3]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PAIR_PIN", "PIN_SERVER"))} | knobs
    out = subprocess.run(["bash", "-c", body + "pair_cpus"], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.strip() == expected, out


def test_offpair_refuses_a_profile_whose_load_does_not_fit_the_pools(sock_dir: Path) -> None:
    # 256 x (256 + 2,000) tokens against 340,000: the profile would run on a queue, not at 256
    run = dry_run(sock_dir, "offpair", PAIR_PROFILE="1", PROF_CONCS="256")
    assert run.rc == 3 and "the profile's load at 256 requests needs 577536 KV tokens" in run.log, run.log[-2000:]
    assert "(lower PROF_OUTPUT: 1072 fits)" in run.log
    assert "starting" not in run.log and "Traceback" not in run.log


def test_offpair_refuses_two_moe_servers_that_cannot_share_one_h200(sock_dir: Path) -> None:
    # two 61 GB targets leave each KV pool half of what 256 requests need: no servers start, the reason is said
    run = dry_run(sock_dir, "offpair", MODEL="qwen3moe")
    assert run.rc == 3 and "two MoE servers do not fit one H200 together" in run.log, run.log[-2000:]
    assert "offab (fresh servers taking turns)" in run.log
    assert "starting" not in run.log and "Traceback" not in run.log
    assert run.log.rstrip().splitlines()[-1].endswith("done; FAILED: offpair")


def test_nospec2_tree_then_sweep2_through_specctls_own_supervisor(sock_dir: Path) -> None:
    run = dry_run(sock_dir, "nospec2", "tree", "sweep2", "jitpack")
    assert_clean(run, "nospec2", "tree", "sweep2", "jitpack")
    rows = run.windows()
    assert [(r["label"], r["mode"]) for r in rows if r["label"] == "nospec-triton"] == [("nospec-triton", "-")]
    assert [(r["label"], r["mode"]) for r in rows if r["label"] == "tree-triton"] == [("tree-triton", "-")]
    assert "--speculative-eagle-topk 4 --speculative-num-steps 2 --speculative-num-draft-tokens 16" in run.log
    # SGLang's simulated tokens: its default (token id 100) for Llama as ever, and for a tree, which is all
    # SGLang allows with topk > 1
    assert "tree: simulated acceptance 2.7, tokens fixed (sim_tokens)" in run.log
    assert "SGLANG_SIMULATE_ACC_LEN=2.8, SGLANG_SIMULATE_ACC_TOKEN_MODE=fixed)" in run.log  # sweep2's
    assert "packed the JIT cache" in run.log and (run.out / "jit.tgz").stat().st_size > 0
    sweep = {r["mode"]: r for r in rows if r["label"] == "specctl-triton"}
    assert set(sweep) == {"on", "off", "auto"} and all(r["switch_rc"] == "0" for r in sweep.values())
    assert sweep["on"]["steps"] == "3.0" and sweep["off"]["steps"] == "0.0"  # the specctl CLI really switched
    assert "specctl run --headless starts its simulator" in run.log
    assert re.search(r"^server +ready .*\[SIM\]", run.log, re.M)  # specctl status, through sweep2's socket
    journal = run.work / "journal-sweep2-triton.jsonl"
    assert re.search(rf"journal: {len(journal.read_text().splitlines())} lines", run.log)
    assert (run.work / "corr-nospec.json").exists()
    done = subprocess.run([sys.executable, str(GPU / "report.py"), str(run.out / "interleave-triton.csv")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("| 4 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    # none, on, the tree, off, auto, and auto over the tree
    assert "-" not in (cells[1], cells[2], cells[3], cells[4], cells[5], cells[-1]), line


def test_a_moe_sweep_asks_sglang_for_real_tokens_and_a_tree_never_does(sock_dir: Path) -> None:
    # with SGLang's default every request of a speculative server decodes token id 100, off state too, so a
    # MoE routes the whole batch to the same experts: its sweeps ask for the draft's and the target's tokens
    run = dry_run(sock_dir, "sweep", "tree", MODEL="qwen3moe", CONCS="2")
    assert_clean(run, "sweep", "tree")
    assert "sweep: simulated acceptance 2.8, tokens real-draft-token (sim_tokens)" in run.log
    assert "tree: simulated acceptance 2.7, tokens fixed (sim_tokens)" in run.log
    chosen = dry_run(sock_dir, "sweep", CONCS="2", SIM_TOKENS="real-draft-token")
    assert "sweep: simulated acceptance 2.8, tokens real-draft-token (sim_tokens)" in chosen.log


def test_proof_fixcheck_then_pack_on_fa3(sock_dir: Path) -> None:
    run = dry_run(sock_dir, "proof", "fixcheck", "pack", ATTN="fa3")
    assert_clean(run, "proof", "fixcheck", "pack")
    assert "--preset h200-llama8b-fa3" in run.log
    # proof's headless supervisor attached and journalled (its socket in the run's folder, not /tmp)
    assert re.search(r"journal lines: [1-9]\d*", run.log)
    for label in ("on2", "toggle", "autoflip", "off"):
        assert f"[compare] {label}-fa3 vs on-fa3: 8/8 identical" in run.log
    for label in ("fx-off", "fx-toggle", "fx-cold", "fx-auto"):
        assert f"[compare] {label}-fa3 vs fx-on-fa3: 8/8 identical" in run.log
    work = run.root / "keep" / "fa3"
    report = (work / "fixcheck-fa3.txt").read_text()
    assert report.count('"num_used_tokens": [0]') == 2  # before and after: the KV check read the pool
    facts = (run.out / "facts-fa3.txt").read_text()
    assert '"attention_backend": "fa3"' in facts and "dry run: no nvidia-smi" in facts
    with tarfile.open(run.out / "keep-fa3.tgz") as tar:
        names = set(tar.getnames())
    assert {"./fixcheck-fa3.txt", "./corr-fx-cold-fa3.json", "./server-fixcheck.log.tail"} <= names
    assert "./server-fixcheck.log" not in names


def test_depthcheck_runs_every_depth_and_reads_acceptance_after_each_change(sock_dir: Path) -> None:
    run = dry_run(sock_dir, "nospecref", "depthcheck", DEPTHS="0,1,2,3")
    assert_clean(run, "nospecref", "depthcheck")
    for label in ("dc-d2", "dc-d3", "dc-off", "dc-cycle", "dc-auto"):
        assert f"[compare] {label}-triton vs dc-d1-triton: 8/8 identical" in run.log
    for label in ("dc-d1", "dc-d2", "dc-d3", "dc-off", "dc-cycle", "dc-auto"):  # nospecref's reference
        assert f"[compare] {label}-triton vs nospec-triton: 8/8 identical" in run.log
    assert "| depth | right after (verifies 1-8) |" in run.log  # depth_accept.py's table
    assert len(list(csv.DictReader((run.out / "depth-accept-triton.csv").open()))) > 0
    assert (run.out / "depthcheck-triton.txt").read_text().count('"num_used_tokens": [0]') == 2


def test_the_table_head_model_replays_the_check_prompts_in_depthcheck(sock_dir: Path) -> None:
    # MODEL=llama8b-table: the head covers only the tokens of the check prompts' outputs, so the acceptance
    # reading must send those prompts; the tag keeps its files apart from the dummy head's
    run = dry_run(sock_dir, "nospecref", "depthcheck", DEPTHS="0,1,2,3", MODEL="llama8b-table")
    assert_clean(run, "nospecref", "depthcheck")
    report = (run.out / "depthcheck-triton-table.txt").read_text()
    assert "load: correctness.py's eight check prompts in turn" in report
    assert "| depth | right after (verifies 1-8) |" in report


def test_depthsweep_then_depthauto_measure_and_use_the_cost_table(sock_dir: Path) -> None:
    from specctl.runtime.core.depth_model import read_costs

    run = dry_run(sock_dir, "depthsweep", "depthauto", DEPTHS="0,1,2,3")
    assert_clean(run, "depthsweep", "depthauto")
    rows = run.windows()
    sweep = {r["mode"]: r for r in rows if r["label"] == "depth-triton"}
    assert set(sweep) == {"d1", "d2", "d3", "off"}
    assert all(float(sweep[m]["accept_len"]) > 1.0 for m in ("d1", "d2", "d3"))
    costs = read_costs(run.out / "depth-costs-measured-triton.json")  # as the plugin reads SPECCTL_DEPTH_COSTS
    assert costs.buckets == (4,) and costs.depths == (0, 1, 2, 3)
    assert re.search(r"^c=4: d0 [\d.]+ ms  d1 ", run.log, re.M)
    assert {r["mode"] for r in rows if r["label"] == "depthauto-triton"} == {"auto", "d1", "d2", "d3", "off"}
    assert '"candidates": [0, 1, 2, 3], "depth_model": true' in run.log  # depthauto's server chooses among them
    assert "## triton, llama8b: auto against every static depth" in run.log  # depth_report.py's table at the end


def test_depthauto_alone_runs_on_the_committed_table_beside_every_static_depth(sock_dir: Path) -> None:
    # the next sitting's call: no depthsweep first, the table from the repository named by a relative path
    run = dry_run(sock_dir, "depthauto", DEPTHS="0,1,2,3",
                  DEPTH_COSTS="bench/gpu/results/depth/triton-costs-measured.json")
    assert_clean(run, "depthauto")
    rows = [r for r in run.windows() if r["label"] == "depthauto-triton"]
    assert {r["mode"] for r in rows} == {"auto", "d1", "d2", "d3", "off"}
    assert '"depth_model": true' in run.log
    assert "- On auto's own server (beside d1, d2, d3, off;" in run.log


def test_depthjournal_measures_the_cost_table_from_the_supervisors_journal_beside_the_sweeps(sock_dir: Path) -> None:
    from specctl.runtime.core.depth_model import read_costs

    # windows of 2 s: a cell needs 3 journal intervals of 0.5 s at one depth (TINY's 1 s gives a pin too few)
    run = dry_run(sock_dir, "depthjournal", DEPTHS="0,1,2,3", JOURNAL_CONCS="4 16", WINDOW="2")
    assert_clean(run, "depthjournal")
    rows = [r for r in run.windows() if r["label"] == "depthjournal-triton"]
    modes = ("d1", "d2", "d3", "off")
    assert {(r["concurrency"], r["mode"]) for r in rows} == {(c, m) for c in ("4", "16") for m in modes}
    assert all(r["switch_rc"] == "0" for r in rows), rows  # every pin went through the specctl CLI
    assert {r["mode"]: round(float(r["steps"])) for r in rows if r["concurrency"] == "16"} == \
        {"d1": 1, "d2": 2, "d3": 3, "off": 0}
    for batch in (4, 16):  # depth-costs' coverage table: every depth measured at the concurrencies run
        line = re.search(rf"^ +{batch}  (.*)$", run.log, re.M)
        assert line and len(re.findall(r"[\d.]+ ms \(\d+/\d+\)", line.group(1))) == 4, line
    assert re.search(r"^ +64  prior +prior +prior +prior$", run.log, re.M)  # not run: the prior's cells
    costs = read_costs(run.out / "depth-costs-journal-triton.json")  # as the plugin reads SPECCTL_DEPTH_COSTS
    prior = read_costs(REPO / "bench" / "gpu" / "results" / "depth" / "triton-costs-measured.json")
    assert costs.buckets == prior.buckets and costs.depths == (0, 1, 2, 3)
    assert costs.step_s[prior.buckets.index(64)] == pytest.approx(prior.step_s[prior.buckets.index(64)])
    compared = re.findall(r"^  compare batch +(\d+) d(\d): journal +([\d.]+) +sweep +([\d.]+) +ratio +([\d.]+)",
                          run.log, re.M)
    assert {(b, d) for b, d, *_ in compared} == {(b, d) for b in ("4", "16") for d in "0123"}
    for _, _, mine, theirs, ratio in compared:
        assert float(ratio) == pytest.approx(float(mine) / float(theirs), abs=0.01)
    assert "  compare: 8 cells, ratio median " in run.log


def test_an_installs_pth_files_and_bench_env_reach_every_process_it_starts(sock_dir: Path) -> None:
    # SGLang 0.5.23 found cutlass only through a .pth file (PYTHONPATH skips those) and started only with
    # the settings install_0523.sh writes to SITE/bench.env: both must reach the servers the script starts.
    site, extra, seen = sock_dir / "site", sock_dir / "behind-pth", sock_dir / "seen.txt"
    extra.mkdir()
    site.mkdir()
    (site / "probe.pth").write_text(f"import sys; sys.path.append({str(extra)!r})\n")
    (extra / "sitecustomize.py").write_text(
        "import os\n"
        f"with open({str(seen)!r}, 'a') as fh:\n"
        "    fh.write(os.environ.get('SPECCTL_PROBE_SETTING', 'unset') + '\\n')\n")
    (site / "bench.env").write_text("# written by an install\nSPECCTL_PROBE_SETTING=from-bench-env\n")
    run = dry_run(sock_dir, "offcheck", SITE=str(site), CONCS="4")
    assert_clean(run, "offcheck")
    assert f"settings from {site}/bench.env: SPECCTL_PROBE_SETTING=from-bench-env" in run.log
    lines = seen.read_text().split()
    assert lines and set(lines) == {"from-bench-env"}, lines  # every python3 it started saw both


def test_a_site_without_bench_env_says_nothing_of_settings(sock_dir: Path) -> None:
    run = dry_run(sock_dir, "pack", SITE=str(sock_dir / "absent"))
    assert_clean(run, "pack")
    assert "settings from" not in run.log


def test_depthauto_with_depth_row_runs_fa3s_thresholds_row_as_the_supervisor_sets_it(sock_dir: Path) -> None:
    # FA3's row never turns speculation off for load, so the cost table alone chooses; the policy's
    # defaults (off at 32) would hold auto off from 32 requests whatever the table said
    run = dry_run(sock_dir, "depthauto", ATTN="fa3", DEPTHS="0,1,2,3", DEPTH_ROW="1",
                  DEPTH_COSTS="bench/gpu/results/depth/fa3-costs-measured.json")
    assert_clean(run, "depthauto")
    assert "depth row for fa3: off_at=1048576 on_at=1048575 min_accept=0.15 accept_slope=0.0042" in run.log
    after = [x for x in run.log.splitlines() if x.startswith('{"mode"')][-1]  # the server's state after the windows
    assert '"off_at": 1048576, "on_at": 1048575' in after, after
    with (run.out / "interleave-fa3.csv").open(newline="") as fh:
        assert {r["mode"] for r in csv.DictReader(fh)} == {"auto", "d1", "d2", "d3", "off"}


def test_server_facts_count_decode_log_lines_without_a_cuda_graph_by_batch_size(tmp_path: Path) -> None:
    # an off state at 0.6 of no speculation at 16-32 requests (docs/sglang-plugin.md) could not be told from an
    # eager decode
    log = tmp_path / "server.log"
    log.write_text("[t] Decode batch, #running-req: 16, #token: 4752, accept len: 1.00, cuda graph: False, gen\n"
                   "[t] Decode batch, #running-req: 6, #token: 9, cuda graph: True, gen throughput\n"
                   "[t] Prefill batch, #new-seq: 1, #new-token: 512\n"
                   "[t] Decode batch, #running-req: 16, #token: 4800, cuda graph: False, gen\n"
                   "[t] Decode batch, #running-req: 32, #token: 9600, cuda graph: False, gen\n")
    script = f'source <(sed -n "/^graph_lines() {{/,/^}}/p" {GPU / "run_fast_off.sh"}); graph_lines "$1"'
    done = subprocess.run(["bash", "-c", script, "-", str(log)], capture_output=True, text=True, timeout=60)
    line = done.stdout.strip()
    assert line.startswith("decode log lines: cuda graph True 1, False 3;"), (line, done.stderr)
    assert sorted(line.split("; ")[1:]) == ["batch 16 x2", "batch 32 x1"]
    empty = subprocess.run(["bash", "-c", script, "-", "/dev/null"], capture_output=True, text=True, timeout=60)
    assert empty.stdout.strip() == "decode log lines: cuda graph True 0, False 0"


def test_treecheck_and_treesweep_run_the_tree_under_the_switch_against_no_speculation(sock_dir: Path) -> None:
    run = dry_run(sock_dir, "nospecref", "treecheck", "treesweep", "pack")
    assert_clean(run, "nospecref", "treecheck", "treesweep", "pack")
    # the tree's flags after the launcher's chain ones (the simulator has no tree: it says so)
    assert "dry run: not simulated: --speculative-eagle-topk 4 --speculative-num-draft-tokens 16" in run.log
    report = (run.out / "treecheck-triton.txt").read_text()
    for label in ("fx-off", "fx-toggle", "fx-cold", "fx-auto"):
        assert f"[compare] {label}-triton vs fx-on-triton: 8/8 identical" in report
    for label in ("fx-on", "fx-off", "fx-toggle", "fx-cold", "fx-auto"):
        assert f"[compare] {label}-triton vs nospec-triton: 8/8 identical" in report
    assert report.count('"num_used_tokens": [0]') == 2 and "== start-up" in report
    assert "the tree's settings: off_at=16 on_at=8" in run.log
    assert {r["mode"] for r in run.windows() if r["label"] == "treesw-triton"} == {"on", "off", "auto"}


def test_depth_control_runs_auto_confined_to_one_depth_beside_the_pins_and_reports_it(sock_dir: Path) -> None:
    # the same-state control: aN is mode auto with candidates {0, N}; a pin after it gets every depth back
    run = dry_run(sock_dir, "depthauto", ATTN="fa3", DEPTHS="0,1,2,3", DEPTH_ROW="1", DEPTH_CONTROL="2",
                  DEPTH_COSTS="bench/gpu/results/depth/fa3-costs-measured.json")
    assert_clean(run, "depthauto")
    with (run.out / "interleave-fa3.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["mode"] for r in rows} == {"auto", "a2", "d1", "d2", "d3", "off"}
    assert all(r["switch_rc"] == "0" for r in rows), [(r["mode"], r["switch_rc"]) for r in rows]
    assert {round(float(r["steps"])) for r in rows if r["mode"] == "a2"} == {2}
    assert {round(float(r["steps"])) for r in rows if r["mode"] == "d3"} == {3}, "d3 after a2: every depth back"
    assert re.search(r"- The same-state control \(auto confined to \{0, N\} as mode aN.*: c=4 a2 / d2 \d\.\d{3}",
                     run.log), run.log[-3000:]


def test_the_calibration_sweep_sets_calibrated_auto_beside_the_row_alone(sock_dir: Path) -> None:
    # what bench/gpu/calibrate.sh runs for the dense check: calib_switch.sh's modes through the real CLI
    run = dry_run(sock_dir, "sweep2", SWEEP_SWITCH="calib", SWEEP_MODES="auto row on off", AUTO_SETTLE="1")
    assert_clean(run, "sweep2")
    sweep = {r["mode"]: r for r in run.windows() if r["label"] == "specctl-triton"}
    assert set(sweep) == {"auto", "row", "on", "off"} and all(r["switch_rc"] == "0" for r in sweep.values())
    assert sweep["on"]["steps"] == "3.0" and sweep["off"]["steps"] == "0.0"
    assert "switch to row failed" not in run.log and "unknown mode" not in run.log
    journal = run.work / "journal-sweep2-triton.jsonl"
    commands = [json.loads(line) for line in journal.read_text().splitlines() if '"kind":"command"' in line]
    said = [(c["cmd"], c.get("args"), c["ok"]) for c in commands]
    # row: calibration frozen and reset, then auto; auto: calibration on again, then auto
    assert said[:2] == [("set", {"settings": {"calibrate": "on"}}, True), ("mode", {"mode": "auto"}, True)], said
    assert said[2:5] == [("set", {"settings": {"calibrate": "off"}}, True), ("calibration", {"action": "reset"}, True),
                         ("mode", {"mode": "auto"}, True)], said
    report = subprocess.run([sys.executable, str(GPU / "calibration_journal.py"), str(journal)],
                            capture_output=True, text=True, timeout=60)
    assert report.returncode == 0 and "Traceback" not in report.stderr, report.stderr
    table = subprocess.run([sys.executable, str(GPU / "calib_report.py"), str(run.out / "interleave-triton.csv")],
                           capture_output=True, text=True, timeout=60)
    assert table.returncode == 0, table.stderr
    head = table.stdout.splitlines()[0]
    assert head.startswith("| requests | forced on | forced off | calibrated auto | row alone |"), head
    assert table.stdout.splitlines()[2].startswith("| 4 | ")
