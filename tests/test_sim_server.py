"""The simulator as a real process on loopback, spoken to over HTTP as specctl speaks to SGLang."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

DEADLINE_S = 60.0  # only to end a hung test; nothing here asserts on timing

Start = Callable[..., tuple[subprocess.Popen[str], str]]


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[Start]:
    """Start simulator processes; each is stopped at the end of the test."""
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> tuple[subprocess.Popen[str], str]:
        port_file = tmp_path / f"port-{len(procs)}"
        proc = subprocess.Popen([sys.executable, "-m", "specctl.runtime.sim", "--port", "0",
                                 "--port-file", str(port_file), *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        deadline = time.monotonic() + DEADLINE_S
        while not port_file.exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "simulator never wrote its port file"
            time.sleep(0.05)
        port = int(port_file.read_text())
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"specctl-sim listening on http://127.0.0.1:{port}"
        return proc, f"http://127.0.0.1:{port}"

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _poll(fetch: Callable[[], Any], ok: Callable[[Any], bool]) -> Any:
    """Fetch until ``ok`` holds; gives up (failing) only after a generous deadline."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        value = fetch()
        if ok(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def _spec(client: httpx.Client) -> dict[str, Any]:
    return client.get("/server_info").json()["internal_states"][0]["specctl"]


def test_high_load_switches_off_for_load_and_metrics_parse(start_sim: Start) -> None:
    _, url = start_sim("--load", "steady:c=200")
    with httpx.Client(base_url=url, timeout=30) as client:
        assert client.get("/health").status_code == 200
        spec = _poll(lambda: _spec(client), lambda s: s["switches"] >= 1)
        assert spec["on"] is False and spec["reason"] == "load" and spec["steps"] == 0
        assert spec["recent_switches"][0]["reason"] == "load"
        text = client.get("/metrics").text
    samples = {s.name: s for fam in text_string_to_metric_families(text) for s in fam.samples}
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:gen_throughput",
                 "sglang:spec_accept_length", "sglang:token_usage", "sglang:realtime_tokens_total",
                 "specctl:spec_on", "specctl:spec_steps", "specctl:spec_switches_total"):
        assert name in samples, name
    assert samples["specctl:spec_on"].value == 0.0
    assert samples["specctl:spec_switches_total"].value >= 1
    decode = [s for fam in text_string_to_metric_families(text) for s in fam.samples
              if s.name == "sglang:realtime_tokens_total" and s.labels.get("mode") == "decode"]
    assert decode and decode[0].value > 0


def test_set_internal_state_forces_off_and_refuses_bad_values(start_sim: Start) -> None:
    _, url = start_sim("--load", "steady:c=2", "--set", "off_at=48")
    with httpx.Client(base_url=url, timeout=30) as client:
        assert _spec(client)["settings"]["off_at"] == 48
        before = _spec(client)["settings"]
        bad = {"specctl_mode": 2, "specctl_on_at": 500}  # on_at above off_at: refused as a whole
        assert client.post("/set_internal_state", json={"server_args": bad}).json() == [False]
        assert client.post("/set_internal_state", json={"server_args": {"specctl_mode": 9}}).json() == [False]
        assert client.post("/set_internal_state", json={"server_args": {"max_bs": 1}}).json() == [False]
        assert _spec(client)["settings"] == before
        assert client.post("/set_internal_state", json={"server_args": {"specctl_mode": 2}}).json() == [True]
        spec = _poll(lambda: _spec(client), lambda s: not s["on"])
        assert spec["mode"] == "off" and spec["reason"] == "forced"
        warm = {"specctl_warm_below": 16}
        assert client.post("/set_internal_state", json={"server_args": warm}).json() == [True]
        assert _spec(client)["settings"]["warm_below"] == 16
        assert client.post("/set_internal_state", json={"server_args": {"specctl_warm_below": -1}}).json() == [False]
        assert client.post("/set_internal_state", content=b"{nope").status_code == 400


