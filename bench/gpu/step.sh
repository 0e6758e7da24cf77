#!/usr/bin/env bash
# step.sh PHASES_IF_FRESH -- PHASES_IF_INSTALLED : one device call that adapts to what the
# machine already holds (it keeps /root while warm, also from an earlier caller's install).
set -uo pipefail
mkdir -p "${OUT:-gpu-out}"
fresh=(); ready=(); side=fresh
for a in "$@"; do
  if [ "$a" = "--" ]; then side=ready; continue; fi
  if [ $side = fresh ]; then fresh+=("$a"); else ready+=("$a"); fi
done
echo "[step] $(date -u +%T) /root/site installed: $([ -f /root/site/.installed ] && echo yes || echo no); wheels here: $(ls /root/wheels 2>/dev/null | wc -l); fa3 parts: $(ls /root/fa3parts 2>/dev/null | tr '\n' ' ')"
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
if [ -f /root/site/.installed ] && [ ${#ready[@]} -gt 0 ]; then
  bash bench/gpu/run_fast_off.sh collect "${ready[@]}"
else
  bash bench/gpu/run_fast_off.sh collect "${fresh[@]}"
fi
