#!/usr/bin/env bash
# run_fast_off.sh - run ON THE GPU machine from the repo root (the carried checkout).
#     bash bench/gpu/run_fast_off.sh PHASE [PHASE ...]
# A phase that does not do its work does not stop the later ones (pack still keeps what there is);
# the last line then reads "done; FAILED: PHASES" and the exit status is 3 (1: an install failed).
# Phases, in the order they make sense:
#   collect        keep any FA3 parts that travelled (.wheelhouse/fa3p/part*) in /root/fa3parts; unpack a JIT
#                  cache that travelled (.wheelhouse/jit/jit.tgz, from jitpack) into /root
#   jitpack        the kernels compiled on this machine (/root/jitcache: Triton, TVM-FFI; /root/.cache/flashinfer)
#                  packed into $OUT/jit.tgz, to travel to the next machine as .wheelhouse/jit/jit.tgz: a
#                  FlashInfer server's first start compiled for about 3 minutes (docs/benchmarks.md)
#   install:DIR    the kit's install_on_device.sh on a wheel chunk (e.g. install:.wheelhouse/chunk-1)
#   project        pip-install this repo (and .whl/*.whl) into /root/site, check the entry point
#   fa3            assemble sgl_kernel's flash_ops from /root/fa3parts once all parts are there
#   nospec         server without speculation: greedy reference outputs + the sweep
#   proof          specctl server, SGLANG_SIMULATE_ACC_LEN unset: plugin proof (mode set/read
#                  back), greedy outputs forced off / on / switched / auto, KV leak check,
#                  specctl's headless supervisor journalling against it
#   offcheck       like proof but only forced off + KV check (cheap correctness for a 2nd backend)
#   sweep          specctl server with simulated acceptance: per concurrency, forced on,
#                  forced off and auto, switched through /set_internal_state (one server)
#   nospec2        server without speculation: greedy + logprob reference, then interleave.py over
#                  CONCS2 (ROUNDS windows of WINDOW s per concurrency, one unbroken load)
#   nospecref      nospec2's greedy + logprob reference alone, no load (for depthcheck/fixcheck after it)
#   sweep2         specctl's own supervisor launches the specctl server (`specctl run --headless
#                  --model ...`, so the per-backend thresholds apply), simulated acceptance;
#                  interleave.py switches forced on / forced off / auto through the specctl CLI
#   adaptive       SGLang's own --speculative-adaptive (default config, started at steps 7),
#                  no plugin; interleave.py, one window per concurrency
#   resume         specctl server, acceptance NOT simulated, draft proposals traced
#                  (SPECCTL_TRACE_DRAFTS): greedy + logprob runs (off, on, toggled, auto), KV
#                  check, then always-on vs off-then-on with the draft cold (warm_below=0) and
#                  warm (warm_below=100000) for bench/gpu/resume.py, then the off state's
#                  throughput with the draft cold vs warm (interleave.py over RESUME_CONCS)
#   offprofile     where the off step's time goes at large batches (docs/sglang-plugin.md): a
#                  server without speculation, then a specctl server forced off (acceptance not
#                  simulated: it plays no part while off), each with decode-only windows (every
#                  request PROF_INPUT in / PROF_OUTPUT out, all admitted before the first window)
#                  at PROF_CONCS, then PROF_STEPS scheduler steps under SGLang's torch profiler,
#                  summarised by summarize_trace.py (CPU period vs GPU busy per step)
#   offcost        the off state's cost after the CPU fixes (docs/sglang-plugin.md): a server without
#                  speculation (greedy reference, decode-only windows at PROF_CONCS, mixed windows at
#                  MIXED_CONCS), then a specctl server (acceptance not simulated): fixcheck's greedy
#                  runs, forced off: decode-only windows, mixed windows with the draft cold vs warm
#                  (warm_below), and a profile of off steps
#   prefillcost    the off state's cost with arrivals (docs/sglang-plugin.md): a server without
#                  speculation, then a specctl server forced off, each with mixed windows at
#                  MIXED_CONCS and a profile with arrivals inside (PROF_JITTER > 0); cpu_ops.py
#                  splits both traces' scheduler CPU by step kind (prefill apart from decode)
#   offab          no spec vs specctl forced off, a fresh server each turn, AB_ROUNDS turns each
#                  (A B A B): mixed windows at MIXED_CONCS
#   offpair        (Llama only: two MoE targets do not fit one H200 with their KV pools)
#                  two servers resident together (PAIR: "nospec off", "off nospec", "nospec auto" (specctl
#                  in auto, as its supervisor sets it for ATTN), "nospec treeoff" (the tree under the switch,
#                  TREE_*, forced off), or the null test "nospec nospec2"; KV
#                  pools of PAIR_MAX_TOKENS, --sleep-on-idle), windows taking turns between them
#                  (A B, then B A), PAIR_ROUNDS x MIXED_CONCS; PAIR_PROFILE=1 adds a profile of each
#                  (CPU probe: cpu_ops.py); PAIR_LOAD=decode makes every turn decode only (IL_INPUT in,
#                  PAIR_DECODE_OUTPUT out, no length spread: all admitted in the warm-up, none ending in
#                  the window; labels decodeonly-ROLE-ATTN) instead of the sweep's arrivals;
#                  PAIR_CHECK_AFTER=K runs fixcheck's greedy runs on the specctl server after round K,
#                  against the no-spec server of the pair (then the specctl server's mode is restored)
#   earlypub       offpair's "nospec off" with the early publish on the specctl server
#                  (SPECCTL_EARLY_PUBLISH=EARLY_PUBLISH, default 1; docs/sglang-plugin.md, "Early publish"),
#                  equal KV pools (PAIR_MAX_TOKENS on both), then fixcheck's greedy runs + KV check on
#                  it against the pair's no-spec server; EARLY_CHECK=1 adds SGLang's cross-check (a
#                  device sync per step: for correctness, not for the timing)
#   fixcheck       specctl server: greedy runs forced on / off / toggled / off-then-on (cold
#                  draft) / auto, compared with each other (and no spec, if here), KV check
#   depthcheck     specctl server built with DEPTHS (default 0,1,2,3; acceptance NOT simulated): each
#                  state's build time and memory from the log, greedy runs at every static depth, forced
#                  off, depths cycled mid-generation (--cycle-steps), auto over the depths with a cost
#                  table (DEPTH_COSTS, else the simulator's prediction for ATTN) switching often, all
#                  compared with each other (and no spec, if here); KV before/after; acceptance right
#                  after each depth change (depth_accept.py); every rank's switches (rank_switches.py)
#   depthsweep     specctl server built with DEPTHS, simulated acceptance (ACC_LEN): interleave.py over
#                  CONCS3 with every static depth (d1 d2 d3) and off taking turns under one load, then
#                  depth_table.py turns those windows into the measured cost table
#                  ($WORK/depth-costs-measured.json, kept in $OUT)
#   depthauto      a fresh specctl server with the measured table (or DEPTH_COSTS, e.g. the committed
#                  bench/gpu/results/depth/triton-costs-measured.json): auto over DEPTHS beside every static
#                  depth and off on the same server, taking turns (CONCS3; auto's depth per window in the CSV),
#                  then depth_report.py's goal table; the no-spec reference is nospec2's CSV (same IL_* load).
#                  DEPTH_CONTROL=N adds mode aN: auto confined to {0, N} (no depth choice), the control for
#                  auto reading its own state's pinned windows low (docs/benchmarks.md)
#                  CAVEAT for depthsweep/depthauto: SGLang's simulated acceptance (match-expected) accepts
#                  ACC_LEN-1 drafts whatever the depth (clamped to it): at 2.8 depth 2 yields what depth 3
#                  does, at 2.0 depth 1 yields what any does, so a middle depth "wins" by construction.
#                  It still tests auto against the statics under one law; the simulator's prediction of
#                  it is `bench/policy_envelope.py --depths 0,1,2,3 --sglang-law` (docs/policy.md)
#   depthjournal   `specctl depth-costs` on a real server's journal: specctl's supervisor (`specctl run --headless
#                  --speculative-candidate-steps DEPTHS --set min_accept=0 --log JOURNAL --interval 0.5`, simulated
#                  acceptance ACC_LEN, as sweep2) while interleave.py pins every static depth (d1 d2 d3) and off
#                  through the specctl CLI on the socket (`specctl set mode=on steps=N min_accept=0`, `force-off`),
#                  ROUNDS windows each at JOURNAL_CONCS (default "4 16 64"); then, the supervisor stopped, `specctl
#                  depth-costs JOURNAL --prior bench/gpu/results/depth/triton-costs-measured.json --out
#                  $OUT/depth-costs-journal-TAG.json` (its coverage table) and each measured cell beside the
#                  committed table's (ratio journal / sweep): does the journal's `running` gauge and step counters
#                  on SGLang give the step times depthsweep measured from tok/s? About 100-160 s of start-up + 24
#                  windows of ~6.4 s (3 concurrencies x 4 modes x ROUNDS 2) + warm-ups: 5-6 minutes, one call
#   depthtrace     issue 22's trace goal: a specctl server built with DEPTHS, simulated acceptance (ACC_LEN), the
#                  measured cost table ($WORK/depth-costs-measured.json from depthsweep, or DEPTH_COSTS; refused
#                  without one); trace_load.py runs the changing-load trace (bench/gpu/trace_schedule.py, the
#                  simulator's schedule: TRACE_S s of it, TRACE_SEED) once per configuration of TRACE_CONFIGS
#                  (default: dN for every positive depth, off, auto; pinned through depth_switch), the order
#                  rotated by TRACE_SEED (no configuration always the first after start-up or the last as the
#                  machine drifts), each with its own prompt seed (the radix cache would flatter a later one); then,
#                  with TRACE_NOSPEC=1 (default), a server without speculation runs it as "none" (only: that alone).
#                  Logs its estimated time first; where BUDGET_S cannot hold it, TRACE_S is cut to fit (30 s at
#                  least, else it stops). CSV $OUT/trace-TAG.csv (a row per configuration and phase, a summary row
#                  per configuration), the table in $WORK/trace-table-TAG.txt: auto / best static, goals >= 1.05
#                  tok/s and <= 1 p50 TPOT. Default TRACE_S=120 with 6 traces takes about 17 minutes: more than
#                  one call's BUDGET_S, so split it (TRACE_CONFIGS="d1 d2 d3" TRACE_NOSPEC=0, then
#                  TRACE_CONFIGS="off auto" TRACE_NOSPEC=1; one CSV per call, `trace_load.py --table` over both)
#   tree           issue 23: SGLang's static EAGLE-3 tree (TREE_TOPK 4, TREE_STEPS 2, TREE_TOKENS 16, the
#                  report's launch line), no plugin, simulated acceptance TREE_ACC (2.7 of at most 3:
#                  docs/sglang-plugin.md), interleave.py over CONCS2, labels tree-ATTN; report.py puts it beside
#                  nospec2 and sweep2 (the chain under specctl at ACC_LEN) with "auto / tree"
#   treecheck      issue 23: that tree under specctl's switch (tree_switch.py, SPECCTL_TREE_SWITCH=1, candidates
#                  {0, TREE_STEPS}), acceptance not simulated: fixcheck's greedy runs with logprobs, against
#                  nospecref's reference too, KV before / after, SGLang's start-up lines -> treecheck-TAG.txt
#   treesweep      the same server at TREE_ACC: forced on / off / auto taking turns over CONCS2 (labels
#                  treesw-ATTN), beside the static tree (tree) and no speculation (nospec2)
#   coldswitch     the first-use pause of each state: on a fresh machine the first switch to off paused the server
#                  7-10 s while kernels on that path compiled into the JIT caches. coldA: a specctl server (simulated
#                  acceptance) with the switch warm-up off (SPECCTL_WARMUP=0) on cold caches (any there moved aside
#                  first, never deleted); first_use.py sets off and STEPS in turn at every COLD_BUCKETS batch size
#                  (ascending), two bursts of fresh prompts each: the first's excess over the second, and the kernels
#                  that appeared in $ROOT/jitcache/{triton,tvm-ffi} and $ROOT/.cache/flashinfer during it. Then those
#                  caches (and ~/.nv/ComputeCache, /tmp/torchinductor_USER) move aside to DIR.coldA, and coldB, the
#                  same with the warm-up on (the default: the plugin's bursts before ready; its "switch warm-up"
#                  lines are logged), shows what pause is left. CSV $OUT/coldswitch-TAG.csv (labels coldA-ATTN,
#                  coldB-ATTN), start-up seconds, cache sizes and tables in $WORK/coldswitch-TAG.txt. Two MoE cold
#                  starts take 160-195 s each: a start is refused below COLD_NEED s of BUDGET_S (default 250);
#                  COLD_RUNS="coldA" then COLD_RUNS="coldB" splits it over two calls
#   compare        greedy outputs of every run against the no-speculation reference
#   pack           tar what is worth keeping into $OUT/keep-$TAG.tgz (8 files come back at most)
# Knobs (env): ATTN (triton|fa3) TP (tensor-parallel size, default 1) CONCS WARMUP DURATION ACC_LEN
#   MODEL (the target's shapes, random weights: llama8b = Llama-3.1-8B, the default; qwen3moe = Qwen3-30B-A3B,
#   a mixture of experts, docs/benchmarks.md; bench/gpu/models.py writes the configs and has the memory
#   arithmetic; llama8b-table = llama8b with a head whose weights bench/gpu/table_head.py writes from the
#   nospecref phase's outputs, so that depthcheck measures real acceptance after a depth change. Any MODEL
#   but llama8b adds a tag to TAG, so to WORK and every file, and to every CSV label: -qwen3moe, -table)
#   BUDGET_S OUT TAG MEM_FRAC MAX_TOKENS (--max-total-tokens for every server; empty = SGLang's own pool)
#   FAST_OFF (1|0: SPECCTL_FAST_OFF for the specctl servers) EARLY_PUBLISH (SPECCTL_EARLY_PUBLISH for
#   the specctl servers: 1|decode|0|auto; unset = the plugin's default, auto: on where the scheduler waits on the host, FlashInfer) EARLY_CHECK (SPECCTL_EARLY_PUBLISH_CHECK) CONCS2 ROUNDS WINDOW IL_WARMUP
#   IL_INPUT IL_OUTPUT IL_JITTER (interleave.py's request lengths: mean input, mean output, +-share) ROTATE
#   AUTO_SETTLE (seconds after a switch to auto that no window measures; default the 1 s every switch gets: a
#   slow server needs longer for auto's 64-verify acceptance window to fill after a resume, e.g. 10 on a MoE from 128)
#   DEPTH_ROW (depthauto: 1 sets ATTN's thresholds row after the start, as the supervisor does; 0 keeps the defaults)
#   SWEEP_SWITCH (sweep2: "calib" switches through calib_switch.sh, which adds the mode "row": auto with the
#   thresholds row alone, calibration off and reset) SWEEP_MODES (sweep2's modes, default "on off auto") REQUIRE_ROW (sweep2: 1, the default, stops where
#   ATTN has a measured thresholds row and the supervisor did not apply it; 0 runs on with the defaults) CG_BS (decode graph batch sizes; default: all to 256)
#   PREFILL_GRAPHS (0: --disable-prefill-cuda-graph, the kit's default, for a shorter start-up; 1: SGLang's
#   own default, breakable prefill CUDA graphs)
#   PROF_CONCS PROF_INPUT PROF_OUTPUT PROF_STEPS PROF_JITTER (offprofile, offcost, prefillcost)
#   RESUME_CONCS MIXED_CONCS MIXED_ROUNDS MIXED_WARMUP (offcost, prefillcost, offab) AB_ROUNDS (offab)
#   PAIR PAIR_ROUNDS PAIR_FRAC_A PAIR_FRAC_B PAIR_MAX_TOKENS PAIR_PROFILE PAIR_LOAD PAIR_DECODE_OUTPUT (offpair) IL_SEED PIN_SERVER PIN_LOAD (CPU lists for taskset -c:
#   the servers' processes and the load generators; empty = not pinned) PAIR_PIN_A PAIR_PIN_B (offpair's first and
#   second server's CPU lists; unset, PIN_SERVER's CPUs split in halves, first half to the first server: disjoint lists
#   keep one server's scheduler off the other's CPUs; set one of them and the other defaults to all of PIN_SERVER)
#   DRY_RUN (sim: every phase against specctl's simulator on a CPU machine, GPU-only steps skipped; see
#   docs/benchmarks.md, "Dry run") BENCH_ROOT (default /root: keep/, models/, site/) BENCH_PORT (default 30000)
#   SITE (default BENCH_ROOT/site: where install: and project install and what PYTHONPATH names; /root/site523
#   for SGLang 0.5.23 from bench/gpu/install_0523.sh, with SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK=1 on path D)
#   ACCEPT_PERIOD (depthcheck's seconds per depth for depth_accept.py, default 4)
#   DRAFT_EXTEND_GRAPHS (SPECCTL_DRAFT_EXTEND_GRAPHS for the specctl servers: 1 captures 0.5.17's draft-extend
#   graphs at every built depth, as 0.5.23 does; runtime/sglang_plugin/draft_extend_graphs.py)
#   STEPS (the specctl servers' launch depth, default 3; DEPTHS must hold it: STEPS=2 DEPTHS=0,1,2 makes
#   depth 2 the launch state, whose draft extend SGLang 0.5.17 runs in a CUDA graph, as it does not for built ones)
#   JOURNAL_CONCS (depthjournal's concurrencies, default "4 16 64")
#   TRACE_S TRACE_SEED TRACE_CONFIGS TRACE_NOSPEC (depthtrace: trace length, schedule seed, configurations,
#   1|0|only for the server without speculation)
#   COLD_BUCKETS COLD_RUNS COLD_NEED (coldswitch: batch sizes, default 1 2 4 ... 256; runs, default "coldA coldB";
#   the seconds a cold start and its bursts need, default 250)
set -uo pipefail
T0=$(date +%s)
REPO=$(pwd)
HERE=$REPO/bench/gpu
OUT=${OUT:-$REPO/gpu-out}
ATTN=${ATTN:-triton}
MODEL=${MODEL:-llama8b}
DRAFT_NAME=""
case $MODEL in  # MTAG: what MODEL adds to TAG and to the CSV labels, so that no model's rows mix with another's
  llama8b) MTAG="" TARGET_NAME=llama3-8b-shape ;;
  qwen3moe) MTAG=-qwen3moe TARGET_NAME=qwen3-30b-a3b-shape ;;
  llama8b-table) MTAG=-table TARGET_NAME=llama3-8b-shape DRAFT_NAME=eagle3-table-llama3-8b-shape ;;
  *) echo "MODEL must be llama8b, qwen3moe or llama8b-table, got '$MODEL'" >&2; exit 2 ;;
