#!/usr/bin/env bash
# step.sh PHASES_IF_FRESH -- PHASES_IF_INSTALLED : one device call that adapts to what the
# machine already holds (it keeps /root while warm, also from an earlier caller's install).
# SITE: the install to look for (default BENCH_ROOT/site, i.e. /root/site, the 0.5.17 kit's; /root/site523 for SGLang 0.5.23),
# passed on to run_fast_off.sh.
set -uo pipefail
export SITE=${SITE:-${BENCH_ROOT:-/root}/site}
mkdir -p "${OUT:-gpu-out}"
fresh=(); ready=(); side=fresh
for a in "$@"; do
  if [ "$a" = "--" ]; then side=ready; continue; fi
  if [ $side = fresh ]; then fresh+=("$a"); else ready+=("$a"); fi
done
echo "[step] $(date -u +%T) $SITE installed: $([ -f "$SITE/.installed" ] && echo yes || echo no); wheels here: $(ls /root/wheels 2>/dev/null | wc -l); fa3 parts: $(ls /root/fa3parts 2>/dev/null | tr '\n' ' ')"
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
if [ -f "$SITE/.installed" ] && [ ${#ready[@]} -gt 0 ]; then
  bash bench/gpu/run_fast_off.sh collect "${ready[@]}"
else
  bash bench/gpu/run_fast_off.sh collect "${fresh[@]}"
fi