def test_generate_returns_the_asked_tokens(start_sim: Start) -> None:
    _, url = start_sim("--load", "idle")
    with httpx.Client(base_url=url, timeout=60) as client:
        answer = client.post("/generate", json={"input_ids": list(range(40)),
                                                "sampling_params": {"max_new_tokens": 33}}).json()
        assert answer["meta_info"]["completion_tokens"] == 33
        assert len(answer["output_ids"]) == 33
        assert answer["meta_info"]["prompt_tokens"] == 40
        assert answer["meta_info"]["spec_accept_length"] > 1.0  # alone in the batch: speculation on
        text = client.post("/generate", json={"text": "hello there", "sampling_params": {"max_new_tokens": 3}})
        assert text.json()["meta_info"]["completion_tokens"] == 3


def test_a_batched_generate_answers_each_prompt_in_order_and_decodes_them_together(start_sim: Start) -> None:
    _, url = start_sim("--load", "idle", "--set", "mode=off")  # off: every step adds one token to each
    with httpx.Client(base_url=url, timeout=60) as client:
        prompts = [list(range(n, n + 5 + n)) for n in range(6)]
        answers = client.post("/generate", json={"input_ids": prompts, "sampling_params": {
            "max_new_tokens": 4, "temperature": 0}}).json()
        assert [a["meta_info"]["prompt_tokens"] for a in answers] == [len(p) for p in prompts]
        assert all(a["meta_info"]["completion_tokens"] == 4 for a in answers)
        assert _spec(client)["batch_size"] == 6  # queued at once, decoded as one batch to the end
        alone = client.post("/generate", json={"input_ids": prompts[2], "sampling_params": {
            "max_new_tokens": 4, "temperature": 0}}).json()
        assert alone["output_ids"] == answers[2]["output_ids"]  # greedy: the prompt alone decides


@pytest.mark.parametrize(("body", "why"), [
    ({"input_ids": [[1, 2], [3, 4]], "stream": True}, "cannot be streamed"),
    ({"input_ids": [[1, 2], []]}, "non-empty list of integers"),
    ({"input_ids": [[1, 2], [3, 4]], "rid": "x"}, "no rid"),
    ({"input_ids": [[1, 2], [3] * 200_000]}, "longer than"),
])
def test_a_bad_batch_is_refused_whole(start_sim: Start, body: dict[str, Any], why: str) -> None:
    _, url = start_sim("--load", "idle")
    with httpx.Client(base_url=url, timeout=60) as client:
        response = client.post("/generate", json=body)
        assert response.status_code == 400 and why in response.json()["error"]["message"]
        assert client.get("/server_info").json()["internal_states"][0]["num_running_reqs"] == 0
        assert _spec(client)["step"] == 0  # nothing of it was queued


def test_a_greedy_prompt_gets_the_same_output_every_time_a_sampled_one_does_not(start_sim: Start) -> None:
    _, url = start_sim("--load", "idle")
    greedy = {"input_ids": list(range(7, 47)), "sampling_params": {"max_new_tokens": 20, "temperature": 0.0}}
    sampled = {"input_ids": list(range(7, 47)), "sampling_params": {"max_new_tokens": 20}}
    with httpx.Client(base_url=url, timeout=60) as client:
        first = client.post("/generate", json=greedy).json()["output_ids"]
        client.post("/set_internal_state", json={"server_args": {"specctl_mode": 2}})  # forced off: same outputs
        assert client.post("/generate", json=greedy).json()["output_ids"] == first
        other = client.post("/generate", json={**greedy, "input_ids": list(range(8, 48))}).json()["output_ids"]
        assert other != first
        with client.stream("POST", "/generate", json={**greedy, "stream": True}) as response:
            chunks = [line for line in response.iter_lines() if line.startswith("data: {")]
        assert json.loads(chunks[-1][len("data: "):])["output_ids"] == first
        assert client.post("/generate", json=sampled).json()["output_ids"] != client.post(
            "/generate", json=sampled).json()["output_ids"]