esac
TAG=${TAG:-$ATTN}$MTAG
ROOT=${BENCH_ROOT:-/root}        # where the machine keeps work, models, the install; a dry run's own folder
mkdir -p "$OUT" "$ROOT/keep"
WORK=$ROOT/keep/$TAG            # survives between calls while the machine stays warm
mkdir -p "$WORK"
SITE=${SITE:-$ROOT/site}          # the install (PYTHONPATH); SGLang 0.5.23's: SITE=/root/site523 (install_0523.sh)
export PYTHONPATH=$SITE
# PYTHONPATH skips .pth files; site.addsitedir runs them (0.5.23's dual GEMM needs cutlass, behind one)
[ -d "$SITE" ] && PYTHONPATH=$(python3 -c 'import site, sys; s = sys.argv[1]; before = set(sys.path)
site.addsitedir(s); print(":".join([s] + [p for p in sys.path if p not in before and p != s]))' "$SITE" 2>/dev/null ||
  echo "$SITE")
# an install that needs settings to start says so in SITE/bench.env (install_0523.sh's path D: torch 2.11 under
# wheels built for 2.14); every server and the supervisor then start with them
BENCH_ENV=""
if [ -f "$SITE/bench.env" ]; then set -a; . "$SITE/bench.env"; set +a; BENCH_ENV=$(grep -v '^#' "$SITE/bench.env" | tr '\n' ' '); fi
MODELS=$ROOT/models
TARGET=$MODELS/$TARGET_NAME DRAFT=$MODELS/${DRAFT_NAME:-eagle3-$TARGET_NAME}   # MODEL's configs (write_models)
PORT=${BENCH_PORT:-30000}       # the server's port (offpair's second server: PORT+1)
URL=http://127.0.0.1:$PORT
CONCS=${CONCS:-"1 16 64 256"}
WARMUP=${WARMUP:-4}
DURATION=${DURATION:-8}
ACC_LEN=${ACC_LEN:-2.8}
MEM_FRAC=${MEM_FRAC:-0.85}
BUDGET_S=${BUDGET_S:-570}
FAST_OFF=${FAST_OFF:-1}
TP=${TP:-1}                     # tensor-parallel size of every server (a machine with TP GPUs)
CONCS2=${CONCS2:-"1 4 16 32 64 128 256"}
ROUNDS=${ROUNDS:-2}
WINDOW=${WINDOW:-4}
IL_WARMUP=${IL_WARMUP:-6}
IL_INPUT=${IL_INPUT:-512}
IL_OUTPUT=${IL_OUTPUT:-256}
IL_JITTER=${IL_JITTER:-0.5}
SWEEP_MODES=${SWEEP_MODES:-"on off auto"}
PROF_CONCS=${PROF_CONCS:-"256"}
PROF_INPUT=${PROF_INPUT:-256}
PROF_OUTPUT=${PROF_OUTPUT:-2000}   # 256 x 2,256 tokens fit the 805k-token KV pool of a spec server
PROF_STEPS=${PROF_STEPS:-60}
PROF_JITTER=${PROF_JITTER:-0}      # the profiled load's length spread: 0 = decode only, 0.5 = arrivals inside
RESUME_CONCS=${RESUME_CONCS:-"16 64 256"}
MIXED_CONCS=${MIXED_CONCS:-"128 256"}
MIXED_ROUNDS=${MIXED_ROUNDS:-3}
MIXED_WARMUP=${MIXED_WARMUP:-10}
AB_ROUNDS=${AB_ROUNDS:-2}
PAIR_ROUNDS=${PAIR_ROUNDS:-4}
PAIR=${PAIR:-"nospec off"}      # offpair's roles in start order (see phase_offpair)
IL_SEED=${IL_SEED:-0}           # interleave.py's request seed
ROTATE=${ROTATE:-1}             # 1: interleave.py --rotate (no mode always takes the first window); 0: a fixed order
# offpair: SGLang 0.5.17 sizes the KV pool from the memory free at start-up times the fraction, so the
# second server needs a larger fraction of what the first left free; both pools are capped at
# PAIR_MAX_TOKENS (the sweep's 256 requests need about 200k) so that they are the same size
PAIR_FRAC_A=${PAIR_FRAC_A:-0.46}
PAIR_FRAC_B=${PAIR_FRAC_B:-0.84}
PAIR_MAX_TOKENS=${PAIR_MAX_TOKENS:-340000}
PAIR_LOAD=${PAIR_LOAD:-arrivals}  # arrivals (the sweep's) | decode (see offpair above)
PAIR_DECODE_OUTPUT=${PAIR_DECODE_OUTPUT:-2000}  # outlasts warm-up + window at 64-256 requests
DEPTHS=${DEPTHS:-}                # candidate depths of the specctl server (e.g. 0,1,2,3); empty = 0 and STEPS
DEPTH_COSTS=${DEPTH_COSTS:-}      # a cost table for the depth choice (JSON); empty = none (on/off policy)
CONCS3=${CONCS3:-"1 4 8 16 24 32 48 64 128 256"}   # the depth sweep's concurrencies (issue 22's grid)
TRACE_S=${TRACE_S:-120}           # depthtrace: seconds of the simulator's trace per configuration (phases of 10-20 s)
TRACE_SEED=${TRACE_SEED:-0}       # its schedule's seed (the simulator's run_trace uses 0) and the order's rotation
TRACE_CONFIGS=${TRACE_CONFIGS:-}  # its specctl configurations; empty = dN for every positive depth, off, auto
TRACE_NOSPEC=${TRACE_NOSPEC:-1}   # 1: also the trace on a server without speculation ("none"); 0: not; only: that alone
TREE_TOPK=${TREE_TOPK:-4}         # the tree phase's static EAGLE-3 tree (the report's: topk 4, 2 steps, 16 tokens)
TREE_STEPS=${TREE_STEPS:-2}
TREE_TOKENS=${TREE_TOKENS:-16}
TREE_ACC=${TREE_ACC:-2.7}         # its simulated accept length (assumed: docs/sglang-plugin.md)
# treesweep's policy settings for the tree under the switch: off from 16 requests, where the static tree read
# 0.98 of no speculation on Triton (1.41 at 4, 0.68 at 32: docs/sglang-plugin.md), back on at 8
TREE_SETTINGS=${TREE_SETTINGS:-"off_at=16 on_at=8"}
PIN_SERVER=${PIN_SERVER:-}       # a CPU list (taskset -c) for every server process, empty = not pinned
PIN_LOAD=${PIN_LOAD:-}           # a CPU list for the load generators
SERVER_PIN=(); [ -n "$PIN_SERVER" ] && SERVER_PIN=(taskset -c "$PIN_SERVER")
LOAD_PIN=(); [ -n "$PIN_LOAD" ] && LOAD_PIN=(taskset -c "$PIN_LOAD")
XARGS=()                        # extra server arguments for the next start_server (the last one wins)
CSV2=$OUT/interleave-$TAG.csv
XENV=()                         # extra environment for the next start_server
STEPS=${STEPS:-3}                # the specctl servers' launch depth (--speculative-num-steps)
# the tokens SGLang's simulated acceptance emits (sim_tokens): real-draft-token for the MoE, whose speed depends
# on them; fixed (SGLang's default, token id 100) for Llama, as every Llama figure was measured
SIM_TOKENS=${SIM_TOKENS:-$([ "$MODEL" = qwen3moe ] && echo real-draft-token || echo fixed)}
CSV=$OUT/sweep-$TAG.csv
export TRITON_CACHE_DIR="$ROOT"/jitcache/triton TVM_FFI_CACHE_DIR="$ROOT"/jitcache/tvm-ffi
export PYTHONUNBUFFERED=1
mkdir -p "$ROOT"/jitcache

left() { echo $(( BUDGET_S - ($(date +%s) - T0) )); }
log() { echo "[fastoff $(date +%H:%M:%S) +$(( $(date +%s) - T0 ))s $TAG] $*"; }

# DRY_RUN=sim: the same phases on a CPU machine against specctl's simulator (docs/benchmarks.md, "Dry run"),
# so that a phase's own mistakes cost no GPU minutes. Set BENCH_ROOT and OUT to a scratch folder with it.
model_preset() {  # the simulator preset for MODEL and ATTN (the MoE target has Triton's only: a prediction)
  case $MODEL in
    qwen3moe) echo h200-qwen3moe ;;
    *) case $ATTN in fa3) echo h200-llama8b-fa3 ;; flashinfer) echo h200-llama8b-flashinfer ;; *) echo h200-llama8b ;; esac ;;
  esac
}

DRY_RUN=${DRY_RUN:-}
case $DRY_RUN in
  "") ;;
  sim)
    SIM_PRESET=$(model_preset)   # the simulator preset for MODEL and ATTN
    python3 -c "import sys; from specctl.runtime.sim.presets import PRESETS; sys.exit(sys.argv[1] not in PRESETS)" \
      "$SIM_PRESET" || { log "dry run: no simulator preset $SIM_PRESET, using h200-llama8b"; SIM_PRESET=h200-llama8b; }
    # what `project` installs on the GPU machine: the specctl this checkout runs under
    command -v specctl >/dev/null || { log "dry run: no specctl on PATH (pip install -e . first)"; exit 2; }
    mkdir -p "$SITE/bin" && ln -sf "$(command -v specctl)" "$SITE/bin/specctl"
    log "dry run: every server is specctl's simulator (preset $SIM_PRESET); GPU-only steps are skipped" ;;
  *) log "DRY_RUN must be sim or empty, got '$DRY_RUN'"; exit 2 ;;
