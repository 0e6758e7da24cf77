"""``specctl fleet force-off`` over N simulated servers behind the real SGLang router: wall time per N,
the cost per server (the slope of a least-squares line, for a 500-server projection), the same
command with 8 of 64 servers dead or misconfigured (still one timeout), and the fleet console's CPU
(``specctl tui --router URL``, 64 servers, in a pty the way bench/console_cpu.py measures a console).

The servers are the product's own ``specctl sim --replicas N``: N simulated SGLang servers in one
process, each on its own free loopback port (read from its ``--port-file``), the control endpoints
behind ``--admin-key-file``, so 64 fit a 2-core machine. Every process the bench starts (the
simulators, the router, the console) is stopped with its children at the end, on an error or on SIGTERM.
The router is ``sglang-router`` from PyPI (HF_ENDPOINT at a closed loopback port). Each figure is the
median of ``--repeat`` runs of the real CLI in a fresh process; ``fan-out`` is the command's own
``wall_s`` (inventory, read every worker, check, send), ``process`` adds the interpreter's start.

    python bench/fleet_fanout.py [--sizes 8,16,32,64] [--repeat 5] [--console-seconds 20] [--csv FILE]
"""

from __future__ import annotations

import argparse
import contextlib
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

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "specctl.console.cli.main"]
KEY = "bench-fleet-key"
TIMEOUT_S = 2.0


