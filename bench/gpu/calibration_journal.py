#!/usr/bin/env python3
"""What calibration did, from a specctl journal: every calibrated / probe / skipped-row event, and the last table.

    python3 bench/gpu/calibration_journal.py JOURNAL.jsonl

Standard library only (it runs on the GPU machine next to the journal).
"""
from __future__ import annotations

import json
import sys


def main(path: str) -> int:
    records = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # a torn last line
    t0 = next((r["t"] for r in records if "t" in r), 0.0)
    last_table = None
    probes = 0
    for r in records:
        ev = r.get("event")
        if ev in ("backend_thresholds_skipped", "backend_thresholds"):
            said = json.dumps({k: r.get(k) for k in ("backend", "experts", "why")})[:300]
            print(f"{r['t'] - t0:8.1f} s  {ev}: {said}")
        elif ev == "calibrated":
            last_table = r.get("table")
            print(f"{r['t'] - t0:8.1f} s  calibrated ok={r.get('ok')} {r.get('changes')} accept={r.get('accept')} "
                  f"probes={r.get('probes')} probe_steps={r.get('probe_steps')} of {r.get('steps_seen')} steps")
        elif ev == "calibration_probe":
            probes += r.get("phase") == "begin"
            print(f"{r['t'] - t0:8.1f} s  probe {r.get('phase')} {r.get('state')} at bucket {r.get('bucket')} "
                  f"ok={r.get('ok')}" + (" (overtaken)" if r.get("overtaken") else ""))
        elif ev == "spec_switch" and r.get("reason") not in ("forced",):
            print(f"{r['t'] - t0:8.1f} s  switch {'on' if r.get('on') else 'off'} ({r.get('reason')}) "
                  f"at batch {r.get('batch_size')}")
    print(f"probes begun: {probes}")
    if last_table:
        print("last table: bucket steps_on steps_off t_on_ms t_off_ms ratio ratio_sd breakeven gain verdict")
        for row in last_table:
            print("  " + " ".join(str(row.get(k)) for k in ("bucket", "steps_on", "steps_off", "t_on_ms", "t_off_ms",
                                                             "ratio", "ratio_sd", "breakeven", "gain", "verdict")))
    samples = [r for r in records if r.get("kind") == "sample" and isinstance(r.get("spec"), dict)]
    if samples:
        s = samples[-1]["spec"].get("settings") or {}
        print("settings at the end: " + " ".join(f"{k}={s.get(k)}" for k in ("mode", "off_at", "on_at", "min_accept",
                                                                              "accept_slope")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
