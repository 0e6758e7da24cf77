"""CPU cost of the headless supervisor sampling 8 simulated GPUs at 4 Hz, as % of one core.

Starts `specctl run --headless` on the simulator (steady load, 8 GPUs,
--interval 0.25), lets it settle, then reads the supervisor's own CPU time
(not the simulator's) over a window. Goal: < 2 % of one core.

    python bench/supervisor_cpu.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil


def measure(seconds: float, interval: float, journal: bool) -> tuple[float, float]:
    """(supervisor % of one core, simulator % of one core) over the window."""
    with tempfile.TemporaryDirectory() as tmp:
        args = [sys.executable, "-m", "specctl.console.cli.main", "run", "--headless", "--socket",
                str(Path(tmp) / "s.sock"), "--sim-gpus", "8", "--sim-load", "steady:c=64",
                "--interval", str(interval)]
        if journal:
            args += ["--log", str(Path(tmp) / "run.jsonl")]
        proc = subprocess.Popen(args, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            while not (Path(tmp) / "s.sock").exists():  # bound once the supervisor runs
                time.sleep(0.05)
            time.sleep(3.0)
            sup = psutil.Process(proc.pid)
            sim = sup.children()[0]
            t0, s0, m0 = time.monotonic(), _cpu(sup), _cpu(sim)
            time.sleep(seconds)
            wall = time.monotonic() - t0
            return (100 * (_cpu(sup) - s0) / wall, 100 * (_cpu(sim) - m0) / wall)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ns = ap.parse_args()
    sup, sim = measure(ns.seconds, 0.25, journal=True)
    print(f"headless supervisor, 8 simulated GPUs, 4 Hz, journaling: {sup:5.2f} % of one core "
          f"(goal < 2 %: {'met' if sup < 2 else 'MISSED'}); the simulator itself: {sim:5.1f} %")


if __name__ == "__main__":
    main()