esac

# ------------------------------------------------------------------ install
phase_collect() {
  mkdir -p "$ROOT"/fa3parts
  for f in "$REPO"/.wheelhouse/fa3p/part*; do
    [ -f "$f" ] && cp -f "$f" "$ROOT"/fa3parts/ && log "kept FA3 part $(basename "$f")"
  done
  ls "$ROOT"/fa3parts | tr '\n' ' '; echo
  if [ -f "$REPO/.wheelhouse/jit/jit.tgz" ] && [ ! -f "$ROOT/jitcache/.unpacked" ]; then
    mkdir -p "$ROOT/jitcache" && tar xzf "$REPO/.wheelhouse/jit/jit.tgz" -C "$ROOT" && touch "$ROOT/jitcache/.unpacked" \
      && log "unpacked the JIT cache: $(du -sh "$ROOT/jitcache" "$ROOT/.cache/flashinfer" 2>/dev/null | tr '\n\t' '  ')"
  fi
}

phase_jitpack() {
  local parts=(jitcache); [ -d "$ROOT/.cache/flashinfer" ] && parts+=(.cache/flashinfer)
  tar czf "$OUT/jit.tgz" -C "$ROOT" --exclude=jitcache/.unpacked "${parts[@]}" \
    && log "packed the JIT cache: $(du -h "$OUT/jit.tgz" | cut -f1) (${parts[*]}); bring it back as .wheelhouse/jit/jit.tgz"
}

phase_install() { bash "$REPO/.device-kit/install_on_device.sh" "$1"; }

