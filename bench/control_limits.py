"""The control plane's limits, measured on a real headless supervisor (the embedded simulator).

Prints, for the record (docs/benchmarks.md, "Control plane limits"):

1. connections held at once, under the usual soft limit of 1,024 open files (set for the supervisor
   alone with RLIMIT_NOFILE; the cap is that limit less FD_HEADROOM), and what the cap does to the next
   newcomer (refuses it, or closes the oldest client that never sent a request to make room);
2. the owner's ``status`` latency, p50 and p99, with the cap full of silent clients: each try is what
   ``specctl status`` does (a fresh connection, the greeting, ``status``), the oldest silent client
   making room for it;
3. journal bytes per hour at the default interval (0.5 s) and default simulator, and how long the
   default rotation (64 MiB, three older files) keeps.

    python bench/control_limits.py [--nofile 1024] [--tries 200] [--journal-s 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specctl.runtime.control.client import ControlClient
from specctl.runtime.control.server import FD_HEADROOM

ROTATION_FILES = 4  # run.jsonl and run.jsonl.1 .. .3
ROTATION_MB = 64.0


def start(folder: Path, nofile: int | None, *extra: str) -> subprocess.Popen[bytes]:
    limit = None if nofile is None else (lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile)))
    return subprocess.Popen(
        [sys.executable, "-m", "specctl.console.cli.main", "run", "--headless", "--socket",
         str(folder / "ctl" / "specctl.sock"), "--log", str(folder / "run.jsonl"), *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=limit, start_new_session=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_ready(path: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            sample = asyncio.run(_status(path))
            if sample and (sample.get("server") or {}).get("state") == "ready":
                return
        except Exception:
            pass
        time.sleep(0.2)
    raise SystemExit("the supervisor did not become ready")


async def _status(path: Path) -> dict | None:
    async with ControlClient(path, timeout=10) as client:
        return (await client.request("status"))["sample"]


def p99(values: list[float]) -> float:
    """The 99th percentile, never beyond the largest value.

    ``statistics.quantiles``' default (exclusive) extrapolates past the largest value when there are
    fewer than 100 values, so ``--tries 10`` printed a p99 above the max.
    """
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def held_at_once(path: Path, most: int) -> tuple[int, str, list[socket.socket]]:
    """Open connections as fast as possible, reading each greeting, until the cap shows: a newcomer is
    refused, or the server closes one held before it to make room. Returns how many were held at once, what
    the cap did, and the connections still open."""
    held: list[socket.socket] = []
    closed = select.poll()  # a held connection that turns readable was closed by the server (nothing else comes)
    for _ in range(most):
        c = socket.socket(socket.AF_UNIX)
        c.settimeout(10)
        c.connect(str(path))
        first = json.loads(c.makefile("rb").readline())
        if first.get("ok") is False:
            c.close()
            return len(held), "was refused", held
        if closed.poll(0):
            return len(held), "took the place of the oldest silent client", held + [c]
        held.append(c)
        closed.register(c, select.POLLIN)
    return len(held), f"(none: {most} held)", held


def status_latencies(path: Path, tries: int) -> list[float]:
    async def run() -> list[float]:
        out = []
        for _ in range(tries):
            began = time.perf_counter()
            sample = await _status(path)
            out.append((time.perf_counter() - began) * 1000)
            assert sample is not None
        return out
    return asyncio.run(run())


def journal_rate(seconds: float) -> float:
    """Bytes an hour at the default interval, measured over ``seconds`` after the server is ready."""
    with tempfile.TemporaryDirectory(prefix="sc-bench-") as tmp:
        folder = Path(tmp)
        proc = start(folder, None)
        try:
            wait_ready(folder / "ctl" / "specctl.sock")
            journal = folder / "run.jsonl"
            size0, t0 = journal.stat().st_size, time.monotonic()
            time.sleep(seconds)
            size1, t1 = journal.stat().st_size, time.monotonic()
        finally:
            stop(proc)
    return (size1 - size0) / (t1 - t0) * 3600


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nofile", type=int, default=1024, help="the supervisor's RLIMIT_NOFILE (default 1024)")
    ap.add_argument("--tries", type=int, default=200)
    ap.add_argument("--journal-s", type=float, default=30.0, help="seconds of journal to measure")
    ns = ap.parse_args()
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(ns.nofile * 2, 4096), hard))
    with tempfile.TemporaryDirectory(prefix="sc-bench-") as tmp:
        folder = Path(tmp)
        proc = start(folder, ns.nofile, "--sim-load", "idle")
        path = folder / "ctl" / "specctl.sock"
        try:
            wait_ready(path)
            held, then, clients = held_at_once(path, ns.nofile + 100)
            print(f"RLIMIT_NOFILE {ns.nofile}: {held} connections held at once "
                  f"(cap = limit - {FD_HEADROOM}: {ns.nofile - FD_HEADROOM}); the next newcomer {then}")
            time.sleep(1.5)  # the held clients stay silent: each newcomer takes the place of the oldest
            lat = status_latencies(path, ns.tries)
            print(f"owner's status with the cap full ({held} silent clients), {ns.tries} tries: "
                  f"p50 {statistics.median(lat):.2f} ms, p99 {p99(lat):.2f} ms, max {max(lat):.2f} ms")
            for c in clients:
                c.close()
        finally:
            stop(proc)
    rate = journal_rate(ns.journal_s)
    keeps_h = ROTATION_FILES * ROTATION_MB * 1024 * 1024 / rate
    print(f"journal at the default interval (0.5 s, default simulator, {ns.journal_s:.0f} s measured): "
          f"{rate / 1e6:.2f} MB/h; the default rotation ({ROTATION_FILES} x {ROTATION_MB:.0f} MiB) keeps "
          f"{keeps_h:.1f} h ({keeps_h / 24:.1f} days)")


if __name__ == "__main__":
    main()