# -- the fleet: `specctl sim --replicas N`, one process -------------------------------------------------
def start_fleet(stack: contextlib.ExitStack, count: int, tmp: Path) -> tuple[subprocess.Popen[bytes], list[str]]:
    """``specctl sim --replicas COUNT`` on free loopback ports, the control endpoints behind the admin key:
    the process (stopped when ``stack`` closes) and its servers' URLs (from its --port-file, one port a line,
    written once all listen)."""
    key = tmp / "sim.key"
    key.write_text(KEY + "\n")
    name = f"sim-{count}-{time.monotonic_ns()}"
    port_file, log_path = tmp / f"{name}.ports", tmp / f"{name}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen([*CLI, "sim", "--replicas", str(count), "--host", "127.0.0.1", "--port", "0",
                                 "--port-file", str(port_file), "--admin-key-file", str(key)],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    stack.callback(stop, proc)
    deadline = time.monotonic() + 300
    while not port_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            said = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["nothing"]
            raise SystemExit(f"specctl sim --replicas {count} did not start: {said[0]}")
        time.sleep(0.1)
    ports = [int(line) for line in port_file.read_text().split()]
    if len(ports) != count:
        raise SystemExit(f"specctl sim --replicas {count} listed {len(ports)} ports")
    return proc, [f"http://127.0.0.1:{port}" for port in ports]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_router(stack: contextlib.ExitStack, urls: list[str], tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The real router in front of ``urls``, stopped when ``stack`` closes; its URL once it lists them all."""
    port = free_port()
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9"}
    with (tmp / f"router-{port}.log").open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
                                 "--port", str(port), "--prometheus-host", "127.0.0.1", "--prometheus-port",
                                 str(free_port()), "--log-level", "warn", "--worker-startup-check-interval", "1",
                                 "--health-check-interval-secs", "1", "--worker-urls", *urls],
                                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    stack.callback(stop, proc)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while len(listed(url)) < len(urls):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the router did not list the {len(urls)} workers")
        time.sleep(0.2)
    return proc, url


def listed(router: str, healthy: bool = True) -> list[str]:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{router}/workers", timeout=5) as resp:
            rows = json.loads(resp.read())["workers"]
    except OSError:
        return []
    return [w["url"] for w in rows if w.get("is_healthy") or not healthy]


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process and its children (its session; SIGCONT wakes a stopped one to take it), SIGKILL
    after 30 s. Once it has exited, nothing more is sent."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
            os.killpg(proc.pid, signal.SIGCONT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def fleet(*args: str) -> tuple[dict[str, Any], float]:
    """One `specctl fleet ... --json` in a fresh process: its answer and the process's wall time."""
    t0 = time.monotonic()
    out = subprocess.run([*CLI, "fleet", *args, "--json", "--timeout", str(TIMEOUT_S)], capture_output=True,
                         text=True, timeout=120)
    wall = time.monotonic() - t0
    return json.loads(out.stdout), wall


# -- the figures ------------------------------------------------------------------------------------------
def fanout(sizes: list[int], repeat: int, tmp: Path, keys: Path) -> list[dict[str, Any]]:
    rows = []
    with contextlib.ExitStack() as stack:
        _, urls = start_fleet(stack, max(sizes), tmp)
        for n in sizes:
            with contextlib.ExitStack() as inner:
                _, url = start_router(inner, urls[:n], tmp)
                runs = []
                for i in range(repeat):
                    answer, wall = fleet("force-off" if i % 2 == 0 else "auto", "--router", url,
                                         "--admin-key-file", str(keys))
                    assert answer["ok"] and answer["summary"] == {"ok": n}, answer["summary"]
                    runs.append((answer["wall_s"], wall))
                rows.append({"servers": n, "fanout_s": statistics.median(r[0] for r in runs),
                             "process_s": statistics.median(r[1] for r in runs)})
    return rows


def with_failures(tmp: Path, keys: Path) -> dict[str, Any]:
    """64 servers: 62 behind the router, then 2 of them killed, 2 hung, 2 with a wrong key; and 2 expected
    but never listed (missing). Hung: their ``specctl sim`` stopped with SIGSTOP (the kernel still accepts a
    connection, nothing answers); killed: their ``specctl sim`` gone (refused; the router still lists them)."""
    with contextlib.ExitStack() as stack:
        _, urls = start_fleet(stack, 60, tmp)
        hung_sim, hung = start_fleet(stack, 2, tmp)
        dead_sim, dead = start_fleet(stack, 2, tmp)
        _, url = start_router(stack, urls[:58] + hung + dead, tmp)
        os.killpg(hung_sim.pid, signal.SIGSTOP)
        stop(dead_sim)
        wrong = tmp / "wrong.keys"
        wrong.write_text(f"* {KEY}\n" + "".join(f"{u} not-the-key\n" for u in urls[56:58]))
        answer, wall = fleet("force-off", "--router", url, "--admin-key-file", str(wrong),
                             "--expect", ",".join(urls[58:60]))
    return {"workers": len(answer["workers"]), "summary": answer["summary"], "fanout_s": answer["wall_s"],
            "process_s": wall}


def console_cpu(seconds: float, tmp: Path, keys: Path, cols: int = 160, rows: int = 48) -> float:
    """% of one core of `specctl tui --router URL` over 64 servers at its default refresh, in a pty."""
    sys.path.insert(0, str(ROOT / "bench"))
    from console_cpu import cpu, start_console, stop_console

    with contextlib.ExitStack() as stack:
        _, urls = start_fleet(stack, 64, tmp)
        _, url = start_router(stack, urls, tmp)
        env = dict(os.environ, TERM="xterm-256color", SPECCTL_STATE_DIR=str(tmp / "state"))
        proc, master = start_console(["--router", url, "--admin-key-file", str(keys)], cols, rows, env)
        stack.callback(stop_console, proc, master)
        time.sleep(8.0)  # started, the first polls drawn
        start, t0 = cpu(proc), time.monotonic()
        time.sleep(seconds)
        return 100 * (cpu(proc) - start) / (time.monotonic() - t0)


def slope(rows: list[dict[str, Any]], key: str) -> tuple[float, float]:
    """Least squares: seconds = a + b * servers; (a, b)."""
    xs, ys = [r["servers"] for r in rows], [r[key] for r in rows]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8,16,32,64")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--console-seconds", type=float, default=20.0, help="0 skips the console's CPU")
    ap.add_argument("--csv", type=Path, help="write the per-N rows here")
    ns = ap.parse_args()
    # SIGTERM unwinds like an error: every fleet, router and console started is stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    sizes = [int(s) for s in ns.sizes.split(",")]
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        keys = tmp / "fleet.keys"
        keys.write_text(KEY + "\n")
        rows = fanout(sizes, ns.repeat, tmp, keys)
        a, b = slope(rows, "fanout_s")
        pa, pb = slope(rows, "process_s")
        print(f"specctl fleet force-off behind sglang-router, median of {ns.repeat} (timeout {TIMEOUT_S:g} s):")
        print(f"{'servers':>8} {'fan-out s':>10} {'process s':>10}")
        for r in rows:
            print(f"{r['servers']:>8} {r['fanout_s']:>10.3f} {r['process_s']:>10.3f}")
        print(f"fan-out per server {1000 * b:.2f} ms (+{a:.3f} s); 500 servers projected {a + 500 * b:.2f} s "
              f"fan-out, {pa + 500 * pb:.2f} s with the process start")
        failing = with_failures(tmp, keys)
        print(f"64 servers, 8 failing: {failing['summary']} of {failing['workers']} rows in "
              f"{failing['fanout_s']:.2f} s fan-out ({failing['process_s']:.2f} s process), timeout {TIMEOUT_S:g} s")
        if ns.csv:
            ns.csv.parent.mkdir(parents=True, exist_ok=True)
            ns.csv.write_text("servers,fanout_s,process_s\n" + "".join(
                f"{r['servers']},{r['fanout_s']:.4f},{r['process_s']:.4f}\n" for r in rows))
        if ns.console_seconds > 0:
            used = console_cpu(ns.console_seconds, tmp, keys)
            print(f"specctl tui --router, 64 servers, 160x48 pty, {ns.console_seconds:.0f} s: {used:.2f} % of one core "
                  f"(goal < 10 %: {'met' if used < 10 else 'MISSED'})")


if __name__ == "__main__":
    main()
