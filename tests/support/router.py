"""The real SGLang router (``sglang-router`` from PyPI, the Rust model gateway) on loopback, for fleet tests.

Started with ``HF_ENDPOINT`` at a closed loopback port, so the tokenizer fetch it tries for each
worker's model fails at once and nothing leaves the machine; its Prometheus port is a free one too.
Skips the test where the package is not installed (it is a dev dependency).
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

DEADLINE_S = 60.0  # only to end a hung test


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def router_workers(url: str, key: str | None = None) -> list[dict]:
    req = urllib.request.Request(f"{url}/workers", headers={"Authorization": f"Bearer {key}"} if key else {})
    with urllib.request.urlopen(req, timeout=5) as resp:
        return json.loads(resp.read())["workers"]


def wait_for_workers(url: str, urls: Sequence[str], key: str | None = None, present: bool = True) -> None:
    """Until every URL of ``urls`` is listed and healthy (``present``), or none of them is listed."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            rows = {w["url"].rstrip("/"): w for w in router_workers(url, key)}
        except OSError:
            rows = None
        if rows is not None:
            if present and all(u in rows and rows[u]["is_healthy"] for u in urls):
                return
            if not present and not any(u in rows for u in urls):
                return
        assert time.monotonic() < deadline, f"the router never {'listed' if present else 'dropped'} {list(urls)}"
        time.sleep(0.1)


@contextmanager
def router_process(tmp_path: Path, workers: Sequence[str], *extra: str, key: str | None = None) -> Iterator[str]:
    """``python -m sglang_router.launch_router`` in front of ``workers``; yield its URL once it lists them."""
    if importlib.util.find_spec("sglang_router") is None:
        pytest.skip("sglang-router is not installed (pip install sglang-router)")
    port = free_port()
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "NO_PROXY": "*"}
    log = tmp_path / f"router-{port}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", str(port),
             "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()), "--log-level", "warn",
             "--health-check-interval-secs", "1", "--worker-startup-check-interval", "1",
             *(["--worker-urls", *workers] if workers else []), *extra],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            assert proc.poll() is None, f"the router exited: {log.read_text()[-2000:]}"
            try:
                wait_for_workers(url, workers, key)
                break
            except AssertionError:
                raise
            except Exception:
                assert time.monotonic() < deadline, "the router never answered"
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