phase_project() {  # the prebuilt wheel in .whl/ (pip wheel on the CPU machine) if there, else build here
  python3 -c "import setuptools; print('[project] setuptools', setuptools.__version__)"
  if ls "$REPO"/.whl/specctl-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-deps --no-compile --target "$SITE" --upgrade "$REPO"/.whl/*.whl 2>&1 | tail -3
  else
    python3 -m pip install -q --no-deps --no-build-isolation --no-compile --target "$SITE" --upgrade "$REPO" 2>&1 | tail -3
    ls "$REPO"/.whl/*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-deps --no-compile --target "$SITE" --upgrade "$REPO"/.whl/*.whl 2>&1 | tail -3
  fi
  python3 - <<'PYEOF'
from importlib.metadata import entry_points, version
print("[project] specctl", version("specctl"), "| plugins:", [e.value for e in entry_points(group="sglang.srt.plugins")])
import specctl.runtime.sglang_plugin.plugin as p, specctl.runtime.sglang_plugin.fast_off as f
print("[project] installers:", [getattr(i, "__name__", i) for i in p.INSTALLERS], "| fast_off", f.__file__)
try:  # `specctl run` imports the supervisor, whose dependencies the image may lack (platformdirs)
    from specctl.console.cli.main import build_parser
    build_parser()
except ImportError as exc:
    raise SystemExit(f"[project] specctl's command line cannot start: {exc}; carry the wheel in .whl/"
                     " (pip download --no-deps -d .whl platformdirs)")
try:
    import pynvml
    pynvml.nvmlInit()
    print("[project] NVML:", [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())])
except Exception as exc:  # the supervisor then keeps the default thresholds (backend_thresholds_skipped)
    print("[project] NVML unavailable:", exc)
PYEOF
}

phase_fa3() {
  local n; n=$(ls "$ROOT"/fa3parts/part* 2>/dev/null | wc -l)
  if [ "$n" -lt "${FA3_PARTS:-8}" ]; then log "FA3: only $n parts here"; return 1; fi
  if [ ! -f "$ROOT"/fa3parts/.done ]; then
    cat "$ROOT"/fa3parts/part* | xz -dc -T0 > "$SITE/sgl_kernel/flash_ops.abi3.so" && touch "$ROOT"/fa3parts/.done
  fi
  python3 -c "import sgl_kernel.flash_attn as fa; print('[fa3] is_fa3_supported', fa.is_fa3_supported())"
}

# ------------------------------------------------------------------ servers
write_models() {  # MODEL's target and EAGLE-3 draft configs into TARGET and DRAFT (bench/gpu/models.py)
  python3 "$HERE/models.py" "$MODEL" "$TARGET" "$DRAFT"
}

# CG_BS (e.g. "1 2 4 8 16 32 64 128 256") captures only those decode batch sizes: a shorter
# start-up, for runs whose batches sit at one of them (offprofile's decode-only windows).
if [ -n "${CG_BS:-}" ]; then GRAPHS=(--cuda-graph-bs-decode $CG_BS); else GRAPHS=(--cuda-graph-max-bs-decode 256); fi
COMMON=(--load-format dummy --skip-tokenizer-init --dtype bfloat16 --context-length 4096
        --mem-fraction-static "$MEM_FRAC" --max-running-requests 256
        "${GRAPHS[@]}" --mm-feature-transport cpu --random-seed 0 --log-level info)
# Prefill graphs: SGLang 0.5.17 captures "breakable" prefill CUDA graphs (58 token counts to 8192) by
# default; the kit turns them off for a shorter start-up, and with them off every prefill runs eagerly,
# CPU-bound under arrivals (docs/sglang-plugin.md, "Prefill CUDA graphs")
[ "${PREFILL_GRAPHS:-0}" = 1 ] || COMMON+=(--disable-prefill-cuda-graph)
# MAX_TOKENS caps every server's KV pool as offpair caps its two (offpair's PAIR_MAX_TOKENS wins there):
# the one-server sweeps' no-spec server read 13-20 % under the pairs' at 64-128 on Triton, whose pools are
# capped; one capped sweep did not settle whether the pool is why (bench/gpu/results/triton/sweep-capped-kv.csv)
[ -n "${MAX_TOKENS:-}" ] && COMMON+=(--max-total-tokens "$MAX_TOKENS")
# SERVER_FLAGS: more SGLang flags for every server (both of a pair), e.g. "--disable-radix-cache" to take the
# radix tree out of a comparison (docs/benchmarks.md, "What a GPU session should run to confirm")
[ -n "${SERVER_FLAGS:-}" ] && COMMON+=($SERVER_FLAGS)

# The specctl server's command and environment, from the project's own launcher.
specctl_cmd() {  # prints one argument per line
  python3 - "$TARGET" "$PORT" "$STEPS" "$WORK/adaptive.json" "$ATTN" "$TP" "$DEPTHS" "$DEPTH_COSTS" "$DRAFT" <<'EOF'
import json, sys
from specctl.runtime.supervisor import launcher
from specctl.runtime.core.settings import PolicySettings
from specctl.runtime.core.adaptive_config import write_config
target, port, steps, cfg, attn = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
settings = PolicySettings(steps=steps).with_changes({"candidates": sys.argv[7]}) if sys.argv[7] else \
    PolicySettings(steps=steps)
write_config(cfg, steps, candidates=settings.candidates)
cmd = launcher.build_command(target, sys.argv[9], int(sys.argv[6]), steps,
                             port, "127.0.0.1", cfg, extra_args=["--attention-backend", attn])
env = launcher.launch_env(settings, depth_costs=sys.argv[8] or None)
for k, v in env.items():
    print(f"ENV {k}={v}")
for a in cmd:
    print(a)
EOF
}

SPID=""
SPID2=""                        # offpair's second server
stop_pid() {  # stop_pid PID: the process group, TERM then KILL
  [ -n "$1" ] || return 0
  kill -TERM -- -"$1" 2>/dev/null
  for _ in $(seq 1 30); do kill -0 "$1" 2>/dev/null || break; sleep 1; done
  kill -KILL -- -"$1" 2>/dev/null
}
stop_server() {  # the current server, then until the GPU's memory is given back
  [ -n "$SPID" ] || return 0
  stop_pid "$SPID"
  SPID=""
  for _ in $(seq 1 30); do
    used=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
    [ -z "$used" ] || [ "$used" -lt 2000 ] && break
    sleep 1
  done
}
JPID=""
stop_journal() { [ -n "$JPID" ] && kill -INT "$JPID" 2>/dev/null; sleep 1; [ -n "$JPID" ] && kill -KILL "$JPID" 2>/dev/null; JPID=""; }
trap 'stop_journal; stop_pid "$SPID2"; stop_server' EXIT

sim_tokens() {  # SGLANG_SIMULATE_ACC_TOKEN_MODE for a server with simulated acceptance (SIM_TOKENS; a tree: fixed)
  # SGLang's default, "fixed", writes token id 100 for every token a speculative server emits, in every state
  # (eagle_utils.eagle_sample; the steps-0 off state too): every request then decodes the same token, which
  # a dense target does not notice and a MoE does (all of a batch routes to the same experts). real-draft-token
  # emits the draft's tokens and the target's argmax as the bonus (the off state: the target's greedy tokens);
  # SGLang allows it for topk 1 only
  case " ${XARGS[*]} ${XENV[*]} " in
    *" --speculative-eagle-topk "*|*" SPECCTL_TREE_SWITCH=1 "*) echo fixed ;;
    *) echo "$SIM_TOKENS" ;;
  esac
}

start_server() {  # start_server NAME KIND(nospec|specctl) SIM(0|1)
  local name=$1 kind=$2 sim=$3 slog=$WORK/server-$1.log args=() envs=()
  [ "$sim" = 1 ] && log "$name: simulated acceptance $ACC_LEN, tokens $(sim_tokens) (sim_tokens)"
  if [ "${DRY_RUN:-}" = sim ]; then start_sim "$@"; return; fi
  write_models
  if [ "$kind" = nospec ]; then
    args=(python3 -m sglang.launch_server --model-path "$TARGET" --attention-backend "$ATTN"
          --host 127.0.0.1 --port "$PORT" --enable-metrics --tp-size "$TP")
  elif [ "$kind" = adaptive ]; then
    args=(python3 -m sglang.launch_server --model-path "$TARGET" --attention-backend "$ATTN"
          --host 127.0.0.1 --port "$PORT" --enable-metrics --speculative-algorithm EAGLE3
          --speculative-draft-model-path "$DRAFT" --speculative-draft-load-format dummy
          --speculative-eagle-topk 1 --speculative-adaptive --speculative-num-steps 7 --tp-size "$TP")
  else
    while IFS= read -r line; do
      case $line in ENV\ *) envs+=("${line#ENV }") ;; *) args+=("$line") ;; esac
    done < <(specctl_cmd)
    if [ "$MODEL" = llama8b-table ]; then  # real weights for the head, written from no spec's outputs
      python3 "$HERE/table_head.py" "$WORK/corr-nospec.json" "$DRAFT" \
        || { log "table head not built (its tokens come from nospecref's $WORK/corr-nospec.json)"; return 1; }
      args+=(--speculative-draft-load-format auto)
    else
      args+=(--speculative-draft-load-format dummy)
    fi
    envs+=("SPECCTL_FAST_OFF=$FAST_OFF")
    [ -n "${EARLY_PUBLISH:-}" ] && envs+=("SPECCTL_EARLY_PUBLISH=$EARLY_PUBLISH")
    [ -n "${EARLY_CHECK:-}" ] && envs+=("SPECCTL_EARLY_PUBLISH_CHECK=$EARLY_CHECK")
    [ -n "${DRAFT_EXTEND_GRAPHS:-}" ] && envs+=("SPECCTL_DRAFT_EXTEND_GRAPHS=$DRAFT_EXTEND_GRAPHS")
  fi
  [ "$sim" = 1 ] && envs+=("SGLANG_SIMULATE_ACC_LEN=$ACC_LEN" "SGLANG_SIMULATE_ACC_METHOD=match-expected"
                           "SGLANG_SIMULATE_ACC_TOKEN_MODE=$(sim_tokens)")
  envs+=("${XENV[@]}")
  log "starting $name: ${envs[*]} ${SERVER_PIN[*]} ${args[*]} ${COMMON[*]} ${XARGS[*]}"
  env -u SGLANG_SIMULATE_ACC_LEN "${envs[@]}" setsid "${SERVER_PIN[@]}" "${args[@]}" "${COMMON[@]}" "${XARGS[@]}" > "$slog" 2>&1 &
  SPID=$!
  wait_up "$name" && return 0
  log "$name did NOT come up; log tail:"; grep -v "Capturing batches" "$slog" | tail -n 60
  stop_server
  return 1
}

start_sim() {  # start_server's DRY_RUN=sim half: specctl's simulator in the server's place, on the same port
  local name=$1 kind=$2 slog=$WORK/server-$1.log
  local args=(python3 -m specctl.runtime.sim --host 127.0.0.1 --port "$PORT" --preset "$SIM_PRESET" --gpus "$TP"
              --load idle)
  case $kind in
    # as SGLang launched without speculation: speculative_* null, no specctl keys, plain decode steps
    nospec) args+=(--no-speculation) ;;
    # SGLang's --speculative-adaptive has no model here: static EAGLE-3 without the plugin stands in
    adaptive) args+=(--no-plugin) ;;
    *) args+=(--steps "$STEPS")
       [ -n "$DEPTHS" ] && args+=(--set "candidates=$DEPTHS")
       [ -n "$DEPTH_COSTS" ] && log "dry run: the simulator prices depths with its own table, not $DEPTH_COSTS" ;;
  esac
  [ "${PREFILL_GRAPHS:-0}" = 1 ] || args+=(--eager-prefill)   # as --disable-prefill-cuda-graph reports it
  [ "${#XARGS[@]}" = 0 ] || log "dry run: not simulated: ${XARGS[*]}"
  [ -z "${SERVER_FLAGS:-}" ] || log "dry run: not simulated: $SERVER_FLAGS"
  log "starting $name: ${SERVER_PIN[*]} ${args[*]}"
  env -u SPECCTL_SIM_ADMIN_KEY setsid "${SERVER_PIN[@]}" "${args[@]}" > "$slog" 2>&1 &
  SPID=$!
  wait_up "$name" && return 0
  log "$name did NOT come up; log tail:"; tail -n 60 "$slog"
  stop_server
  return 1
}

wait_up() {  # wait_up NAME [JOURNAL]: until the server answers a generation, while $SPID lives (400 s at most);
  # with a supervisor's JOURNAL, also not once it logged a start that will not be retried (the supervisor itself
  # stays up for `specctl server start`: the eighth sitting waited 400 s on one whose SGLang was not installed)
  local ts; ts=$(date +%s)
  while [ $(( $(date +%s) - ts )) -lt 400 ] && [ "$(left)" -gt 30 ]; do
    kill -0 "$SPID" 2>/dev/null || return 1
    if [ -n "${2:-}" ] && grep -q '"event": *"server_start_failed".*"retry": *false' "$2" 2>/dev/null; then
      log "$1: the supervisor's start failed and will not be retried (journal below)"; return 1
    fi
    if python3 "$HERE/ctl.py" "$URL" info version >/dev/null 2>&1 \
       && python3 -c "import urllib.request as u; u.urlopen('$URL/health_generate', timeout=20).read()" 2>/dev/null; then
      log "$1 up after $(( $(date +%s) - ts ))s"
      return 0
    fi
    sleep "$([ "${DRY_RUN:-}" = sim ] && echo 0.5 || echo 3)"   # the simulator is up in about a second
  done
  return 1
}

graph_lines() {  # graph_lines LOG: SGLang's decode log lines (one every 40 batches) with and without a CUDA graph,
  # and the batch sizes of those without: an off state at 0.6 of no speculation at 16-32 requests (topk.md) left
  # no way to tell an eager decode from a slow one
  grep -Eo "#running-req: [0-9]+,.*cuda graph: (True|False)" "$1" \
    | sed -E 's/#running-req: ([0-9]+),.*cuda graph: (True|False)/\2 \1/' \
    | awk '{ n[$1]++; if ($1 == "False") f[$2]++ }
      END { printf "decode log lines: cuda graph True %d, False %d", n["True"], n["False"]
            for (b in f) printf "; batch %s x%d", b, f[b]; print "" }'
}

server_facts() {  # server_facts NAME: memory and state lines worth keeping
  local name=$1 slog=$WORK/server-$1.log
  {
    echo "== $name $(date -u +%FT%TZ) attn=$ATTN"
    [ "${DRY_RUN:-}" = sim ] && echo "(dry run: no nvidia-smi; the server is the simulator)" ||
    nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader
    python3 "$HERE/ctl.py" "$URL" info version attention_backend max_total_num_tokens speculative_num_steps \
      speculative_num_draft_tokens speculative_adaptive cuda_graph_max_bs_decode disable_overlap_schedule
    python3 - "$URL" <<'EOF'
import json, sys, urllib.request
d = json.load(urllib.request.urlopen(sys.argv[1] + "/server_info", timeout=30))
st = (d.get("internal_states") or [{}])[0]
print("memory_usage", json.dumps(st.get("memory_usage"), default=str))
EOF
    grep -E "specctl|Built adaptive runtime state|Switch adaptive runtime state|KV Cache is allocated|Capture .*graph end|Load weight end|max_total_num_tokens|Traceback|Error|error" "$slog" \
      | grep -v "Capturing batches" | cut -c1-400 | tail -n 120
    graph_lines "$slog"
  } >> "$WORK/facts-$TAG.txt" 2>&1
}

POINT_SEED=0  # bench_point's request seed: every window sends prompts no earlier window sent (the radix
# cache otherwise serves a later window's prefills and flatters whichever mode runs second)
bench_point() {  # bench_point LABEL C
  local need=$(( ${WARMUP%.*} + ${DURATION%.*} + 12 ))
  if [ "$(left)" -lt "$need" ]; then log "skip $1 c=$2: $(left)s left"; return 0; fi
  POINT_SEED=$((POINT_SEED + 1))
  python3 "$HERE/bench_spec.py" --url "$URL" --concurrency "$2" --warmup "$WARMUP" --duration "$DURATION" \
    --seed "$POINT_SEED" \
    --input-len 512 --output-len 256 --label "$1$MTAG" --csv "$CSV" || log "bench $1 c=$2 failed"
}


# ------------------------------------------------------------ interleaved sweeps (second GPU session)
interleave() {  # interleave LABEL ROUNDS "CONCS" "MODES" [SWITCH-COMMAND]
  local budget=$(( $(left) - 25 ))
  [ "$budget" -gt 20 ] || { log "skip $1: $(left)s left"; return 0; }
  "${LOAD_PIN[@]}" python3 "$HERE/interleave.py" --url "$URL" --label "$1$MTAG" --rounds "$2" --concs $3 --modes $4 \
    --switch "${5:-}" --window "$WINDOW" --warmup "$IL_WARMUP" --settle 1 --auto-settle "${AUTO_SETTLE:-1}" \
    --budget-s "$budget" --csv "$CSV2" \
    --input-len "$IL_INPUT" --output-len "$IL_OUTPUT" --len-jitter "$IL_JITTER" --seed "$IL_SEED" --cpus "$PIN_SERVER" \
    $([ "$ROTATE" = 1 ] && echo --rotate) || log "interleave $1 failed"
}

phase_nospec2() {
  start_server nospec nospec 0 || return 1
  server_facts nospec
  python3 "$HERE/correctness.py" run "$URL" "nospec-$ATTN" "$WORK/corr-nospec.json" --logprobs
  interleave "nospec-$ATTN" "$ROUNDS" "$CONCS2" -
  server_facts nospec
  stop_server
}

phase_nospecref() {  # the no-spec greedy + logprob reference alone (no load), for the checks after it
  start_server nospec nospec 0 || return 1
  python3 "$HERE/correctness.py" run "$URL" "nospec-$ATTN" "$WORK/corr-nospec.json" --logprobs
  server_facts nospec
  stop_server
}

phase_adaptive() {
  start_server adaptive adaptive 1 || return 1
  server_facts adaptive
  interleave "adaptive-$ATTN" 1 "$CONCS2" -
  server_facts adaptive
  stop_server
}

journal_log() {  # journal_log JOURNAL OUT: the server's own log lines the supervisor journalled
  [ -f "$1" ] || { echo "(no journal at $1: the supervisor did not start)" > "$2"; return 0; }
  python3 - "$1" > "$2" <<'PYEOF'
import json, sys
for line in open(sys.argv[1], encoding="utf-8"):
    rec = json.loads(line)
    if rec.get("event") == "server_log":
        print("\n".join(rec.get("lines") or []))
    elif rec.get("kind") == "event" or "event" in rec:
        print("[journal]", json.dumps(rec)[:400])
PYEOF
}

sweep2_sim() {  # sweep2_sim SOCKET JOURNAL: DRY_RUN=sim's supervisor, which starts its own simulator on PORT
  log "dry run: specctl run --headless starts its simulator (preset $SIM_PRESET) instead of SGLang"
  env -u SPECCTL_SIM_ADMIN_KEY setsid "${SERVER_PIN[@]}" "$SITE/bin/specctl" run --headless --sim-preset "$SIM_PRESET" \
    --sim-gpus "$TP" --sim-load idle --port "$PORT" --socket "$1" --log "$2" --interval 0.5 \
    > "$WORK/supervisor-sweep2-$TAG.log" 2>&1 &
}

sweep2_thresholds() {  # sweep2_thresholds JOURNAL: what the supervisor did with ATTN's row; false where a
  # measured row stayed out (NVML could not name the GPU, or another GPU): auto would run the defaults
  grep -h '"backend_thresholds' "$1" | cut -c1-400
  [ -z "$(backend_settings)" ] && return 0
  [ "${DRY_RUN:-}" = sim ] && { log "dry run: the supervisor leaves a simulator's thresholds alone"; return 0; }
  grep -q '"event": *"backend_thresholds"' "$1" && return 0
  if python3 -c 'import json, sys
lines = (json.loads(line) for line in open(sys.argv[1]) if line.strip())
sys.exit(0 if any(r.get("event") == "backend_thresholds_skipped" and "target is a MoE" in (r.get("why") or "")
                  for r in lines) else 1)' \
      "$1" 2>/dev/null; then
    log "sweep2: the $ATTN row stays out for a MoE target (it was measured on a dense one): auto runs the defaults," \
      "as it would for an operator"
    return 0
  fi
  if [ "${REQUIRE_ROW:-1}" = 0 ]; then
    log "sweep2: the $ATTN row was not applied (journal above); REQUIRE_ROW=0, so auto runs the defaults"
    return 0
  fi
  log "sweep2: the $ATTN row was not applied (journal above); auto would run the defaults, so it stops here" \
    "(REQUIRE_ROW=0 runs on)"
  return 1
}

supervisor_up() {  # supervisor_up NAME SUPERVISOR-LOG JOURNAL SOCKET: wait for the server specctl run started
  # (false, with its logs shown and everything stopped, if it did not come up), then its status once
  if ! wait_up "$1" "$3"; then
    log "$1 did NOT come up"; tail -n 40 "$2"
    journal_log "$3" "$WORK/server-$1.log"; grep -v "Capturing batches" "$WORK/server-$1.log" | tail -n 60
    stop_server; return 1
  fi
  sleep 3   # the supervisor applies the backend's thresholds when it sees the server ready
  PATH=$SITE/bin:$PATH specctl status --socket "$4" | head -n 12
}

phase_sweep2() {  # the specctl server as an operator runs it: launched and steered by specctl itself
  local sock=$WORK/specctl.sock journal=$WORK/journal-sweep2-$TAG.jsonl
  write_models
  rm -f "$sock"
  log "starting sweep2 through specctl run --headless (ATTN=$ATTN, SGLANG_SIMULATE_ACC_LEN=$ACC_LEN," \
    "SGLANG_SIMULATE_ACC_TOKEN_MODE=$(sim_tokens))"
  if [ "${DRY_RUN:-}" = sim ]; then sweep2_sim "$sock" "$journal"
  else SGLANG_SIMULATE_ACC_LEN=$ACC_LEN SGLANG_SIMULATE_ACC_METHOD=match-expected \
    SGLANG_SIMULATE_ACC_TOKEN_MODE=$(sim_tokens) SPECCTL_FAST_OFF=$FAST_OFF \
    setsid "${SERVER_PIN[@]}" "$SITE/bin/specctl" run --headless --model "$TARGET" \
      --draft "$DRAFT" --tp "$TP" --port "$PORT" --socket "$sock" --log "$journal" --interval 0.5 \
      -- --attention-backend "$ATTN" --speculative-draft-load-format dummy "${COMMON[@]}" \
      > "$WORK/supervisor-sweep2-$TAG.log" 2>&1 &
  fi
  SPID=$!
  supervisor_up sweep2 "$WORK/supervisor-sweep2-$TAG.log" "$journal" "$sock" || return 1
  if ! sweep2_thresholds "$journal"; then stop_server; return 1; fi
  python3 "$HERE/ctl.py" "$URL" state | cut -c1-400
  local switch="$SITE/bin/specctl {verb} --socket $sock"
  [ "${SWEEP_SWITCH:-}" = calib ] && switch="SPECCTL=$SITE/bin/specctl bash $HERE/calib_switch.sh {mode} --socket $sock"
  interleave "specctl-$ATTN" "$ROUNDS" "$CONCS2" "$SWEEP_MODES" "$switch"
  PATH=$SITE/bin:$PATH specctl auto --socket "$sock" >/dev/null
  journal_log "$journal" "$WORK/server-sweep2.log"
  server_facts sweep2
  stop_server
  log "journal: $(wc -l < "$journal") lines; supervisor log tail:"; tail -n 3 "$WORK/supervisor-sweep2-$TAG.log"
}

phase_resume() {
  XENV=("SPECCTL_TRACE_DRAFTS=$WORK/drafts.jsonl")
  start_server resume specctl 0 || { XENV=(); return 1; }
  XENV=()
  local P=$WORK/resume-$TAG.txt
  { echo "== KV used before"; python3 "$HERE/ctl.py" "$URL" used; } > "$P" 2>&1
  corr "lp-off-$ATTN" --mode off --logprobs
  corr "lp-on-$ATTN" --mode on --logprobs
  corr "toggle2-$ATTN" --toggle 0.03
  corr "autoflip2-$ATTN" --set min_accept=0.5 accept_slope=0 accept_window=2 probe_after=4 dwell=1 --mode auto --logprobs
  python3 "$HERE/ctl.py" "$URL" set min_accept=0 accept_window=64 probe_after=256 dwell=8 >/dev/null
  python3 "$HERE/ctl.py" "$URL" set warm_below=0 | cut -c1-200
  corr "alwayson-$ATTN" --mode on
  corr "cold-$ATTN" --mode off --then on --after 0.4
  python3 "$HERE/ctl.py" "$URL" set warm_below=100000 | cut -c1-200
  corr "warm-$ATTN" --mode off --then on --after 0.4
  corr "warmoff-$ATTN" --mode off
  python3 "$HERE/ctl.py" "$URL" set warm_below=0 >/dev/null
  { echo "== KV used after"; python3 "$HERE/ctl.py" "$URL" used; echo "== state"; python3 "$HERE/ctl.py" "$URL" state; } >> "$P" 2>&1
  cat "$P" | cut -c1-300
  python3 "$HERE/resume.py" "alwayson-$ATTN" "$WORK"/drafts.jsonl.* --labels "lp-on-$ATTN" "cold-$ATTN" "warm-$ATTN" \
    | tee "$WORK/resume-table-$TAG.txt"
  # the off state's cost with the draft kept warm vs skipped (acceptance plays no part while off)
  python3 "$HERE/ctl.py" "$URL" mode off > /dev/null
  python3 "$HERE/ctl.py" "$URL" state | cut -c1-300
  interleave "offwarmth-$ATTN" "$ROUNDS" "$RESUME_CONCS" "cold warm" "$(warmth_switch)"
  server_facts resume
  stop_server
}

profile_now() {  # profile_now NAME SERVER-LOG: PROF_STEPS steps of SGLang's torch profiler under load
  # (decode only with PROF_JITTER=0: every request admitted before; arrivals inside with PROF_JITTER > 0)
  local pdir=$WORK/prof-$1 slog=$2 done_p=0 trace
  if [ "${DRY_RUN:-}" = sim ]; then log "dry run: no profile of $1 (SGLang's torch profiler, GPU only)"; return 0; fi
  mkdir -p "$pdir"
  "${LOAD_PIN[@]}" python3 "$HERE/interleave.py" --url "$URL" --label "$1-profiled" --concs $(echo $PROF_CONCS | awk '{print $NF}') \
    --rounds 1 --window 20 --warmup 8 --input-len "$PROF_INPUT" --output-len "$PROF_OUTPUT" --len-jitter "$PROF_JITTER" \
    > /dev/null 2>&1 &
  local lpid=$!
  sleep 10
  if python3 - "$URL" "$pdir" "$PROF_STEPS" <<'PYEOF'
import json, sys, urllib.request
body = {"output_dir": sys.argv[2], "num_steps": int(sys.argv[3]), "activities": ["CPU", "GPU"],
        "with_stack": False, "record_shapes": False}
req = urllib.request.Request(sys.argv[1] + "/start_profile", data=json.dumps(body).encode(), method="POST",
                             headers={"Content-Type": "application/json"})
try:
    print("[profile]", urllib.request.urlopen(req, timeout=60).read().decode()[:200])
except Exception as exc:
    sys.exit(f"[profile] /start_profile failed: {exc}")
PYEOF
  then
    for _ in $(seq 1 60); do grep -q "Profiling done" "$slog" && { done_p=1; break; }; sleep 1; done
  fi
  kill "$lpid" 2>/dev/null; wait "$lpid" 2>/dev/null
  trace=$(ls -t "$pdir"/*.trace.json.gz 2>/dev/null | head -1)
  if [ "$done_p" = 1 ] && [ -n "$trace" ]; then
    python3 "$HERE/summarize_trace.py" "$trace" --label "$1 c=$PROF_CONCS, $PROF_STEPS steps" > "$WORK/prof-$1.txt" 2>&1
    head -n 40 "$WORK/prof-$1.txt"
    cp "$trace" "$OUT/trace-$1.json.gz" 2>/dev/null
  else
    log "no trace for $1 (done=$done_p)"
  fi
}

decode_only() {  # decode_only LABEL MODES [SWITCH]: decode-only windows at PROF_CONCS
  IL_INPUT=$PROF_INPUT IL_OUTPUT=$PROF_OUTPUT IL_JITTER=0 IL_WARMUP=8 interleave "$1" 3 "$PROF_CONCS" "$2" "${3:-}"
}

phase_offprofile() {
  start_server nospec nospec 0 || return 1
  python3 "$HERE/correctness.py" run "$URL" "nospec-$ATTN" "$WORK/corr-nospec.json" --logprobs  # for resume
  decode_only "decodeonly-nospec-$ATTN" -
  profile_now "nospec-$ATTN" "$WORK/server-nospec.log"
  stop_server
  start_server offprof specctl 0 || return 1
  python3 "$HERE/ctl.py" "$URL" mode off | cut -c1-160
  decode_only "decodeonly-off-$ATTN" -
  python3 "$HERE/ctl.py" "$URL" used | cut -c1-200   # flushes; the requests were aborted
  profile_now "off-$ATTN" "$WORK/server-offprof.log"
  stop_server
}

mixed() {  # mixed LABEL MODES [SWITCH]: the sweep's arrivals (IL_* lengths) at MIXED_CONCS, MIXED_ROUNDS windows
  IL_WARMUP=$MIXED_WARMUP interleave "$1" "$MIXED_ROUNDS" "$MIXED_CONCS" "$2" "${3:-}"
}

warmth_switch() {  # a switch command for interleave.py: mode cold|warm sets warm_below (the server stays off)
  cat > "$WORK/warmth.sh" <<SHEOF
case \$1 in cold) w=0 ;; warm) w=100000 ;; esac
python3 "$HERE/ctl.py" "$URL" set warm_below=\$w > /dev/null
SHEOF
  echo "bash $WORK/warmth.sh {mode}"
}

phase_offcost() {  # the off state's cost after the CPU fixes: no spec vs specctl forced off, same graphs
  start_server nospec nospec 0 || return 1
  python3 "$HERE/correctness.py" run "$URL" "nospec-$ATTN" "$WORK/corr-nospec.json"
  decode_only "decodeonly-nospec-$ATTN" -
  mixed "mixed-nospec-$ATTN" -
  stop_server
  start_server offcost specctl 0 || return 1
  fixcheck_runs
  python3 "$HERE/ctl.py" "$URL" mode off | cut -c1-160
  decode_only "decodeonly-off-$ATTN" -
  python3 "$HERE/ctl.py" "$URL" mode off | cut -c1-100
  mixed "mixed-off-$ATTN" "cold warm" "$(warmth_switch)"
  python3 "$HERE/ctl.py" "$URL" set warm_below=0 > /dev/null
  profile_now "offfix-$ATTN" "$WORK/server-offcost.log"
  server_facts offcost
  stop_server
}

start_role() {  # start_role ROLE NAME: ROLE nospec|nospec2 (no speculation), off (specctl, forced off),
  # auto (specctl in auto with the thresholds specctl's supervisor adopts for ATTN, runtime/thresholds.py) or
  # treeoff (the tree under the switch, tree_switch_start's server, forced off: what its off step costs)
  case $1 in
    off) start_server "$2" specctl 0 || return 1
      python3 "$HERE/ctl.py" "$URL" mode off | cut -c1-120 ;;
    treeoff) local steps=$STEPS rc
      STEPS=$TREE_STEPS
      XARGS+=(--speculative-eagle-topk "$TREE_TOPK" --speculative-num-draft-tokens "$TREE_TOKENS")
      XENV=(SPECCTL_TREE_SWITCH=1)
      start_server "$2" specctl 0; rc=$?
      XENV=(); STEPS=$steps
      [ "$rc" = 0 ] || return 1
      python3 "$HERE/ctl.py" "$URL" mode off | cut -c1-120 ;;
    auto) start_server "$2" specctl 0 || return 1
      python3 "$HERE/ctl.py" "$URL" set $(backend_settings) mode=0 | python3 -c "import json, sys
print('[auto] settings', json.dumps(json.load(sys.stdin)['specctl']['settings']))" ;;
    *) start_server "$2" nospec 0 ;;
  esac
}

backend_settings() {  # KEY=VALUE words: the thresholds specctl's supervisor sets for ATTN (none if unmeasured)
  python3 -c "import sys; from specctl.runtime.core.thresholds import for_backend
print(' '.join(f'{k}={v}' for k, v in (for_backend(sys.argv[1]) or {}).items()))" "$ATTN"
}

mixed_turn() {  # mixed_turn nospec|off NAME [profile]: a fresh server (specctl's forced off), mixed
  # windows at MIXED_CONCS, and with "profile" a profile with arrivals inside and the server's facts
  local kind=$1 name=$2
  start_role "$kind" "$name" || return 1
  mixed "mixed-$kind-$ATTN" -
  if [ "${3:-}" = profile ]; then
    profile_now "arr-$kind-$ATTN" "$WORK/server-$name.log"
    server_facts "$name"
  fi
  stop_server
}

phase_prefillcost() {  # no spec vs specctl off under arrivals at MIXED_CONCS: windows, then a profile with
  # arrivals inside (PROF_JITTER > 0), and the scheduler's CPU per span split by step kind (cpu_ops.py)
  mixed_turn nospec nospec profile || return 1
  mixed_turn off prefcost profile || return 1
  local traces; traces=$(ls "$OUT"/trace-arr-*-"$ATTN".json.gz 2>/dev/null)
  [ -n "$traces" ] && python3 "$HERE/cpu_ops.py" $traces > "$OUT/cpu-ops-$TAG.txt" 2>&1
  python3 "$HERE/report.py" "$CSV2" | grep "^|"
  for f in "$WORK"/prof-arr-*.txt; do [ -f "$f" ] && sed -n 1,12p "$f"; done
  [ -f "$OUT/cpu-ops-$TAG.txt" ] && head -n 80 "$OUT/cpu-ops-$TAG.txt"
  true
}

phase_offab() {  # no spec and specctl forced off taking turns, AB_ROUNDS times (A B A B): mixed windows at
  # MIXED_CONCS on a fresh server each turn, so that drift between server starts lands on both alike
  local r
  for r in $(seq 1 "$AB_ROUNDS"); do
    mixed_turn nospec nospec || return 1
    mixed_turn off offab || return 1
  done
  python3 "$HERE/report.py" "$CSV2" | grep "^|"
}

cpu_facts() {  # the CPUs the servers share (a virtual machine: which vCPUs are siblings, what the host steals)
  {
    echo "== CPUs $(date -u +%FT%TZ)"
    lscpu 2>/dev/null | grep -E "^(CPU\(s\)|Thread|Core|Socket|NUMA|Model name|Hypervisor|CPU MHz)"
    for c in $(seq 0 $(( $(nproc) - 1 ))); do
      printf "cpu%s siblings %s\n" "$c" "$(cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list 2>/dev/null)"
    done
    grep "^cpu " /proc/stat
  } >> "$WORK/facts-$TAG.txt" 2>&1
}

pair_cpus() {  # pair_cpus: offpair's two CPU lists as "A B" ("-": not pinned). PAIR_PIN_A / PAIR_PIN_B where either
  # is set (the other defaulting to PIN_SERVER), else PIN_SERVER's CPUs split in halves: two servers on one list ran
  # the second one's ops 1.1-1.7x slower per call (docs/benchmarks.md, "Twelfth" and "Thirteenth sitting")
  if [ -n "${PAIR_PIN_A+set}${PAIR_PIN_B+set}" ]; then
    local a=${PAIR_PIN_A-$PIN_SERVER} b=${PAIR_PIN_B-$PIN_SERVER}
    echo "${a:--} ${b:--}"
    return
  fi
  python3 -c '
import sys
spec = sys.argv[1]
cpus = [n for part in filter(None, spec.split(",")) for lo, _, hi in [part.partition("-")]
        for n in range(int(lo), int(hi or lo) + 1)]
if len(cpus) < 2:
    print(spec or "-", spec or "-")
else:
    h = len(cpus) // 2
    print(",".join(map(str, cpus[:h])), ",".join(map(str, cpus[h:])))
' "$PIN_SERVER"
}

pair_start() {  # pair_start ROLE PORT FRAC PIN: one of offpair's servers (start_role's ROLE) on the CPUs PIN
  # (empty: not pinned), its log server-pair-ROLE.log
  local rc SERVER_PIN=()  # start_role reads the caller's SERVER_PIN: this server's own list
  [ -n "$4" ] && SERVER_PIN=(taskset -c "$4")
  XARGS=(--mem-fraction-static "$3" --max-total-tokens "$PAIR_MAX_TOKENS" --sleep-on-idle)
  PORT=$2 URL=http://127.0.0.1:$2 start_role "$1" "pair-$1"; rc=$?
  XARGS=()
  return "$rc"
}

pair_turn() {  # pair_turn URL ROLE C ROUND: one warm-up and one window at C; both servers of a round get
  # the same requests (interleave.py's seed = ROUND), the rounds different ones
  if [ "$PAIR_LOAD" = decode ]; then
    URL=$1 MIXED_ROUNDS=1 MIXED_CONCS=$3 IL_SEED=$4 IL_OUTPUT=$PAIR_DECODE_OUTPUT IL_JITTER=0 \
      mixed "decodeonly-$2-$ATTN" -
  else
    URL=$1 MIXED_ROUNDS=1 MIXED_CONCS=$3 IL_SEED=$4 mixed "mixed-$2-$ATTN" -
  fi
}

pair_load_problem() {  # why offpair cannot run as set, or nothing: decode-only turns must fit the KV pools,
  # and two MoE targets do not fit one H200 beside each other's KV pool
  if [ "$MODEL" = qwen3moe ]; then
    echo "two MoE servers do not fit one H200 together: two Qwen3-30B-A3B targets hold 122 GB of weights," \
         "which leaves about 10 GB a KV pool (about 100k tokens at 96 KiB a token) where 256 requests need" \
         "about 200k; offab (fresh servers taking turns) compares them instead"
    return 0
  fi
  local c=${PROF_CONCS##* }  # the profile's load: decode only, every request admitted before it starts
  if [ "${PAIR_PROFILE:-0}" = 1 ] && [ $(( c * (PROF_INPUT + PROF_OUTPUT) )) -gt "$PAIR_MAX_TOKENS" ]; then
    echo "the profile's load at $c requests needs $(( c * (PROF_INPUT + PROF_OUTPUT) )) KV tokens, more than" \
         "PAIR_MAX_TOKENS=$PAIR_MAX_TOKENS (lower PROF_OUTPUT: $(( PAIR_MAX_TOKENS / c - PROF_INPUT )) fits)"
    return 0
  fi
  case $PAIR_LOAD in
    arrivals) return 0 ;;
    decode) ;;
    *) echo "PAIR_LOAD must be arrivals or decode, got '$PAIR_LOAD'"; return 0 ;;
  esac
  for c in $MIXED_CONCS; do
    if [ $(( c * (IL_INPUT + PAIR_DECODE_OUTPUT) )) -gt "$PAIR_MAX_TOKENS" ]; then
      echo "decode-only turns at $c requests need $(( c * (IL_INPUT + PAIR_DECODE_OUTPUT) )) KV tokens," \
           "more than PAIR_MAX_TOKENS=$PAIR_MAX_TOKENS (lower PAIR_DECODE_OUTPUT or IL_INPUT)"
      return 0
    fi
  done
}

pair_check() {  # fixcheck's greedy runs on the pair's specctl server, the pair's no-spec server the reference
  local i ref="" spec="" role=""
  for i in 0 1; do
    case ${roles[$i]} in
      nospec|nospec2) ref=${urls[$i]} ;;
      off|auto|treeoff) spec=${urls[$i]}; role=${roles[$i]} ;;
    esac
  done
  [ -n "$ref" ] && [ -n "$spec" ] || { log "pair check: needs a no-spec and a specctl server, PAIR is '$PAIR'"; return 0; }
  python3 "$HERE/correctness.py" run "$ref" "nospec-$ATTN" "$WORK/corr-nospec.json" --logprobs
  URL=$spec fixcheck_runs
  if [ "$role" != auto ]; then python3 "$HERE/ctl.py" "$spec" mode off | cut -c1-120
  else python3 "$HERE/ctl.py" "$spec" set $(backend_settings) mode=0 | cut -c1-200; fi
}

pair_threads() {  # pair_threads I C: a snapshot of both servers' threads (threads.py), server I under load
  local pids=("$SPID2" "$SPID") j=$(( 1 - $1 ))
  python3 "$HERE/threads.py" snap "$WORK/threads-$TAG.jsonl" "${roles[$1]}" "$2" "${pids[$1]}"
  python3 "$HERE/threads.py" snap "$WORK/threads-$TAG.jsonl" "idle-${roles[$j]}" "$2" "${pids[$j]}"
}

phase_offpair() {  # two servers resident together (KV pools of PAIR_MAX_TOKENS each, --sleep-on-idle), the
  # roles in PAIR in start order ("nospec off"; "off nospec" swaps which starts first; "nospec auto" pairs
  # specctl's auto with no spec; "nospec nospec2" is the null test: what the method reads between two
  # servers alike), windows taking turns between them
  # PAIR_ROUNDS times at MIXED_CONCS, each turn after its own MIXED_WARMUP, A B in odd rounds and B A in
  # even ones: the same machine, the same minutes and (with PIN_SERVER) each on half its CPUs, where
  # offab's fresh servers differed in CPU speed from start to start (docs/benchmarks.md)
  local roles=($PAIR) urls=(http://127.0.0.1:$PORT http://127.0.0.1:$((PORT + 1))) r c i problem pin_a pin_b
  [ "${#roles[@]}" = 2 ] && [ "${roles[0]}" != "${roles[1]}" ] || { log "PAIR needs two roles, got '$PAIR'"; return 1; }
  problem=$(pair_load_problem); [ -z "$problem" ] || { log "$problem"; return 1; }
  cpu_facts
  read -r pin_a pin_b < <(pair_cpus)
  [ "$pin_a" = - ] && pin_a=""; [ "$pin_b" = - ] && pin_b=""
  log "pair CPUs: ${roles[0]} on ${pin_a:-any}, ${roles[1]} on ${pin_b:-any}"
  pair_start "${roles[0]}" "$PORT" "$PAIR_FRAC_A" "$pin_a" || return 1
  SPID2=$SPID; SPID=""
  pair_start "${roles[1]}" "$((PORT + 1))" "$PAIR_FRAC_B" "$pin_b" || { stop_pid "$SPID2"; SPID2=""; return 1; }
  log "KV pools: ${roles[0]} $(python3 "$HERE/ctl.py" "${urls[0]}" info max_total_num_tokens)," \
      "${roles[1]} $(python3 "$HERE/ctl.py" "${urls[1]}" info max_total_num_tokens)"
  for r in $(seq 1 "$PAIR_ROUNDS"); do
    for c in $MIXED_CONCS; do
      for i in $( [ $((r % 2)) = 1 ] && echo 0 1 || echo 1 0 ); do
        pair_threads "$i" "$c"
        pair_turn "${urls[$i]}" "${roles[$i]}" "$c" "$r"
        pair_threads "$i" "$c"
      done
    done
    [ "$r" = "${PAIR_CHECK_AFTER:-0}" ] && pair_check
  done
  if [ "${PAIR_PROFILE:-0}" = 1 ]; then
    for i in 0 1; do
      URL=${urls[$i]} profile_now "pair-${roles[$i]}-$ATTN" "$WORK/server-pair-${roles[$i]}.log"
    done
  fi
  URL=${urls[0]} server_facts "pair-${roles[0]}"
  URL=${urls[1]} server_facts "pair-${roles[1]}"
  stop_pid "$SPID2"; SPID2=""
  stop_server
  python3 "$HERE/report.py" "$CSV2" | grep "^|"
  log "decode steps only, SGLang's own lines (decode_lines.py):"
  python3 "$HERE/decode_lines.py" --concs "$MIXED_CONCS" "$WORK/server-pair-${roles[0]}.log" \
    "$WORK/server-pair-${roles[1]}.log" | tee "$WORK/decode-lines-$TAG.txt"
  python3 "$HERE/threads.py" table "$WORK/threads-$TAG.jsonl" | tee "$WORK/threads-$TAG.txt" | head -n 60
  local traces; traces=$(ls "$OUT"/trace-pair-*-"$ATTN".json.gz 2>/dev/null)
  [ -n "$traces" ] && python3 "$HERE/cpu_ops.py" $traces | grep -A1 "^=="
  true
}

phase_earlypub() {  # offpair's "nospec off" with the early publish on the specctl server (EARLY_PUBLISH,
  # default 1), the KV pools equal (offpair gives both --max-total-tokens PAIR_MAX_TOKENS), and after the
  # last round fixcheck's greedy runs + KV check on the specctl server against the no-spec one (pair_check)
  local rc
  EARLY_PUBLISH=${EARLY_PUBLISH:-1} PAIR="nospec off" PAIR_CHECK_AFTER=$PAIR_ROUNDS phase_offpair; rc=$?
  log "early publish ($WORK/server-pair-off.log):"
  grep -h "early publish\|EARLY PUBLISH MISMATCH" "$WORK/server-pair-off.log" | cut -c1-300 | tail -n 6
  return "$rc"
}

fixcheck_runs() {  # greedy runs through the off state's paths (cold prefill, resume), KV before/after
  local P=$WORK/fixcheck-$TAG.txt
  { echo "== KV used before"; python3 "$HERE/ctl.py" "$URL" used; } > "$P" 2>&1
  corr "fx-on-$ATTN" --mode on --logprobs
  corr "fx-off-$ATTN" --mode off --logprobs
  corr "fx-toggle-$ATTN" --toggle 0.03 --logprobs
  corr "fx-cold-$ATTN" --mode off --then on --after 0.4 --logprobs
  corr "fx-auto-$ATTN" --set min_accept=0.5 accept_slope=0 accept_window=2 probe_after=4 dwell=1 --mode auto --logprobs
  python3 "$HERE/ctl.py" "$URL" set min_accept=0 accept_window=64 probe_after=256 dwell=8 >/dev/null
  python3 "$HERE/correctness.py" compare "$WORK/corr-fx-on-$ATTN.json" "$WORK/corr-fx-off-$ATTN.json" \
    "$WORK/corr-fx-toggle-$ATTN.json" "$WORK/corr-fx-cold-$ATTN.json" "$WORK/corr-fx-auto-$ATTN.json" | tee -a "$P"
  { echo "== KV used after"; python3 "$HERE/ctl.py" "$URL" used; } >> "$P" 2>&1
  grep -h "specctl fast-off" "$WORK"/server-*.log | cut -c1-300 | tail -n 8 >> "$P"
  cat "$P" | cut -c1-300
}

phase_fixcheck() {  # the fixed off state's paths on this backend, without a no-spec reference
  start_server fixcheck specctl 0 || return 1
  fixcheck_runs
  server_facts fixcheck
  stop_server
}

# ------------------------------------------------------------ tree drafts (issue 23)
phase_tree() {  # the operator's static topk-4 tree beside the chain under specctl (docs/sglang-plugin.md)
  XARGS=(--speculative-algorithm EAGLE3 --speculative-draft-model-path "$DRAFT"
         --speculative-draft-load-format dummy --speculative-eagle-topk "$TREE_TOPK"
         --speculative-num-steps "$TREE_STEPS" --speculative-num-draft-tokens "$TREE_TOKENS")
  ACC_LEN=$TREE_ACC start_server tree nospec 1 || { XARGS=(); return 1; }
  XARGS=()
  server_facts tree
  interleave "tree-$ATTN" "$ROUNDS" "$CONCS2" -
  server_facts tree
  stop_server
}

tree_switch_start() {  # tree_switch_start NAME SIM: a specctl server launched as the report's tree under the switch
  # (tree_switch.py, opt-in): the launcher's chain flags at TREE_STEPS, then the tree's (argparse keeps the last),
  # candidates {0, TREE_STEPS}, SPECCTL_TREE_SWITCH=1; simulated acceptance TREE_ACC where SIM is 1. The caller
  # sets STEPS to TREE_STEPS for the phase (the switch commands read it too) and puts it back.
  local rc
  XARGS=(--speculative-eagle-topk "$TREE_TOPK" --speculative-num-draft-tokens "$TREE_TOKENS")
  XENV=(SPECCTL_TREE_SWITCH=1)
  ACC_LEN=$TREE_ACC start_server "$1" specctl "$2"; rc=$?
  XARGS=(); XENV=()
  return $rc
}

phase_treecheck() {  # the tree under the switch, correctness first: fixcheck's greedy runs (on, off, toggled, a cold
  # resume, auto; logprobs) against each other and against nospecref's reference, KV before / after, and what
  # SGLang's start-up said (adaptive kept on, the tree's draft tokens kept, the states built)
  local steps=$STEPS P=$WORK/treecheck-$TAG.txt
  STEPS=$TREE_STEPS
  tree_switch_start treecheck 0 || { STEPS=$steps; return 1; }
  fixcheck_runs
  { cat "$WORK/fixcheck-$TAG.txt"
    echo "== start-up"
    grep -h "specctl: tree draft\|specctl: tree compaction\|speculative_adaptive disabled\|Built adaptive runtime state\|Switch adaptive runtime state" \
      "$WORK/server-treecheck.log" | cut -c1-300 | head -n 20
    python3 "$HERE/ctl.py" "$URL" info speculative_eagle_topk speculative_num_steps speculative_num_draft_tokens \
      speculative_adaptive
    if [ -f "$WORK/corr-nospec.json" ]; then
      echo "== against no speculation"
      python3 "$HERE/correctness.py" compare "$WORK/corr-nospec.json" "$WORK"/corr-fx-*-"$ATTN".json
    fi; } > "$P" 2>&1
  sed -n '/^== start-up/,$p' "$P" | cut -c1-300   # fixcheck_runs printed the rest
  cp -f "$P" "$OUT/"
  server_facts treecheck
  stop_server
  STEPS=$steps
}

phase_treesweep() {  # the tree under the switch at TREE_ACC: forced on, forced off and auto taking turns (CONCS2)
  local steps=$STEPS
  STEPS=$TREE_STEPS
  tree_switch_start treesweep 1 || { STEPS=$steps; return 1; }
  python3 "$HERE/ctl.py" "$URL" set $TREE_SETTINGS > /dev/null && log "the tree's settings: $TREE_SETTINGS"
  server_facts treesweep
  interleave "treesw-$ATTN" "$ROUNDS" "$CONCS2" "on off auto" "python3 $HERE/ctl.py $URL mode {mode}"
  server_facts treesweep
  stop_server
  STEPS=$steps
}

# ------------------------------------------------------------ draft depth (issue 22)
predicted_costs() {  # predicted_costs FILE: the simulator's cost table for MODEL and ATTN's preset (a prediction)
  local preset; preset=$(model_preset)
  [ "$MODEL" = qwen3moe ] && [ "$ATTN" != triton ] && log "no $ATTN preset for $MODEL: Triton's prediction stands in"
  python3 -m specctl.runtime.sim.depth --preset "$preset" --depths "$DEPTHS" --out "$1"
}

depth_switch() {  # a switch command for interleave.py / trace_load.py: dN pins depth N (forced on), off and auto
  # A pin sets min_accept=0 with it: the policy refuses steps below its acceptance floor (1.3 by default, so
  # d1 would be refused and the server stay where it was); off and auto put back the floor and slope the
  # server had when this was written, so auto runs with its own settings (depthsweep sets 0 before it)
  local floor
  floor=$(python3 "$HERE/ctl.py" "$URL" state 2>/dev/null | python3 -c 'import json, sys
s = (json.load(sys.stdin) or {}).get("settings") or {}
print("min_accept=%r accept_slope=%r" % (float(s["min_accept"]), float(s["accept_slope"])))' 2>/dev/null)
  [ -n "$floor" ] || log "depth_switch: could not read the server's acceptance floor; auto keeps what a pin left" >&2
  # every command names the candidates (a mask: SGLang takes numbers), so a pin after aN, which confines
  # them to {0, N}, gets the whole set back
  local all=0 d; for d in ${DEPTHS//,/ }; do all=$((all | 1 << d)); done
  cat > "$WORK/depth.sh" <<SHEOF
ok() { grep -Eq '"set": \[true(, true)*\]'; }   # refused ([false]): a non-zero status, which the load logs
case \$1 in
  d[0-9]*) python3 "$HERE/ctl.py" "$URL" set min_accept=0 mode=1 steps=\${1#d} candidates=$all | ok ;;
  a[0-9]*) python3 "$HERE/ctl.py" "$URL" set mode=0 steps=\${1#a} candidates=\$((1 | 1 << \${1#a})) $floor | ok ;;
  off) python3 "$HERE/ctl.py" "$URL" set mode=2 steps=$STEPS candidates=$all $floor | ok ;;
  auto) python3 "$HERE/ctl.py" "$URL" set mode=0 steps=$STEPS candidates=$all $floor | ok ;;
esac
SHEOF
  echo "bash $WORK/depth.sh {mode}"
}

phase_depthcheck() {  # correctness first: every depth's greedy outputs, switching mid-generation, KV, acceptance
  DEPTHS=${DEPTHS:-0,1,2,3}
  local costs=${DEPTH_COSTS:-$WORK/depth-costs-predicted.json} P=$WORK/depthcheck-$TAG.txt runs=() d
  [ -n "$DEPTH_COSTS" ] || predicted_costs "$costs" || return 1
  DEPTH_COSTS=$costs start_server depthcheck specctl 0 || return 1
  { echo "== states built (SGLang's log: elapsed and memory per depth)"
    grep -h "Built adaptive runtime state\|specctl: policy in charge" "$WORK/server-depthcheck.log" | cut -c1-300
    echo "== KV used before"; python3 "$HERE/ctl.py" "$URL" used; } > "$P" 2>&1
  for d in ${DEPTHS//,/ }; do
    [ "$d" = 0 ] && continue
    corr "dc-d$d-$ATTN" --set steps="$d" min_accept=0 --mode on --logprobs
    runs+=("$WORK/corr-dc-d$d-$ATTN.json")
  done
  python3 "$HERE/ctl.py" "$URL" set steps="$STEPS" >/dev/null
  corr "dc-off-$ATTN" --mode off --logprobs
  corr "dc-cycle-$ATTN" --set min_accept=0 --mode on --toggle 0.03 --cycle-steps 1,3,0,2,3,1,0,2 --logprobs
  corr "dc-auto-$ATTN" --set steps="$STEPS" min_accept=0 accept_slope=0 accept_window=2 probe_after=16 dwell=1 \
    --mode auto --logprobs
  python3 "$HERE/ctl.py" "$URL" set min_accept=0 accept_window=64 probe_after=256 dwell=8 steps="$STEPS" >/dev/null
  runs+=("$WORK/corr-dc-off-$ATTN.json" "$WORK/corr-dc-cycle-$ATTN.json" "$WORK/corr-dc-auto-$ATTN.json")
  python3 "$HERE/correctness.py" compare "${runs[@]}" | tee -a "$P"
  { echo "== KV used after"; python3 "$HERE/ctl.py" "$URL" used; echo "== state"; python3 "$HERE/ctl.py" "$URL" state; } >> "$P" 2>&1
  echo "== acceptance right after a depth change (draft not simulated)" >> "$P"
  python3 "$HERE/depth_accept.py" "$URL" --depths 1,3,2,0,3,1,2,3 --period "${ACCEPT_PERIOD:-4}" --concurrency 16 \
    $([ "$MODEL" = llama8b-table ] && echo --replay-check-prompts) \
    --csv "$OUT/depth-accept-$TAG.csv" >> "$P" 2>&1 || log "depth_accept failed"
  python3 "$HERE/rank_switches.py" "$WORK/server-depthcheck.log" >> "$P" 2>&1
  cat "$P" | cut -c1-300
  cp -f "$P" "$OUT/"
  server_facts depthcheck
  stop_server
}

phase_depthsweep() {  # every static depth and off under one load; their windows become the measured table
  DEPTHS=${DEPTHS:-0,1,2,3}
  local modes="" d
  for d in ${DEPTHS//,/ }; do [ "$d" = 0 ] || modes="$modes d$d"; done
  start_server depthsweep specctl 1 || return 1
  grep -h "Built adaptive runtime state" "$WORK/server-depthsweep.log" | cut -c1-300
  python3 "$HERE/ctl.py" "$URL" set min_accept=0 accept_slope=0 >/dev/null
  interleave "depth-$ATTN" "$ROUNDS" "$CONCS3" "$modes off" "$(depth_switch)"
  python3 "$HERE/depth_table.py" "$WORK/depth-costs-measured.json" "$CSV2" --label "depth-$ATTN" | tee "$WORK/depth-table-$TAG.txt"
  cp -f "$WORK/depth-costs-measured.json" "$OUT/depth-costs-measured-$TAG.json" 2>/dev/null
  server_facts depthsweep
  stop_server
}

depth_row() {  # DEPTH_ROW=1: ATTN's measured thresholds row, as specctl's supervisor sets it (FA3's: never off for
  # load, so the table alone decides); 0 (the default, as the Triton sittings ran): the policy's defaults
  [ "${DEPTH_ROW:-0}" = 1 ] || return 0
  local row; row=$(backend_settings)
  [ -n "$row" ] || { log "DEPTH_ROW=1: no measured row for $ATTN; the policy's defaults stay"; return 0; }
  python3 "$HERE/ctl.py" "$URL" set $row > /dev/null && log "depth row for $ATTN: $row"
}

phase_depthauto() {  # auto over the depths with the measured table, beside every static depth and off, one server
  DEPTHS=${DEPTHS:-0,1,2,3}
  local costs=${DEPTH_COSTS:-$WORK/depth-costs-measured.json} modes="auto" d
  [ -f "$costs" ] || { log "no cost table: run depthsweep first or set DEPTH_COSTS"; return 1; }
  costs=$(realpath "$costs")   # a path in the repository (the committed table) read by a server started elsewhere
  for d in ${DEPTHS//,/ }; do [ "$d" = 0 ] || modes="$modes d$d"; done
  [ -n "${DEPTH_CONTROL:-}" ] && modes="$modes a$DEPTH_CONTROL"   # auto confined to {0, N}: depth_report's control
  DEPTH_COSTS=$costs start_server depthauto specctl 1 || return 1
  depth_row
  python3 "$HERE/ctl.py" "$URL" state | cut -c1-400
  interleave "depthauto-$ATTN" "$ROUNDS" "$CONCS3" "$modes off" "$(depth_switch)"
  python3 "$HERE/ctl.py" "$URL" state | cut -c1-600
  python3 "$HERE/rank_switches.py" "$WORK/server-depthauto.log"
  server_facts depthauto
  stop_server
  python3 "$HERE/depth_report.py" "$CSV2" || log "depth_report failed"
}

JOURNAL_CONCS=${JOURNAL_CONCS:-"4 16 64"}   # depthjournal's concurrencies
depthjournal_switch() {  # depthjournal_switch SOCKET: a switch command that pins through the specctl CLI
  # (the supervisor's socket, as an operator pins): dN forced on at depth N with the floor 0 in the same
  # command (a depth-1 pin under a floor it cannot reach is refused), off forced off
  cat > "$WORK/depthjournal.sh" <<SHEOF
case \$1 in
  d*) "$SITE/bin/specctl" set mode=on steps=\${1#d} min_accept=0 --socket "$1" ;;
  off) "$SITE/bin/specctl" force-off --socket "$1" ;;
  *) echo "depthjournal.sh: unknown mode \$1" >&2; exit 2 ;;
esac
SHEOF
  echo "bash $WORK/depthjournal.sh {mode}"
}

depthjournal_compare() {  # depthjournal_compare TABLE PRIOR: each measured cell beside the prior's (stdlib)
  python3 - "$1" "$2" <<'PYEOF'
import json, statistics, sys
got, prior = (json.load(open(p, encoding="utf-8")) for p in sys.argv[1:3])
ratios = []
print("journal vs sweep (ms per step; ratio = journal / sweep), measured cells only:")
for i, b in enumerate(got["buckets"]):
    for j, d in enumerate(got["depths"]):
        ev = got["evidence"][i][j]
        if ev is None:
            continue
        mine = got["step_ms"][i][j]
        try:
            theirs = prior["step_ms"][prior["buckets"].index(b)][prior["depths"].index(d)]
        except (ValueError, IndexError):
            print(f"  compare batch {b:>3} d{d}: journal {mine:8.3f}  sweep -        (no prior cell)")
            continue
        ratios.append(mine / theirs)
        print(f"  compare batch {b:>3} d{d}: journal {mine:8.3f}  sweep {theirs:8.3f}  ratio {mine / theirs:5.2f}"
              f"  ({ev[0]} steps / {ev[1]} intervals)")
if ratios:
    print(f"  compare: {len(ratios)} cells, ratio median {statistics.median(ratios):.2f} "
          f"(min {min(ratios):.2f}, max {max(ratios):.2f})")
else:
    print("  compare: no measured cell")
PYEOF
}

phase_depthjournal() {  # specctl depth-costs on a real journal, against depthsweep's table (step = running x
  # accept length / tok/s): the supervisor journals, the CLI pins each depth and off under a steady load
  DEPTHS=${DEPTHS:-0,1,2,3}
  local sock=$WORK/specctl.sock journal=$WORK/journal-depthjournal-$TAG.jsonl slog=$WORK/supervisor-depthjournal-$TAG.log
  local prior=$REPO/bench/gpu/results/depth/triton-costs-measured.json table=$OUT/depth-costs-journal-$TAG.json
  local modes="" d rc
  for d in ${DEPTHS//,/ }; do [ "$d" = 0 ] || modes="$modes d$d"; done
  [ -f "$prior" ] || { log "no prior at $prior"; return 1; }
  [ "$ATTN" = triton ] || log "depthjournal: the prior and the comparison are Triton's table, not $ATTN's"
  write_models
  rm -f "$sock" "$journal" "$table"
  log "starting depthjournal through specctl run --headless (DEPTHS=$DEPTHS, SGLANG_SIMULATE_ACC_LEN=$ACC_LEN)"
  if [ "${DRY_RUN:-}" = sim ]; then
    env -u SPECCTL_SIM_ADMIN_KEY setsid "${SERVER_PIN[@]}" "$SITE/bin/specctl" run --headless --sim-preset "$SIM_PRESET" \
      --sim-gpus "$TP" --sim-load idle --speculative-candidate-steps "$DEPTHS" --set min_accept=0 --port "$PORT" \
      --socket "$sock" --log "$journal" --interval 0.5 > "$slog" 2>&1 &
  else SGLANG_SIMULATE_ACC_LEN=$ACC_LEN SGLANG_SIMULATE_ACC_METHOD=match-expected \
    SGLANG_SIMULATE_ACC_TOKEN_MODE=$(sim_tokens) SPECCTL_FAST_OFF=$FAST_OFF \
    setsid "${SERVER_PIN[@]}" "$SITE/bin/specctl" run --headless --model "$TARGET" --draft "$DRAFT" --tp "$TP" \
      --speculative-candidate-steps "$DEPTHS" --set min_accept=0 --port "$PORT" --socket "$sock" --log "$journal" \
      --interval 0.5 -- --attention-backend "$ATTN" --speculative-draft-load-format dummy "${COMMON[@]}" \
      > "$slog" 2>&1 &
  fi
  SPID=$!
  supervisor_up depthjournal "$slog" "$journal" "$sock" || return 1
  grep -h '"backend_thresholds' "$journal" | cut -c1-400
  interleave "depthjournal-$ATTN" "$ROUNDS" "$JOURNAL_CONCS" "$modes off" "$(depthjournal_switch "$sock")"
  journal_log "$journal" "$WORK/server-depthjournal.log"
  server_facts depthjournal
  stop_server
  log "journal: $(wc -l < "$journal") lines; depth-costs against $prior"
  PATH=$SITE/bin:$PATH specctl depth-costs "$journal" --prior "$prior" --out "$table" | tee "$WORK/depthjournal-$TAG.txt"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] && [ -f "$table" ] || { log "depth-costs wrote no table (exit $rc)"; return 1; }
  depthjournal_compare "$table" "$prior" | tee -a "$WORK/depthjournal-$TAG.txt"
}

trace_run() {  # trace_run "CONFIGS" PROMPT-SEED SWITCH-COMMAND NAME: trace_load.py on the server up now
  "${LOAD_PIN[@]}" python3 "$HERE/trace_load.py" --url "$URL" --label "depthtrace-$ATTN$MTAG" --configs $1 \
    --switch "${3:-}" --trace-s "$TRACE_S" --trace-seed "$TRACE_SEED" --order-shift "$TRACE_SEED" \
    --prompt-seed "$2" --input-len "$IL_INPUT" --output-len "$IL_OUTPUT" --len-jitter "$IL_JITTER" \
    --budget-s "$(( $(left) - 20 ))" --csv "$OUT/trace-$TAG.csv" --prompts-log "$WORK/trace-prompts-$TAG.txt" \
    > "$WORK/trace-run-$4.log" 2>&1 || log "trace_load failed"
  grep -E "phase=all|skip|request errors|Error|error:" "$WORK/trace-run-$4.log" | cut -c1-300
}

trace_fit() {  # trace_fit RUNS SERVERS: log the estimate; cut TRACE_S to what BUDGET_S holds (false: not 30 s)
  local len start=$([ "${DRY_RUN:-}" = sim ] && echo 5 || echo 150) room fit
  len=$(python3 "$HERE/trace_load.py" --plan --trace-s "$TRACE_S" --trace-seed "$TRACE_SEED" | awk '/length_s/ {print $2}')
  room=$(( $(left) - 30 - $2 * start ))
  log "depthtrace: $1 traces of ${len}s (TRACE_S=$TRACE_S, seed $TRACE_SEED) + $2 server start(s): about" \
    "$(( $1 * (len + 4) + $2 * start ))s; BUDGET_S has $(left)s of it"
  [ $(( $1 * (len + 4) )) -le "$room" ] && return 0
  fit=$(( room / $1 - 4 - 20 ))   # a trace ends at the first phase past TRACE_S: up to 20 s more
  [ "$fit" -ge 30 ] || { log "depthtrace: no room for $1 traces of 30 s at least; skip"; return 1; }
  log "depthtrace: TRACE_S cut from $TRACE_S to $fit s to fit BUDGET_S"
  TRACE_S=$fit
}

phase_depthtrace() {  # issue 22's trace: every static depth, off and auto on one server, then none on another
  DEPTHS=${DEPTHS:-0,1,2,3}
  local costs=${DEPTH_COSTS:-$WORK/depth-costs-measured.json} configs=$TRACE_CONFIGS d runs servers=0
  local seed=$(( IL_SEED * 1000 + 500 ))   # prompts no other phase's load sends (interleave.py: IL_SEED)
  case $TRACE_NOSPEC in 0|1|only) ;; *) log "TRACE_NOSPEC must be 0, 1 or only, got '$TRACE_NOSPEC'"; return 1 ;; esac
  if [ -z "$configs" ]; then
    for d in ${DEPTHS//,/ }; do [ "$d" = 0 ] || configs="$configs d$d"; done
    configs="${configs# } off auto"
  fi
  [ "$TRACE_NOSPEC" = only ] && configs=""
  if [ -n "$configs" ]; then
    [ -f "$costs" ] || { log "no cost table: run depthsweep first or set DEPTH_COSTS"; return 1; }
    servers=1
  fi
  runs=$(echo $configs | wc -w)
  [ "$TRACE_NOSPEC" = 0 ] || { runs=$((runs + 1)); servers=$((servers + 1)); }
  trace_fit "$runs" "$servers" || return 1
  if [ -n "$configs" ]; then
    DEPTH_COSTS=$costs start_server depthtrace specctl 1 || return 1
    python3 "$HERE/ctl.py" "$URL" state | cut -c1-400
    trace_run "$configs" "$seed" "$(depth_switch)" specctl
    python3 "$HERE/ctl.py" "$URL" state | cut -c1-600
    server_facts depthtrace
    stop_server
  fi
  if [ "$TRACE_NOSPEC" != 0 ]; then
    start_server nospec-trace nospec 0 || return 1
    trace_run none "$(( seed + 50 ))" "" nospec
    server_facts nospec-trace
    stop_server
  fi
  [ -f "$OUT/trace-$TAG.csv" ] || { log "depthtrace: no rows"; return 1; }
  python3 "$HERE/trace_load.py" --table "$OUT/trace-$TAG.csv" --label "depthtrace-$ATTN$MTAG" \
    | tee "$WORK/trace-table-$TAG.txt"
  cp -f "$WORK/trace-table-$TAG.txt" "$OUT/"
}

# ------------------------------------------------------------------ first use of each state (coldswitch)
COLD_BUCKETS=${COLD_BUCKETS:-"1 2 4 8 16 32 64 128 256"}
COLD_RUNS=${COLD_RUNS:-"coldA coldB"}   # coldA: the switch warm-up off; coldB: on (the plugin's default)
COLD_NEED=${COLD_NEED:-250}             # seconds of BUDGET_S a cold start (MoE: 160-195 s) and its bursts need
cold_dirs() {  # the JIT caches a start fills; outside ROOT only on the GPU (a dry run must not touch this machine's)
  echo "$ROOT/jitcache" "$ROOT/.cache/flashinfer"
  [ "${DRY_RUN:-}" = sim ] || echo "$HOME/.nv/ComputeCache" "/tmp/torchinductor_$(whoami)"
}
cache_sizes() {  # cache_sizes WHEN: each cache's size and file count, logged and kept in the phase's file
  local d
  for d in "$ROOT/jitcache/triton" "$ROOT/jitcache/tvm-ffi" "$ROOT/.cache/flashinfer"; do
    if [ -d "$d" ]; then log "cache $1: $d $(du -sh "$d" | cut -f1), $(find "$d" -type f | wc -l) files"
    else log "cache $1: $d absent"; fi
  done | tee -a "$WORK/coldswitch-$TAG.txt"
}
caches_aside() {  # caches_aside SUFFIX: move every cache to DIR.SUFFIX (never deleted) so the next start is as cold as
  # a fresh machine's; the Triton and TVM-FFI dirs (exported above) are made again, empty
  local d to
  for d in $(cold_dirs); do
    [ -e "$d" ] || continue
    to=$d.$1; [ -e "$to" ] && to=$to-$(date +%s)   # a second sitting on this machine keeps the first's
    mv "$d" "$to" && log "moved $d aside to $to"
  done
  mkdir -p "$TRITON_CACHE_DIR" "$TVM_FFI_CACHE_DIR"
}
cold_run() {  # cold_run coldA|coldB: a specctl server on the caches as they are, then first_use.py against it
  local name=$1 P=$WORK/coldswitch-$TAG.txt ts up rc timeout
  if [ "$(left)" -lt "$COLD_NEED" ]; then
    log "$name: not started: $(left)s of BUDGET_S remain, a cold start and its bursts need $COLD_NEED s" \
      "(COLD_RUNS=$name in a call of its own)" | tee -a "$P"
    return 1
  fi
  case $name in
    coldA) XENV=(SPECCTL_WARMUP=0) ;;
    coldB) XENV=() ;;
    *) log "COLD_RUNS holds coldA and coldB only, got '$name'"; return 1 ;;
  esac
  ts=$(date +%s)
  start_server "$name" specctl 1 || { XENV=(); return 1; }
  XENV=()
  up=$(( $(date +%s) - ts ))
  log "$name: start-up ${up}s with the switch warm-up $([ "$name" = coldA ] && echo "off (SPECCTL_WARMUP=0)" || echo on)" \
    | tee -a "$P"
  grep -h "switch warm-up" "$WORK/server-$name.log" | cut -c1-300 | tee -a "$P"
  grep -q "switch warm-up" "$WORK/server-$name.log" || log "$name: no 'switch warm-up' line in the server's log" | tee -a "$P"
  timeout=$(( $(left) - 30 )); [ "$timeout" -gt 300 ] && timeout=300; [ "$timeout" -lt 30 ] && timeout=30
  "${LOAD_PIN[@]}" python3 "$HERE/first_use.py" --url "$URL" --states "off $STEPS" --buckets "$COLD_BUCKETS" \
    --new-tokens 4 --prompt-len 8 --label "$name-$ATTN$MTAG" --csv "$OUT/coldswitch-$TAG.csv" --append \
    --cache-dirs "$ROOT/jitcache/triton,$ROOT/jitcache/tvm-ffi,$ROOT/.cache/flashinfer" --seed "$IL_SEED" \
    --timeout "$timeout" 2>&1 | tee -a "$P"
  rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || log "$name: first_use.py failed (exit $rc)"
  server_facts "$name"
  stop_server
  cache_sizes "after $name"
  return "$rc"
}

phase_coldswitch() {  # the first-use pause per state and batch bucket: coldA without the switch warm-up, coldB with it
  local run prev=before-coldswitch n failed=0
  n=$(echo $COLD_RUNS | wc -w)
  log "coldswitch: $n cold start(s) (MoE: 160-195 s each) + $(echo $COLD_BUCKETS | wc -w) buckets x 2 states x 2" \
    "bursts each; BUDGET_S has $(left)s" | tee -a "$WORK/coldswitch-$TAG.txt"
  cache_sizes "before coldswitch"
  if [ -n "$(find $(cold_dirs) -type f -print -quit 2>/dev/null)" ]; then caches_aside "$prev"
  else log "coldswitch: the caches are empty (cold) already"; fi
  for run in $COLD_RUNS; do
    [ "$prev" = before-coldswitch ] || caches_aside "$prev"
    cold_run "$run" || failed=1
    prev=$run
  done
  cp -f "$OUT/coldswitch-$TAG.csv" "$WORK/" 2>/dev/null   # in pack's tgz too
  [ "$failed" = 0 ]
}

# ------------------------------------------------------------------ phases
phase_nospec() {
  start_server nospec nospec 0 || return 1
  server_facts nospec
  python3 "$HERE/correctness.py" run "$URL" "nospec-$ATTN" "$WORK/corr-nospec.json"
  for c in $CONCS; do bench_point "nospec-$ATTN" "$c"; done
  server_facts nospec
  stop_server
}

corr() {  # corr LABEL [correctness args]: run, then compare with the nospec reference if here
  local label=$1; shift
  python3 "$HERE/correctness.py" run "$URL" "$label" "$WORK/corr-$label.json" "$@"
  [ -f "$WORK/corr-nospec.json" ] || return 0   # kept in a file too: a call's output tail can lose it
  python3 "$HERE/correctness.py" compare "$WORK/corr-nospec.json" "$WORK/corr-$label.json" | tee -a "$WORK/vs-nospec-$TAG.txt"
}

phase_proof() {
  start_server proof specctl 0 || return 1
  local P=$WORK/proof-$TAG.txt
  {
    echo "== initial state"; python3 "$HERE/ctl.py" "$URL" state
    for m in off on auto; do echo "== mode $m"; python3 "$HERE/ctl.py" "$URL" mode "$m"; done
    echo "== KV used before"; python3 "$HERE/ctl.py" "$URL" used
  } > "$P" 2>&1
  cat "$P" | cut -c1-300
  if command -v specctl >/dev/null 2>&1 || [ -x "$SITE/bin/specctl" ]; then
    PATH=$SITE/bin:$PATH timeout 300 specctl run --headless --attach "$URL" --log "$WORK/journal-$TAG.jsonl" \
      --socket "$WORK/specctl-proof.sock" --interval 0.5 > "$WORK/supervisor-$TAG.log" 2>&1 &
    JPID=$!
    log "specctl run --headless started (pid $JPID)"
  fi
  corr "off-$ATTN" --mode off
  corr "on-$ATTN" --mode on
  corr "on2-$ATTN" --mode on
  corr "toggle-$ATTN" --toggle 0.03
  corr "autoflip-$ATTN" --set min_accept=0.5 accept_window=2 probe_after=4 dwell=1 --mode auto
  python3 "$HERE/ctl.py" "$URL" set min_accept=0 accept_window=64 probe_after=256 dwell=8 >/dev/null
  corr "off2-$ATTN" --mode off
  python3 "$HERE/correctness.py" compare "$WORK/corr-on-$ATTN.json" "$WORK/corr-on2-$ATTN.json" "$WORK/corr-toggle-$ATTN.json" "$WORK/corr-autoflip-$ATTN.json" "$WORK/corr-off-$ATTN.json"
  { echo "== KV used after"; python3 "$HERE/ctl.py" "$URL" used; echo "== final state"; python3 "$HERE/ctl.py" "$URL" state; } >> "$P" 2>&1
  tail -n 4 "$P" | cut -c1-400
  sleep 2; stop_journal
  if [ -f "$WORK/journal-$TAG.jsonl" ]; then log "journal lines: $(wc -l < "$WORK/journal-$TAG.jsonl")"; tail -n 3 "$WORK/supervisor-$TAG.log"
  elif [ -f "$WORK/supervisor-$TAG.log" ]; then log "the headless supervisor did not journal:"; tail -n 5 "$WORK/supervisor-$TAG.log"; fi
  python3 "$HERE/rank_switches.py" "$WORK/server-proof.log" | tee "$WORK/ranks-$TAG.txt"
  server_facts proof
  stop_server
}

phase_offcheck() {
  start_server offcheck specctl 1 || return 1
  python3 "$HERE/ctl.py" "$URL" used > "$WORK/offcheck-$TAG.txt" 2>&1
  corr "off-$ATTN" --mode off
  python3 "$HERE/ctl.py" "$URL" used >> "$WORK/offcheck-$TAG.txt" 2>&1
  cat "$WORK/offcheck-$TAG.txt"
  SKIP_START=1 phase_sweep
}

phase_sweep() {
  if [ -z "${SKIP_START:-}" ]; then start_server sweep specctl 1 || return 1; fi
  server_facts sweep
  for c in $CONCS; do
    for m in on off auto; do
      python3 "$HERE/ctl.py" "$URL" mode "$m" > /dev/null || log "mode $m failed"
      bench_point "specctl-$m-$ATTN" "$c"
      python3 "$HERE/ctl.py" "$URL" state | cut -c1-240
    done
  done
  server_facts sweep
  stop_server
}

phase_compare() {  # every greedy run of this tag against the no-speculation reference
  local ref=$WORK/corr-nospec.json
  [ -f "$ref" ] || { log "no nospec reference yet"; return 0; }
  python3 "$HERE/correctness.py" compare "$ref" $(ls "$WORK"/corr-*.json | grep -v corr-nospec.json) | tee "$WORK/compare-$TAG.txt"
  local rc=${PIPESTATUS[0]}  # the comparison's verdict, not the KV lines' grep (none after fixcheck alone)
  grep -h "KV used\|num_used_tokens" "$WORK"/proof-*.txt "$WORK"/offcheck-*.txt 2>/dev/null | cut -c1-200
  return "$rc"
}

phase_pack() {
  for f in "$WORK"/server-*.log; do
    [ -f "$f" ] && grep -v "Capturing batches" "$f" | tail -c 3000000 > "$f.tail"
  done
  (cd "$WORK" && tar -czf "$OUT/keep-$TAG.tgz" --exclude='server-*.log' . ) && log "packed $(ls "$WORK" | wc -l) files"
  cp -f "$WORK/facts-$TAG.txt" "$OUT/" 2>/dev/null
  true
}

run_phase() {  # run_phase PHASE: one phase; its status says whether it did its work
  case $1 in
    collect) phase_collect ;;
    jitpack) phase_jitpack ;;
    install:*) phase_install "${1#install:}" || { log "install failed"; exit 1; } ;;
    project) phase_project || { log "project install failed"; exit 1; } ;;
    fa3) phase_fa3 || { log "fa3 not ready"; return 1; } ;;
    nospec) phase_nospec ;;
    proof) phase_proof ;;
    offcheck) phase_offcheck ;;
    sweep) phase_sweep ;;
    nospec2) phase_nospec2 ;;
    nospecref) phase_nospecref ;;
    sweep2) phase_sweep2 ;;
    adaptive) phase_adaptive ;;
    resume) phase_resume ;;
    offprofile) phase_offprofile ;;
    offcost) phase_offcost ;;
    prefillcost) phase_prefillcost ;;
    offab) phase_offab ;;
    offpair) phase_offpair ;;
    earlypub) phase_earlypub ;;
    fixcheck) phase_fixcheck ;;
    tree) phase_tree ;;
    treecheck) phase_treecheck ;;
    treesweep) phase_treesweep ;;
    depthcheck) phase_depthcheck ;;
    depthsweep) phase_depthsweep ;;
    depthauto) phase_depthauto ;;
    depthjournal) phase_depthjournal ;;
    depthtrace) phase_depthtrace ;;
    coldswitch) phase_coldswitch ;;
    compare) phase_compare ;;
    pack) phase_pack ;;
    *) log "unknown phase $1"; return 1 ;;
  esac
}

FAILED=()  # phases that did not do their work: the later ones still run (pack keeps what there is)
[ -n "$BENCH_ENV" ] && log "settings from $SITE/bench.env: $BENCH_ENV"
# Said first, since both sittings of 0.5.23 measured with this default unawares (docs/benchmarks.md)
[ "${PREFILL_GRAPHS:-0}" = 1 ] || log "prefill CUDA graphs OFF on every server (PREFILL_GRAPHS=0, this script's" \
  "default, not SGLang's): with arrivals the off state pays about 5 % more; PREFILL_GRAPHS=1 for SGLang's defaults"
for ph in "$@"; do
  log "== phase $ph ($(left)s left)"
  if [ -n "$DRY_RUN" ]; then
    case $ph in collect|install:*|project|fa3) log "dry run: skip $ph (the GPU machine's install)"; continue ;; esac
  fi
  run_phase "$ph" || FAILED+=("$ph")
done
if [ "${#FAILED[@]}" -gt 0 ]; then
  log "done; FAILED: ${FAILED[*]}"
  exit 3
fi
log "done"
