#!/usr/bin/env bash
# calibrate.sh: calibrated auto against forced on and forced off on ONE specctl server (GPU machine, repo root).
#     bash bench/gpu/calibrate.sh PHASES_IF_FRESH -- PHASES_IF_INSTALLED     (as bench/gpu/step.sh)
# The server: the MoE (Qwen3-30B-A3B shapes, dummy weights) on FlashInfer, for which no thresholds row
# exists (the supervisor journals backend_thresholds_skipped and keeps the defaults), simulated
# acceptance ACC_LEN (2.4), launched by specctl's own supervisor (`specctl run --headless --model`,
# run_fast_off.sh's sweep2 phase), which runs the calibration loop (on by default for a launch).
# interleave.py takes turns per concurrency: auto (calibrated) FIRST, then forced on, forced off, under
# one unbroken load of fresh random prompts (no prefix-cache hits). Auto's first window at each load
# therefore saw only what calibration learned from its own readings and probes there, and from the
# loads before; forced windows feed the meter too (their steps are readings), as any traffic would.
# The dense check (a row exists: Llama-8B shapes on Triton on an H200): MODEL=llama8b ATTN=triton
# SWEEP_SWITCH=calib SWEEP_MODES="auto row on off": calibrated auto beside the row alone, same server.
# After the phases, bench/gpu/calibration_journal.py prints what calibration did (events, last table)
# into $OUT/calibration-TAG.txt.
set -uo pipefail
export MODEL=${MODEL:-qwen3moe} ATTN=${ATTN:-flashinfer} ACC_LEN=${ACC_LEN:-2.4} REQUIRE_ROW=0
export SWEEP_MODES=${SWEEP_MODES:-auto on off} CONCS2=${CONCS2:-1 4 16 64 192} ROUNDS=${ROUNDS:-1}
# AUTO_SETTLE: the stated time calibrated auto gets at each new load before its window (docs/calibration.md).
export WINDOW=${WINDOW:-6} AUTO_SETTLE=${AUTO_SETTLE:-20} TAG=${TAG:-calib-$ATTN}
export OUT=${OUT:-gpu-out}
bash bench/gpu/step.sh "$@"
rc=$?
journal=$(ls -t "${BENCH_ROOT:-/root}"/keep/*/journal-sweep2-*.jsonl 2>/dev/null | head -n 1)
csv=$(ls -t "$OUT"/interleave-*.csv 2>/dev/null | head -n 1)  # TAG plus the model's suffix
if [ -n "$csv" ]; then  # the table last: only the output's tail comes back
  python3 bench/gpu/calib_report.py "$csv" > "$OUT/calib-table-${TAG}.md" 2>&1
fi
if [ -n "$journal" ]; then
  python3 bench/gpu/calibration_journal.py "$journal" > "$OUT/calibration-${TAG}.txt" 2>&1
  cp -f "$journal" "$OUT/journal-calibrate.jsonl" 2>/dev/null
  head -c 5000 "$OUT/calibration-${TAG}.txt"
fi
cat "$OUT/calib-table-${TAG}.md" 2>/dev/null
exit $rc
