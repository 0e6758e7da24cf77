"""What an operator waits for: from `specctl force-off` starting to `specctl status --json` showing it off.

Runs a real supervisor (`specctl run`) on the simulator under load, then N times: `specctl force-on`
(untimed), then times `specctl force-off` as a subprocess (the CLI's own call: interpreter start,
socket, the command, its wait until the server shows the change) and polls `specctl status --json`
until the sample says speculation is off. Prints p50/p99 of each and how many status calls it took.

    python bench/cli_latency.py --runs 30
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CLI = [sys.executable, "-m", "specctl.console.cli.main"]
GUARD_S = 60.0


def cli(sock: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args, "--socket", str(sock)], capture_output=True, text=True, timeout=GUARD_S)


def status(sock: Path) -> dict[str, Any] | None:
    out = cli(sock, "status", "--json")
    if out.returncode != 0:
        return None
    sample: dict[str, Any] | None = json.loads(out.stdout)
    return sample


def wait_ready(sock: Path) -> None:
    end = time.monotonic() + GUARD_S
    while time.monotonic() < end:
        sample = status(sock)
        if sample and sample["server"]["state"] == "ready" and sample.get("spec"):
            return
        time.sleep(0.2)
    raise SystemExit("the supervisor did not come up")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def measure(runs: int, load: str, interval: float) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="cl-", dir="/tmp"))
    sock = folder / "s.sock"
    env = dict(os.environ, SPECCTL_STATE_DIR=str(folder / "state"))
    sup = subprocess.Popen([*CLI, "run", "--socket", str(sock), "--interval", str(interval), "--sim-load", load],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    call_s: list[float] = []
    shown_s: list[float] = []
    polls: list[int] = []
    status_s: list[float] = []
    try:
        wait_ready(sock)
        for _ in range(runs):
            if cli(sock, "force-on").returncode != 0:
                raise SystemExit("force-on failed")
            t0 = time.monotonic()
            out = cli(sock, "force-off")
            t1 = time.monotonic()
            if out.returncode != 0:
                raise SystemExit(f"force-off failed: {out.stderr.strip()}")
            n = 0
            while True:
                s0 = time.monotonic()
                sample = status(sock)
                status_s.append(time.monotonic() - s0)
                n += 1
                if sample and sample["spec"] and sample["spec"]["on"] is False:
                    break
                if time.monotonic() - t0 > GUARD_S:
                    raise SystemExit("status never showed speculation off")
            shown_s.append(time.monotonic() - t0)
            call_s.append(t1 - t0)
            polls.append(n)
    finally:
        os.killpg(sup.pid, signal.SIGTERM)
        try:
            sup.wait(timeout=GUARD_S)
        except subprocess.TimeoutExpired:
            os.killpg(sup.pid, signal.SIGKILL)
            sup.wait()
    return {"runs": runs, "load": load, "interval_s": interval,
            "force_off_call_s": _stats(call_s), "until_status_shows_off_s": _stats(shown_s),
            "status_call_s": _stats(status_s), "status_calls_needed": {"max": max(polls), "mean":
                                                                      round(statistics.fmean(polls), 2)}}


def _stats(values: list[float]) -> dict[str, float]:
    return {"p50": round(percentile(values, 0.5), 4), "p99": round(percentile(values, 0.99), 4),
            "max": round(max(values), 4)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--load", default="steady:c=64", help="the simulator's load while measuring (default steady:c=64)")
    p.add_argument("--interval", type=float, default=0.5, help="the supervisor's sampling interval (default 0.5)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs must be at least 1")
    figures = measure(args.runs, args.load, args.interval)
    if args.json:
        print(json.dumps(figures))
        return 0
    print(f"{args.runs} runs, simulator load {args.load}, sampling every {args.interval} s")
    for key, words in (("force_off_call_s", "specctl force-off (the whole CLI call)"),
                       ("until_status_shows_off_s", "force-off start -> status --json shows OFF"),
                       ("status_call_s", "specctl status --json (one call)")):
        f = figures[key]
        ms = {k: f"{f[k] * 1000:6.0f} ms" for k in ("p50", "p99", "max")}
        print(f"  {words:45s} p50 {ms['p50']}  p99 {ms['p99']}  max {ms['max']}")
    n = figures["status_calls_needed"]
    print(f"  status calls until OFF shows                  mean {n['mean']}  max {n['max']} "
          "(1: the command returned once it had taken effect)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
