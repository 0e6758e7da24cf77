#!/usr/bin/env bash
# calib_switch.sh MODE --socket SOCK: interleave.py's switch for calibrated auto beside the measured row alone.
#   on / off   forced (specctl force-on / force-off)
#   auto       calibrated auto: calibration on, auto
#   row        auto with the thresholds row alone: calibration off and reset (the learned values give way to
#              the ones they replaced, the row's), auto; the next `auto` learns again from nothing, so each
#              calibrated window measures what calibration reaches within the settle it is given
set -euo pipefail
mode=$1; shift
specctl=${SPECCTL:-specctl}
case $mode in
  on) exec "$specctl" force-on "$@" ;;
  off) exec "$specctl" force-off "$@" ;;
  auto) "$specctl" set calibrate=on "$@" >/dev/null && exec "$specctl" auto "$@" ;;
  row) "$specctl" set calibrate=off "$@" >/dev/null && "$specctl" calibration reset "$@" >/dev/null \
         && exec "$specctl" auto "$@" ;;
  *) echo "calib_switch.sh: unknown mode '$mode' (on, off, auto, row)" >&2; exit 2 ;;
esac