def test_flush_cache_and_v1_loads_read_the_kv_pool_as_sglang_answers(start_sim: Start) -> None:
    _, url = start_sim("--load", "idle")
    with httpx.Client(base_url=url, timeout=60) as client:
        flushed = client.post("/flush_cache")
        assert flushed.status_code == 200 and flushed.text.startswith("Cache flushed.")
        assert client.get("/flush_cache").status_code == 200
        loads = client.get("/v1/loads").json()
        assert loads["version"] == "0.5.17" and loads["num_accelerators"] == 1
        (load,) = loads["loads"]
        assert load["dp_rank"] == 0 and load["num_used_tokens"] == 0 and load["max_total_num_tokens"] > 0
        with client.stream("POST", "/generate", json={"input_ids": [1] * 64, "stream": True,
                                                      "sampling_params": {"max_new_tokens": 131_000}}) as response:
            # The first token is out: the request holds KV. It runs for minutes (4,000 tokens took
            # 12 s, and a loaded CI machine once stalled the test that long): it ends when we leave.
            # (the iterator is kept: an iterator dropped closes the response, and the request aborts with it)
            lines = response.iter_lines()
            next(lines)
            busy = client.get("/v1/loads").json()["loads"][0]
            assert busy["num_running_reqs"] == 1 and busy["num_used_tokens"] > 64
            refused = client.post("/flush_cache")
            assert refused.status_code == 400 and refused.text == "Flush cache failed.\n"
        after = _poll(lambda: client.get("/v1/loads").json()["loads"][0], lambda x: x["num_running_reqs"] == 0)
        assert after["num_used_tokens"] == 0  # the client left: its request aborted, its KV given back
        assert client.get("/v1/loads", params={"include": "core,spec"}).status_code == 200
        bad = client.get("/v1/loads", params={"include": "nope"})
        assert bad.status_code == 400 and "Invalid include sections" in bad.json()["detail"]
        assert client.get("/v1/loads", params={"dp_rank": 1}).json()["loads"] == []
        text = client.get("/v1/loads", params={"format": "prometheus"}).text
    gauges = {s.name: s for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert gauges["sglang_num_used_tokens"].labels == {"dp_rank": "0"}


def test_abort_request_ends_the_matching_requests_with_what_they_have(start_sim: Start) -> None:
    import threading

    _, url = start_sim("--load", "idle")
    answers: dict[str, Any] = {}

    def generate(rid: str) -> None:
        with httpx.Client(base_url=url, timeout=60) as c:
            answers[rid] = c.post("/generate", json={"rid": rid, "input_ids": [1] * 32,
                                                     "sampling_params": {"max_new_tokens": 100_000}}).json()

    threads = [threading.Thread(target=generate, args=(rid,)) for rid in ("load-1", "load-2", "other")]
    for t in threads:
        t.start()
    with httpx.Client(base_url=url, timeout=60) as client:
        _poll(lambda: client.get("/v1/loads").json()["loads"][0], lambda x: x["num_running_reqs"] == 3)
        assert client.post("/abort_request", json={"rid": ""}).status_code == 200  # empty rid: none, as SGLang
        assert client.post("/abort_request", json={"rid": "load-"}).status_code == 200
        for t in threads[:2]:
            t.join(timeout=DEADLINE_S)
        assert client.get("/v1/loads").json()["loads"][0]["num_running_reqs"] == 1
        assert client.post("/abort_request", json={"abort_all": True}).status_code == 200
        threads[2].join(timeout=DEADLINE_S)
        after = client.get("/v1/loads").json()["loads"][0]
        assert after["num_running_reqs"] == 0 and after["num_used_tokens"] == 0
        assert client.post("/abort_request", json={"abort_all": "yes"}).status_code == 400
    for rid in ("load-1", "load-2", "other"):
        meta = answers[rid]["meta_info"]
        assert meta["finish_reason"]["type"] == "abort" and meta["finish_reason"]["message"] == "Aborted"
        assert meta["completion_tokens"] < 100_000 and len(answers[rid]["output_ids"]) == meta["completion_tokens"]


MALFORMED = [b"[1,", b'"text"', b'{"input_ids": "abc"}', b'{"text": ""}', b"\xff\xfe",
             b'{"text": "x", "sampling_params": {"max_new_tokens": -1}}', b'{"input_ids": [[1, 2], "x"]}']


def test_malformed_requests_are_4xx_json_errors(start_sim: Start) -> None:
    _, url = start_sim("--load", "idle")
    with httpx.Client(base_url=url, timeout=30) as client:
        for body in MALFORMED:
            response = client.post("/generate", content=body)
            assert response.status_code == 400, body
            assert "error" in response.json()
        for path in ("/set_internal_state", "/sim/load"):
            response = client.post(path, content=b'{"server_args": 3, "spec": 4}')
            assert response.status_code == 400
            assert "error" in response.json()
        assert client.get("/generate").status_code == 405


def test_sim_endpoints_gpus_and_load(start_sim: Start) -> None:
    _, url = start_sim("--load", "idle", "--gpus", "4", "--fail-gpu", "3")
    with httpx.Client(base_url=url, timeout=30) as client:
        gpus = client.get("/sim/gpus").json()
        assert [g["state"] for g in gpus] == ["ok", "ok", "ok", "failed"]
        assert gpus[3]["util"] is None and gpus[0]["mem_total"] > 0
        assert client.post("/sim/gpus", json={"failed": [0, 1]}).json() == {"failed": [0, 1]}
        assert [g["state"] for g in client.get("/sim/gpus").json()] == ["failed", "failed", "ok", "ok"]
        for body, said in (({"failed": [4]}, "out of range (0..3)"), ({"failed": ["1"]}, "body must be"),
                           ({"failed": True}, "body must be"), ([2], "body must be")):
            refused = client.post("/sim/gpus", json=body)
            assert refused.status_code == 400 and said in refused.json()["error"], body
        assert [g["state"] for g in client.get("/sim/gpus").json()] == ["failed", "failed", "ok", "ok"]
        bad = client.post("/sim/load", json={"spec": "steady:c=lots"})
        assert bad.status_code == 400 and "c must be an integer" in bad.json()["error"]
        assert client.get("/sim/load").json() == {"spec": "idle"}
        assert client.post("/sim/load", json={"spec": "steady:c=5"}).json() == {"spec": "steady:c=5"}
        running = _poll(lambda: client.get("/server_info").json()["internal_states"][0],
                        lambda s: s["num_running_reqs"] == 5)
        assert running["num_running_reqs"] == 5
        assert client.get("/nowhere").status_code == 404


def test_server_info_names_the_preset_and_its_attention_backend(start_sim: Start) -> None:
    _, url = start_sim("--load", "idle", "--preset", "h200-llama8b-fa3")
    with httpx.Client(base_url=url, timeout=30) as client:
        info = client.get("/server_info").json()
    assert info["attention_backend"] == "fa3"  # the supervisor picks load thresholds by it
    assert info["specctl_sim"]["preset"] == "h200-llama8b-fa3"


@pytest.mark.slow
def test_startup_delay_then_sigterm_exits_cleanly(start_sim: Start) -> None:
    proc, url = start_sim("--load", "steady:c=8", "--startup-delay", "3")
    with httpx.Client(base_url=url, timeout=30) as client:
        assert [client.get(path).status_code for path in ("/health", "/health_generate")] == [503, 503]
        assert _poll(lambda: client.get("/health").status_code, lambda code: code == 200) == 200
        assert client.get("/health_generate").status_code == 200
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE_S) == 0


def test_bad_command_line_is_a_usage_error() -> None:
    result = subprocess.run([sys.executable, "-m", "specctl.runtime.sim", "--load", "steady:c=x"],
                            capture_output=True, text=True, timeout=DEADLINE_S)
    assert result.returncode == 2
    assert "c must be an integer" in result.stderr
