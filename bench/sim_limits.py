"""`specctl sim`'s own costs and limits, measured on this machine against real processes on loopback.

    python bench/sim_limits.py [--replicas 64] [--seconds 20]

Prints:
- the time a context-length 400 takes (prompt + max_tokens beyond the context), p50 and max of 50;
- how many scheduler steps pass between a non-streamed client's kill -9 and the running count reading 0
  (polling included: the abort itself happens when the connection drops, before the next step);
- CPU (share of one core) and RSS of one process serving N idle replicas;
- RSS with 300 streams asking 131,000 tokens each.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil


@contextmanager
def sim(*args: str) -> Iterator[tuple[psutil.Process, list[str]]]:
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "ports"
        proc = subprocess.Popen([sys.executable, "-m", "specctl.console.cli", "sim", "--port", "0", "--port-file",
                                 str(port_file), *args], stdout=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while not port_file.exists():
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("specctl sim did not start")
                time.sleep(0.05)
            yield psutil.Process(proc.pid), [f"http://127.0.0.1:{p}" for p in port_file.read_text().split()]
        finally:
            proc.terminate()
            proc.wait(timeout=60)


def context_400() -> None:
    with sim() as (_, (url,)), httpx.Client(base_url=url, timeout=30) as client:
        body = {"model": "m", "prompt": "hello", "max_tokens": 131_072}
        client.post("/v1/completions", json=body)  # warm the connection
        times = []
        for _ in range(50):
            t0 = time.perf_counter()
            answer = client.post("/v1/completions", json=body)
            times.append((time.perf_counter() - t0) * 1000)
            assert answer.status_code == 400
    print(f"context-length 400: p50 {statistics.median(times):.1f} ms, max {max(times):.1f} ms (50 requests)")


CLIENT = "import httpx, sys; httpx.post(sys.argv[1] + '/v1/chat/completions', json={'model': 'm', " \
         "'messages': [{'role': 'user', 'content': 'x'}], 'max_tokens': 100000}, timeout=600)"


def abort_steps(trials: int = 5) -> None:
    with sim() as (_, (url,)), httpx.Client(base_url=url, timeout=30) as client:
        def running() -> int:
            return int(client.get("/get_load").json()[0]["num_reqs"])

        def step() -> int:
            return int(client.get("/server_info").json()["internal_states"][0]["specctl"]["step"])

        seen = []
        for _ in range(trials):
            proc = subprocess.Popen([sys.executable, "-c", CLIENT, url])
            while running() == 0:
                time.sleep(0.01)
            time.sleep(0.5)
            before = step()
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            while running():
                pass
            seen.append(step() - before)
    print(f"killed client: its request left the batch within {max(seen)} scheduler steps of the kill "
          f"(each of {trials}: {seen}; two HTTP reads of polling included)")


def idle_replicas(n: int, seconds: float) -> None:
    with sim("--replicas", str(n)) as (proc, urls):
        assert len(urls) == n
        time.sleep(2)
        proc.cpu_percent()
        time.sleep(seconds)
        cpu = proc.cpu_percent()
        rss = proc.memory_info().rss / 2**20
    print(f"{n} idle replicas in one process: {cpu:.1f} % of one core, RSS {rss:.0f} MB "
          f"({rss / n:.2f} MB a replica), over {seconds:.0f} s")


def long_streams(n: int = 300) -> None:
    with sim() as (proc, (url,)):
        async def run() -> float:
            async with httpx.AsyncClient(base_url=url, timeout=120, limits=httpx.Limits(max_connections=n + 10)) as c:
                body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "max_tokens": 131_000,
                        "stream": True}
                lines = 0

                async def one() -> None:
                    nonlocal lines
                    async with c.stream("POST", "/v1/chat/completions", json=body) as r:
                        async for _ in r.aiter_lines():
                            lines += 1

                tasks = [asyncio.create_task(one()) for _ in range(n)]
                while lines < n * 4:
                    await asyncio.sleep(0.1)
                await asyncio.sleep(5)
                rss = proc.memory_info().rss / 2**20
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                return rss

        rss = asyncio.run(run())
    print(f"{n} streams of max_tokens 131000, 5 s in: RSS {rss:.0f} MB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=20.0)
    ns = ap.parse_args()
    context_400()
    abort_steps()
    idle_replicas(ns.replicas, ns.seconds)
    long_streams()


if __name__ == "__main__":
    main()
