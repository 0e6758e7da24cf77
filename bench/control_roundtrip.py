"""Control round trip: `force-off` until `status` shows it, p50/p99 over 200 tries. Goal: p99 < 50 ms.

Each try does what an operator's `specctl force-off` then `specctl status` does,
minus Python's start-up: a fresh connection, the greeting, ``mode off``, then
``status`` until the sample reports mode off. Between tries, untimed, ``mode
auto`` puts it back, so every try is a real change.

It runs against a real headless supervisor on the embedded simulator
(``specctl run --headless``); where runtime/supervisor/lifecycle.py does not exist yet it
falls back to the stand-in target of tests/support/control_standin.py and says so.

    python bench/control_roundtrip.py [--tries 200]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specctl.runtime.control.client import ControlClient, ControlError, NoSupervisor

ROOT = Path(__file__).resolve().parent.parent
GOAL_P99_MS = 50.0
READY_WITHIN_S = 120.0


def start_target(path: Path, stand_in: bool) -> tuple[subprocess.Popen[bytes], str]:
    """The real headless supervisor if it exists, else the stand-in; returns the process and its name."""
    if not stand_in and importlib.util.find_spec("specctl.runtime.supervisor.lifecycle") is not None:
        cmd = [sys.executable, "-m", "specctl.console.cli.main", "run", "--headless", "--socket", str(path),
               "--sim-load", "steady:c=8"]
        name = "real supervisor (specctl run --headless, simulator, steady:c=8)"
    else:
        cmd = [sys.executable, str(ROOT / "tests" / "support" / "control_standin.py"), str(path)]
        why = "as asked" if stand_in else "runtime/supervisor/lifecycle.py does not exist yet"
        name = f"STAND-IN target from tests/support/control_standin.py ({why})"
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), name


async def wait_ready(path: Path, proc: subprocess.Popen[bytes]) -> None:
    """Until the supervisor answers and its sample has the policy's state."""
    deadline = time.monotonic() + READY_WITHIN_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the target exited with {proc.returncode} before it was ready")
        try:
            async with ControlClient(path) as client:
                sample = (await client.request("status"))["sample"]
                if sample and sample.get("spec"):
                    return
        except NoSupervisor:
            pass
        await asyncio.sleep(0.1)
    raise SystemExit(f"no ready supervisor at {path} within {READY_WITHIN_S:.0f} s")


async def set_mode_and_wait(path: Path, mode: str) -> None:
    """One operator round trip: a fresh connection, ``mode``, then ``status`` until it shows."""
    async with ControlClient(path) as client:
        await client.request("mode", {"mode": mode})
        while True:
            sample = (await client.request("status"))["sample"]
            if sample and (sample.get("spec") or {}).get("mode") == mode:
                return


async def ping(path: Path) -> None:
    async with ControlClient(path) as client:
        await client.request("ping")


async def measure(path: Path, tries: int) -> tuple[list[float], list[float]]:
    """Round trips of force-off, and of a bare ping on a fresh connection (the protocol's floor)."""
    force_ms, ping_ms = [], []
    for _ in range(tries):
        start = time.perf_counter()
        await set_mode_and_wait(path, "off")
        force_ms.append((time.perf_counter() - start) * 1e3)
        await set_mode_and_wait(path, "auto")
        start = time.perf_counter()
        await ping(path)
        ping_ms.append((time.perf_counter() - start) * 1e3)
    return force_ms, ping_ms


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=200)
    parser.add_argument("--stand-in", action="store_true", help="measure the stand-in target, not the supervisor")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="sc-bench-", dir="/tmp"))
    path = folder / "specctl.sock"
    proc, name = start_target(path, args.stand_in)
    try:
        asyncio.run(wait_ready(path, proc))
        times, pings = asyncio.run(measure(path, args.tries))
    except ControlError as e:
        print(f"the target refused: {e}", file=sys.stderr)
        return 1
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        shutil.rmtree(folder, ignore_errors=True)
    p50, p99 = percentile(times, 50), percentile(times, 99)
    print(f"target: {name}")
    print(f"force-off until status shows it, {len(times)} tries: p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
          f"mean {statistics.fmean(times):.2f} ms, max {max(times):.2f} ms")
    print(f"ping on a fresh connection, for comparison: p50 {percentile(pings, 50):.2f} ms, "
          f"p99 {percentile(pings, 99):.2f} ms (force-off p50 is {p50 / percentile(pings, 50):.1f}x ping)")
    print(f"goal: p99 < {GOAL_P99_MS:.0f} ms -> {'met' if p99 < GOAL_P99_MS else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
