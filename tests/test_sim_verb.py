"""`specctl sim` as a user and an attacker meet it: the verb's flags, a killed client's request leaving the
batch, the waiting queue's bound, slow and piled-up connections, the temporary folders a killed supervisor
leaves. Real processes on loopback throughout."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.sim_process import specctl_sim

DEADLINE_S = 60.0  # only to end a hung test


def _specctl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specctl.console.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def _poll(fetch, ok):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + DEADLINE_S
    while True:
        value = fetch()
        if ok(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.02)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with specctl_sim(tmp_path_factory.mktemp("sim"), "--admin-api-key", "admin-secret") as urls:
        yield urls[0]


# -- the verb ---------------------------------------------------------------------------
@pytest.mark.parametrize(("args", "said"), [
    (["--port", "abc"], "invalid int value"),
    (["--port", "70000"], "--port must be between 0 and 65535"),
    (["--replicas", "0"], "--replicas must be between 1 and 1024"),
    (["--port", "65535", "--replicas", "2"], "runs past port 65535"),
    (["--context-length", "1"], "--context-length must be between"),
    (["--load", "sometimes"], "load"),
    (["--api-key", ""], "--api-key must be a non-empty key"),
    (["--host", "10.255.255.1"], "is not an address of this machine"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_flags_are_one_line_and_exit_2(args: list[str], said: str) -> None:
    done = _specctl("sim", *args)
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_a_port_in_use_is_one_line_and_exit_1(url: str) -> None:
    port = url.rsplit(":", 1)[1]
    done = _specctl("sim", "--port", port)
    assert done.returncode == 1 and done.stderr.strip() == \
        f"specctl sim: error: port {port} on 127.0.0.1 is in use (another server?); choose another with --port"


def test_sim_defaults_to_sglangs_port_and_no_load() -> None:
    from specctl.console.cli.main import build_parser

    ns = build_parser().parse_args(["sim"])
    assert ns.port == 30000 and ns.load == "idle" and ns.host == "127.0.0.1" and ns.replicas == 1


def _free_run(n: int) -> int:
    """The first of ``n`` consecutive free ports (probed by binding them)."""
    import random

    for _ in range(100):
        base = random.randint(20_000, 60_000)
        socks = []
        try:
            for k in range(n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", base + k))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError("no run of free ports")


def test_replicas_are_consecutive_ports_each_with_its_own_engine(tmp_path: Path) -> None:
    base = _free_run(3)
    port_file = tmp_path / "ports"
    proc = subprocess.Popen([sys.executable, "-m", "specctl.console.cli", "sim", "--replicas", "3", "--port",
                             str(base), "--port-file", str(port_file)], stdout=subprocess.DEVNULL)
    try:
        assert _poll(lambda: port_file.exists(), bool)
        assert port_file.read_text().split() == [str(base), str(base + 1), str(base + 2)]
        urls = [f"http://127.0.0.1:{base + k}" for k in range(3)]
        body = {"text": "same", "sampling_params": {"max_new_tokens": 4, "temperature": 0}}
        texts = {httpx.post(u + "/generate", json=body, timeout=30).json()["text"] for u in urls}
        assert len(texts) == 1  # greedy agrees across replicas
        def steps() -> list[int]:
            return [httpx.get(u + "/server_info", timeout=30).json()["internal_states"][0]["specctl"]["step"]
                    for u in urls]

        before = steps()
        httpx.post(urls[0] + "/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 9}}, timeout=30)
        after = steps()
        assert after[0] > before[0] and after[1:] == before[1:]  # each its own engine
    finally:
        proc.terminate()
        proc.wait(timeout=DEADLINE_S)


# -- a killed client's request leaves the batch ---------------------------------------------
CLIENT = """
import httpx, json, sys
url, path, body = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
if body.get("stream"):
    with httpx.stream("POST", url + path, json=body, timeout=600) as r:
        for _ in r.iter_lines():
            pass
else:
    httpx.post(url + path, json=body, timeout=600)
