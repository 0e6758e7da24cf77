"""The owner's commands under storms of the owner's own scripts, on a real headless supervisor.

Each storm runs in a process of its own against the supervisor's control socket; meanwhile the owner
runs what ``specctl status`` does from a terminal (a fresh connection, the greeting, ``status``, marked
interactive) ``--tries`` times, and once what a script does (the same, unmarked). Printed per storm:
the owner's status p50 and p99 in ms, how many of the owner's tries were refused, and whether a
script's try was refused (the storm filled the places open to scripts).

Storms (``--clients`` connections each):

- ``busy``: every client keeps its connection and pings every ``--every`` seconds (never idle, so
  never evicted), reconnecting when closed;
- ``idle``: every client connects and waits (the longest-idle makes room for newcomers);
- ``churn``: every client connects and closes as fast as it can;
- ``halfclose``: every client sends 2,000 requests and a subscribe, half-closes without reading, and
  closes a moment later (the server must drop it without a traceback).

    python bench/control_storm.py [--clients 330] [--every 0.5] [--tries 60] [--nofile 256]
    python bench/control_storm.py storm SOCKET KIND CLIENTS EVERY   # one storm, until stdin closes
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from specctl.runtime.control.client import INTERACTIVE_ENV, ControlError, call

KINDS = ("busy", "idle", "churn", "halfclose")
PING = b'{"id":1,"cmd":"ping"}\n'
SUBSCRIBE = b'{"id":2,"cmd":"subscribe"}\n'


async def _one_client(path: str, kind: str, every: float, stop: asyncio.Event) -> None:
    while not stop.is_set():
        writer = None
        try:
            reader, writer = await asyncio.open_unix_connection(path)
            await asyncio.wait_for(reader.readline(), 10)  # the greeting (or a refusal)
            if kind == "churn":
                continue
            if kind == "halfclose":
                writer.write(PING * 2000 + SUBSCRIBE)  # then records stream to a client that never reads
                await asyncio.wait_for(writer.drain(), 2)
                writer.write_eof()
                await asyncio.sleep(0.3)
                continue
            while not stop.is_set():
                if kind == "busy":
                    writer.write(PING)
                    await writer.drain()
                    if not await asyncio.wait_for(reader.readline(), 10):
                        break  # closed: refused or evicted; come back
                    await asyncio.sleep(every)
                else:
                    if not await reader.readline():
                        break
        except (OSError, TimeoutError, ConnectionError):
            await asyncio.sleep(0.05)
        finally:
            if writer is not None:
                writer.transport.abort()
        if kind != "churn":
            await asyncio.sleep(0.05)


async def _storm(path: str, kind: str, clients: int, every: float) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    threading.Thread(target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(stop.set)), daemon=True).start()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    tasks = [asyncio.create_task(_one_client(path, kind, every, stop)) for _ in range(clients)]
    print("storming", flush=True)
    await stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def start_storm(path: Path, kind: str, clients: int, every: float) -> subprocess.Popen[str]:
    """The storm as a process of its own (the caller's uid), started and storming when this returns."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, clients * 2 + 64))
    proc = subprocess.Popen([sys.executable, __file__, "storm", str(path), kind, str(clients), str(every)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard)))
    assert proc.stdout is not None and proc.stdout.readline().strip() == "storming"
    return proc


def stop_storm(proc: subprocess.Popen[str]) -> None:
    try:
        proc.communicate(input="", timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def owner_status(path: Path, interactive: bool = True, timeout: float = 10.0) -> tuple[float, str | None]:
    """What `specctl status` does (control.client.call: a fresh connection, the greeting, ``status``, and a
    person's few tries while every place is busy): seconds it took, and the refusal's code (None: answered)."""
    os.environ[INTERACTIVE_ENV] = "1" if interactive else "0"
    t0 = time.perf_counter()
    try:
        call(path, "status", timeout=timeout)
    except ControlError as exc:
        return time.perf_counter() - t0, exc.code
    except Exception as exc:
        return time.perf_counter() - t0, type(exc).__name__
    return time.perf_counter() - t0, None


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]


def measure(path: Path, tries: int) -> tuple[list[float], int, str | None]:
    times, refused = [], 0
    for _ in range(tries):
        took, code = owner_status(path)
        times.append(took)
        refused += code is not None
        time.sleep(0.05)
    _, script = owner_status(path, interactive=False)
    return times, refused, script


def start_supervisor(folder: Path, nofile: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "specctl.console.cli.main", "run", "--headless", "--socket",
         str(folder / "ctl" / "specctl.sock"), "--log", str(folder / "run.jsonl")],
        stdout=subprocess.DEVNULL, stderr=open(folder / "stderr.txt", "wb"), start_new_session=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile)))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if owner_status(folder / "ctl" / "specctl.sock")[1] is None:
            return proc
        time.sleep(0.5)
    proc.kill()
    raise SystemExit("the supervisor did not answer within 120 s")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "storm":
        _, _, path, kind, clients, every = sys.argv
        asyncio.run(_storm(path, kind, int(clients), float(every)))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=330)
    ap.add_argument("--every", type=float, default=0.5)
    ap.add_argument("--tries", type=int, default=60)
    ap.add_argument("--nofile", type=int, default=256, help="the supervisor's open-files limit (its cap)")
    ap.add_argument("--kinds", default=",".join(KINDS))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sc-", dir="/tmp") as tmp:
        folder = Path(tmp)
        (folder / "ctl").mkdir(mode=0o700)
        sup = start_supervisor(folder, args.nofile)
        path = folder / "ctl" / "specctl.sock"
        try:
            print(f"storm      clients  owner status p50 ms  p99 ms  owner refused  a script refused "
                  f"(supervisor nofile {args.nofile})")
            base, refused, script = measure(path, args.tries)
            print(f"{'none':10} {0:7d}  {statistics.median(base) * 1e3:19.1f}  {p99(base) * 1e3:6.1f}  "
                  f"{refused:>6d}/{args.tries:<6d}  {script or 'no'}")
            for kind in args.kinds.split(","):
                storm = start_storm(path, kind, args.clients, args.every)
                try:
                    time.sleep(2.0)  # the storm fills the places
                    times, refused, script = measure(path, args.tries)
                finally:
                    stop_storm(storm)
                print(f"{kind:10} {args.clients:7d}  {statistics.median(times) * 1e3:19.1f}  "
                      f"{p99(times) * 1e3:6.1f}  {refused:>6d}/{args.tries:<6d}  {script or 'no'}")
                time.sleep(1.0)
        finally:
            sup.send_signal(signal.SIGTERM)
            try:
                sup.wait(timeout=30)
            except subprocess.TimeoutExpired:
                sup.kill()
                sup.wait()
        errors = (folder / "stderr.txt").read_text(errors="replace")
        print(f"supervisor stderr: {len(errors)} bytes, {errors.count('Traceback')} tracebacks")
        if "Traceback" in errors:
            print(errors[errors.index("Traceback"):][:3000])


if __name__ == "__main__":
    main()
