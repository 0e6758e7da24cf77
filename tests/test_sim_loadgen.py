"""A widely used load generator (locust, run as its own process) against `specctl sim`: its request count
and the completion tokens it was told equal the simulator's own `num_requests_total` and
`generation_tokens_total` deltas, to the request and to the token."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.sim_process import specctl_sim

pytestmark = pytest.mark.slow

LOCUSTFILE = '''
import json, os, random
from locust import HttpUser, constant, events, task

SEEN = {"tokens": 0, "requests": 0}


class SimUser(HttpUser):
    wait_time = constant(0)

    @task(2)
    def completion(self):
        body = {"model": "m", "prompt": "load test", "max_tokens": random.randint(4, 24)}
        with self.client.post("/v1/completions", json=body, name="completions", catch_response=True) as r:
            SEEN["tokens"] += r.json()["usage"]["completion_tokens"]
            SEEN["requests"] += 1

    @task(1)
    def chat_stream(self):
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": random.randint(4, 24),
                "stream": True, "stream_options": {"include_usage": True}}
        with self.client.post("/v1/chat/completions", json=body, stream=True, name="chat-stream",
                              catch_response=True) as r:
            usage = None
            for line in r.iter_lines():
                if line.startswith(b"data: {"):
                    usage = json.loads(line[6:]).get("usage") or usage
            SEEN["tokens"] += usage["completion_tokens"]
            SEEN["requests"] += 1

    @task(1)
    def native(self):
        body = {"text": "load test", "sampling_params": {"max_new_tokens": random.randint(4, 24)}}
        with self.client.post("/generate", json=body, name="generate", catch_response=True) as r:
            SEEN["tokens"] += r.json()["meta_info"]["completion_tokens"]
            SEEN["requests"] += 1


@events.quitting.add_listener
def _write(environment, **_):
    with open(os.environ["SIM_SEEN_OUT"], "w") as f:
        json.dump(SEEN, f)
'''


def _counters(url: str) -> tuple[float, float]:
    text = httpx.get(url + "/metrics", timeout=30).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}

    def total(name: str) -> float:
        return sum(s.value for s in fams[name].samples if s.name.endswith("_total"))

    return total("sglang:num_requests"), total("sglang:generation_tokens")


def test_locust_counts_equal_the_simulators_counters(tmp_path: Path) -> None:
    locust = shutil.which("locust", path=str(Path(os.sys.executable).parent)) or shutil.which("locust")
    if locust is None:
        pytest.skip("locust is not installed (pip install locust)")
    (tmp_path / "locustfile.py").write_text(LOCUSTFILE)
    with specctl_sim(tmp_path) as (url,):
        requests0, tokens0 = _counters(url)
        seen_file = tmp_path / "seen.json"
        done = subprocess.run([locust, "-f", str(tmp_path / "locustfile.py"), "--headless", "-u", "8", "-r", "8",
                               "-t", "4s", "--stop-timeout", "60", "--host", url, "--only-summary",
                               "--json-file", str(tmp_path / "run")],
                              env={**os.environ, "SIM_SEEN_OUT": str(seen_file)}, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        requests1, tokens1 = _counters(url)
    stats = json.loads((tmp_path / "run.json").read_text())  # locust's final stats, one entry per request name
    made = sum(entry["num_requests"] for entry in stats)
    assert sum(entry["num_failures"] for entry in stats) == 0
    seen = json.loads(seen_file.read_text())
    assert made == seen["requests"] == requests1 - requests0 > 0
    assert seen["tokens"] == tokens1 - tokens0 > 0


def test_300_long_streams_stay_small_and_leave_with_their_clients(tmp_path: Path) -> None:
    """Output ids are made as the engine produces them: 300 streams asking for 131,000 tokens each do not
    build 39 million ids up front, the supervisor still reads the server, and all leave with their clients."""
    import asyncio
    import subprocess as sp
    import sys
    import time

    import psutil

    port_file = tmp_path / "port"
    proc = sp.Popen([sys.executable, "-m", "specctl.console.cli", "sim", "--port", "0", "--port-file",
                     str(port_file), "--admin-api-key", "k"], stdout=sp.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        url = f"http://127.0.0.1:{int(port_file.read_text())}"

        async def flood() -> tuple[int, float]:
            limits = httpx.Limits(max_connections=400)
            async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
                body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "max_tokens": 131_000,
                        "stream": True}
                started = asyncio.Event()
                count = 0

                async def one() -> None:
                    nonlocal count
                    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                        async for _ in r.aiter_lines():
                            count += 1
                            if count >= 300 * 4:
                                started.set()
                            await asyncio.sleep(0)

                tasks = [asyncio.create_task(one()) for _ in range(300)]
                await asyncio.wait_for(started.wait(), 120)
                await asyncio.sleep(3)
                running = (await client.get("/get_load")).json()[0]["num_reqs"]
                rss = psutil.Process(proc.pid).memory_info().rss / 2**20
                async with httpx.AsyncClient(base_url=url, timeout=30) as supervisor:
                    answer = await supervisor.get("/server_info", headers={"Authorization": "Bearer k"})
                    assert answer.status_code == 200
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                return running, rss

        running, rss = asyncio.run(flood())
        assert running == 300
        assert rss < 400, f"{rss:.0f} MB"
        left = httpx.get(url + "/get_load", timeout=30).json()[0]["num_reqs"]
        deadline = time.monotonic() + 60
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = httpx.get(url + "/get_load", timeout=30).json()[0]["num_reqs"]
        assert left == 0
    finally:
        proc.terminate()
        proc.wait(timeout=60)
