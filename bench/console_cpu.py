"""CPU cost of the console at its default refresh with 8 simulated GPUs, as % of one core.

Three processes run side by side over the same window, each on its own
simulator (8 GPUs, the default ``bursts`` load, so it switches on and off):

- A: ``specctl run --headless`` (the supervisor alone),
- B: ``specctl tui --connect A`` (the console alone, fed by A over the socket),
- C: ``specctl tui`` (the console with its supervisor in-process).

The consoles run with Textual's real Linux driver in a pseudo-terminal of
``--size`` (default 160x48) whose output is read and thrown away, so the
figures include composing and writing every frame; a headless run_test
would skip the writing. Only each process's own CPU time is counted, not its
simulator's. The console's cost is B, and C - A measured in the same run;
goal: under 10 % of one core.

    python bench/console_cpu.py [--seconds 30] [--size 160x48]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from pathlib import Path

import psutil

CLI = [sys.executable, "-m", "specctl.console.cli.main"]
SIM = ["--sim-gpus", "8"]
GOAL = 10.0


def start_headless(tmp: Path) -> tuple[subprocess.Popen[bytes], Path]:
    socket = tmp / "a.sock"
    proc = subprocess.Popen([*CLI, "run", "--headless", "--socket", str(socket), *SIM],
                            stderr=subprocess.DEVNULL, start_new_session=True)
    while not socket.exists():  # the socket is bound once the supervisor runs
        time.sleep(0.05)
    return proc, socket


def start_console(args: list[str], cols: int, rows: int, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    """A console on a pty of cols x rows; a thread drains what it draws."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen([*CLI, "tui", *args], stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True, env=env)
    os.close(slave)
    threading.Thread(target=_drain, args=(master,), daemon=True).start()
    return proc, master


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        pass


def cpu(proc: subprocess.Popen[bytes]) -> float:
    t = psutil.Process(proc.pid).cpu_times()
    return t.user + t.system


def stop_console(proc: subprocess.Popen[bytes], master: int) -> None:
    """Quit with the q key, as an operator would; the console stops its own supervisor."""
    try:
        os.write(master, b"q")
        proc.wait(30)
    except (OSError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


def measure(seconds: float, cols: int, rows: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        env = dict(os.environ, TERM="xterm-256color", SPECCTL_STATE_DIR=str(tmp / "state"))
        headless, socket = start_headless(tmp)
        consoles: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
        try:
            consoles["attached"] = start_console(["--connect", str(socket)], cols, rows, env)
            consoles["in_process"] = start_console(["--socket", str(tmp / "c.sock"), *SIM], cols, rows, env)
            time.sleep(8.0)  # simulators up, first switches drawn
            procs = {"headless": headless, **{k: p for k, (p, _) in consoles.items()}}
            start, t0 = {k: cpu(p) for k, p in procs.items()}, time.monotonic()
            time.sleep(seconds)
            wall = time.monotonic() - t0
            return {k: 100 * (cpu(p) - start[k]) / wall for k, p in procs.items()}
        finally:
            for proc, master in consoles.values():
                stop_console(proc, master)
            os.killpg(headless.pid, signal.SIGTERM)
            headless.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--size", default="160x48", help="terminal COLSxROWS (default 160x48)")
    ns = ap.parse_args()
    cols, rows = (int(x) for x in ns.size.split("x"))
    r = measure(ns.seconds, cols, rows)
    added = r["in_process"] - r["headless"]
    print(f"8 simulated GPUs, default interval 0.5 s, {cols}x{rows} pty, {ns.seconds:.0f} s window, % of one core:")
    print(f"  A headless supervisor            {r['headless']:6.2f}")
    print(f"  B console attached to A (alone)  {r['attached']:6.2f}")
    print(f"  C console + in-process supervisor {r['in_process']:5.2f}   C - A = {added:5.2f}")
    worst = max(r["attached"], added)
    print(f"console adds {worst:.2f} % of one core (goal < {GOAL:.0f} %: {'met' if worst < GOAL else 'MISSED'})")


if __name__ == "__main__":
    main()