"""
LONG = [
    ("/generate", {"text": "long", "sampling_params": {"max_new_tokens": 100_000}}),
    ("/v1/completions", {"model": "m", "prompt": "long", "max_tokens": 100_000}),
    ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "long"}],
                              "max_tokens": 100_000}),
    ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "long"}],
                              "max_tokens": 100_000, "stream": True}),
    ("/generate", {"text": ["a batch", "of two"], "sampling_params": {"max_new_tokens": 100_000}}),
]
IN_FLIGHT = len(LONG) + 1  # the batch is two requests


def _running(client: httpx.Client) -> int:
    return int(client.get("/get_load").json()[0]["num_reqs"])


def _step(client: httpx.Client) -> int:
    return int(client.get("/server_info").json()["internal_states"][0]["specctl"]["step"])


def test_a_killed_clients_request_leaves_the_batch(url: str) -> None:
    clients = [subprocess.Popen([sys.executable, "-c", CLIENT, url, path, json.dumps(body)])
               for path, body in LONG]
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            assert _poll(lambda: _running(client), lambda n: n == IN_FLIGHT) == IN_FLIGHT
            time.sleep(0.3)  # they decode for a while
            assert _running(client) == IN_FLIGHT
            before = _step(client)
            for proc in clients:
                proc.send_signal(signal.SIGKILL)
            assert _poll(lambda: _running(client), lambda n: n == 0) == 0
            steps = _step(client) - before
            print(f"abort latency: {steps} scheduler steps from the kill to the read of 0 (polling included)")
            metrics = client.get("/metrics").text
            assert 'sglang:num_aborted_requests_total{engine_type="unified"' in metrics
    finally:
        for proc in clients:
            proc.kill()
            proc.wait()


# -- the waiting queue's bound ----------------------------------------------------------------
def test_a_full_queue_is_sglangs_503(tmp_path: Path) -> None:
    with specctl_sim(tmp_path, "--max-queued-requests", "10") as (url,):
        batch = httpx.post(url + "/generate", json={"text": ["x"] * 50, "sampling_params": {"max_new_tokens": 4}},
                           timeout=30)
        assert batch.status_code == 503 and batch.json() == {"detail": "The request queue is full."}
        many = httpx.post(url + "/v1/completions", json={"model": "m", "prompt": "x", "n": 50, "max_tokens": 4},
                          timeout=30)
        assert many.status_code == 503 and many.json()["message"] == "The request queue is full."
        assert httpx.get(url + "/get_load", timeout=30).json()[0]["num_reqs"] == 0  # nothing of them queued


# -- connections: a cap that keeps a slot for the supervisor, a header timeout --------------------------
def test_a_connection_flood_never_locks_the_supervisor_out(tmp_path: Path) -> None:
    with specctl_sim(tmp_path, "--max-connections", "8", "--header-timeout", "1", "--admin-api-key", "k") as (url,):
        host, port = url.removeprefix("http://").split(":")
        flood = []
        for _ in range(40):  # half-open requests: a head that never ends
            s = socket.create_connection((host, int(port)), timeout=10)
            s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\n")
            flood.append(s)
        try:
            admin = {"Authorization": "Bearer k"}
            with httpx.Client(base_url=url, timeout=30) as supervisor:  # the supervisor: the admin key
                assert supervisor.get("/server_info", headers=admin).status_code == 200
                assert supervisor.post("/set_internal_state", headers=admin,
                                       json={"server_args": {"specctl_mode": 0}}).status_code == 200
            with httpx.Client(base_url=url, timeout=30) as stranger:
                answer = stranger.get("/v1/models")
                assert answer.status_code == 503 or answer.status_code == 200
            # the half-open ones are closed after the header timeout
            def closed(s: socket.socket) -> bool:
                s.settimeout(10)
                try:
                    return s.recv(1) == b""
                except (ConnectionResetError, TimeoutError):
                    return True
            assert all(closed(s) for s in flood)  # evicted for newer ones, or timed out
            assert httpx.get(url + "/v1/models", timeout=30).status_code == 200  # room again
        finally:
            for s in flood:
                s.close()


# -- temporary folders of a killed supervisor --------------------------------------------------
def test_a_dead_supervisors_folder_is_removed_at_the_next_start(tmp_path: Path) -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = tmp_path / f"specctl-sim-{gone.pid}-abc"
    stale.mkdir()
    (stale / "port").write_text("1\n")
    alive = tmp_path / f"specctl-sim-{os.getpid()}-def"
    alive.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    port_file = alive / "port"
    proc = subprocess.Popen([sys.executable, "-m", "specctl.runtime.sim", "--port", "0", "--port-file",
                             str(port_file), "--load", "idle"], env=env, stdout=subprocess.DEVNULL)
    try:
        assert _poll(lambda: port_file.exists(), bool)
        assert not stale.exists() and alive.exists()
    finally:
        proc.terminate()
        proc.wait(timeout=DEADLINE_S)
    assert alive.exists()  # its supervisor lives: the folder is its own to remove


def test_a_simulator_whose_supervisor_was_killed_removes_its_folder(tmp_path: Path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    folder = tmp_path / f"specctl-sim-{parent.pid}-xyz"
    folder.mkdir()
    port_file = folder / "port"
    proc = subprocess.Popen([sys.executable, "-m", "specctl.runtime.sim", "--port", "0", "--port-file",
                             str(port_file), "--load", "idle"], stdout=subprocess.DEVNULL)
    try:
        assert _poll(lambda: port_file.exists(), bool)
        parent.kill()  # kill -9: it cannot clean up
        parent.wait()
        proc.terminate()  # what PR_SET_PDEATHSIG sends the simulator of a killed supervisor
        assert proc.wait(timeout=DEADLINE_S) == 0
        assert not folder.exists()
    finally:
        parent.kill()
        proc.kill()
        proc.wait()


# -- keys, as SGLang's decide_request_auth ----------------------------------------------------------
def test_api_and_admin_keys_follow_sglangs_rules(tmp_path: Path) -> None:
    with specctl_sim(tmp_path, "--api-key", "user-key", "--admin-api-key", "admin-key") as (url,), \
            httpx.Client(base_url=url, timeout=30) as client:
        def auth(key: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {key}"}

        for open_path in ("/health", "/ready", "/metrics"):
            assert client.get(open_path).status_code == 200, open_path
        assert client.get("/v1/models").status_code == 401
        assert client.get("/v1/models", headers=auth("user-key")).status_code == 200
        assert client.get("/v1/models", headers=auth("admin-key")).status_code == 401  # the API key only
        body = {"server_args": {"specctl_mode": 0}}
        refused = client.post("/set_internal_state", json=body, headers=auth("user-key"))
        assert refused.status_code == 401 and refused.json() == {"error": "Unauthorized"}
        assert client.post("/set_internal_state", json=body, headers=auth("admin-key")).json() == [True]
