"""The simulator against SGLang 0.5.23's behaviour, row by row of docs/simulator.md ("Conformance with SGLang"),
driven by the `openai` SDK (sync and async, streamed and not) and plain HTTP against one real `specctl sim` process."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.sim_process import specctl_sim

MODEL = "sim-model"
CTX = 131_072
TOO_LONG = "Requested token count exceeds the model's maximum context length of 131072 tokens."


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Two replicas of one `specctl sim` process, with a served model name, idle."""
    with specctl_sim(tmp_path_factory.mktemp("sim"), "--replicas", "2", "--served-model-name", MODEL,
                     "--model-path", "/models/llama-3.1-8b") as found:
        yield found


@pytest.fixture(scope="module")
def client(urls: list[str]) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=urls[0] + "/v1", api_key="none", timeout=60, max_retries=0) as c:
        yield c


@pytest.fixture(scope="module")
def http(urls: list[str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=urls[0], timeout=60) as c:
        yield c


# -- models -------------------------------------------------------------------------
def test_models_list_and_retrieve(client: openai.OpenAI) -> None:
    (card,) = client.models.list().data
    assert card.id == MODEL and card.model_extra["max_model_len"] == CTX
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("another-model")
    assert "The model 'another-model' does not exist" in str(missing.value)


def test_model_path_is_reported_and_two_replicas_answer(urls: list[str], http: httpx.Client) -> None:
    info = http.get("/server_info").json()
    assert info["model_path"] == "/models/llama-3.1-8b" and info["served_model_name"] == MODEL
    assert len(urls) == 2  # --port 0: two free ports (consecutive ones from a --port: tests/test_sim_verb.py)
    assert httpx.get(urls[1] + "/health", timeout=30).status_code == 200


# -- context length and max tokens --------------------------------------------------------
def test_max_tokens_beyond_the_context_is_a_400_at_once(client: openai.OpenAI) -> None:
    started = time.monotonic()
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model=MODEL, prompt="hello there", max_tokens=CTX)
    assert TOO_LONG in str(bad.value) and "You requested a total of 131075 tokens" in str(bad.value)
    assert time.monotonic() - started < 30  # no wall-clock assertion: docs/benchmarks.md has the figure
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x" * 600_000}],
                                       max_tokens=8)
    assert "is longer than the model's context length (131072 tokens)" in str(bad.value)


def test_chat_max_completion_tokens_too_large(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                       max_completion_tokens=200_000)
    assert "max_completion_tokens is too large: 200000.This model supports at most 131072" in str(bad.value)


def test_max_tokens_zero_is_refused_on_completions_only(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model=MODEL, prompt="x", max_tokens=0)
    assert "max_tokens must be positive" in str(bad.value)
    out = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=0)
    assert out.usage.completion_tokens == 0 and out.choices[0].message.content == ""


def test_chat_without_max_tokens_runs_to_a_simulated_eos(client: openai.OpenAI) -> None:
    out = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "tell me"}])
    choice = out.choices[0]
    assert choice.finish_reason == "stop" and choice.model_extra["matched_stop"] == 128_009
    assert 128 <= out.usage.completion_tokens <= 384  # the preset's output lengths


def test_generate_checks_as_sglang(http: httpx.Client) -> None:
    long = http.post("/generate", json={"input_ids": [1] * 10, "sampling_params": {"max_new_tokens": CTX}})
    assert long.status_code == 400 and TOO_LONG in long.json()["error"]["message"]
    negative = http.post("/generate", json={"text": "x", "sampling_params": {"max_new_tokens": -1}})
    assert negative.status_code == 400 and negative.json()["error"]["message"] == \
        "max_new_tokens must be at least 0, got -1."
    hot = http.post("/generate", json={"text": "x", "sampling_params": {"temperature": -1}})
    assert hot.status_code == 400 and "temperature must be a non-negative finite number" in hot.text


# -- parameters ------------------------------------------------------------------
def test_n_choices_and_batch_prompts_are_separate_requests(client: openai.OpenAI, http: httpx.Client) -> None:
    out = client.completions.create(model=MODEL, prompt=["first prompt", "second prompt"], n=2, max_tokens=6)
    assert sorted(c.index for c in out.choices) == [0, 1, 2, 3]
    assert all(c.finish_reason == "length" for c in out.choices)
    assert out.usage.completion_tokens == 24 and len({c.text for c in out.choices}) == 4
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], n=3,
                                          max_tokens=4)
    assert [c.index for c in chat.choices] == [0, 1, 2] and chat.usage.completion_tokens == 12
    batch = http.post("/generate", json={"text": ["a", "b", "c"], "sampling_params": {"max_new_tokens": 3}}).json()
    assert [b["meta_info"]["completion_tokens"] for b in batch] == [3, 3, 3]


def test_stop_strings_cut_the_text(client: openai.OpenAI, http: httpx.Client) -> None:
    free = client.completions.create(model=MODEL, prompt="stop here", max_tokens=40, temperature=0)
    words = free.choices[0].text.split()
    stop = " " + words[5]
    cut = client.completions.create(model=MODEL, prompt="stop here", max_tokens=40, temperature=0, stop=[stop])
    choice = cut.choices[0]
    assert choice.finish_reason == "stop" and choice.model_extra["matched_stop"] == stop
    assert choice.text == free.choices[0].text[:free.choices[0].text.index(stop)]
    assert cut.usage.completion_tokens == free.choices[0].text[:free.choices[0].text.index(stop)].count(" ") + 2
    streamed = client.completions.create(model=MODEL, prompt="stop here", max_tokens=40, temperature=0,
                                         stop=stop, stream=True)
    chunks = list(streamed)
    assert "".join(c.choices[0].text for c in chunks) == choice.text
    assert chunks[-1].choices[0].finish_reason == "stop"
    native = http.post("/generate", json={"text": "stop here", "sampling_params": {
        "max_new_tokens": 40, "temperature": 0, "stop": [stop]}}).json()
    assert native["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}


def test_greedy_is_a_function_of_the_prompt_alone(urls: list[str], client: openai.OpenAI) -> None:
    ask = {"model": MODEL, "messages": [{"role": "user", "content": "the same prompt"}], "max_tokens": 12,
           "temperature": 0}
    first = client.chat.completions.create(**ask).choices[0].message.content
    assert client.chat.completions.create(**ask).choices[0].message.content == first
    with openai.OpenAI(base_url=urls[1] + "/v1", api_key="none", timeout=60, max_retries=0) as other:
        assert other.chat.completions.create(**ask).choices[0].message.content == first  # another replica
    sampled = {client.chat.completions.create(**{**ask, "temperature": 1.0}).choices[0].message.content
               for _ in range(3)}
    assert len(sampled) > 1


def test_seed_repeats_a_sampled_output(client: openai.OpenAI) -> None:
    ask = {"model": MODEL, "prompt": "seeded", "max_tokens": 10, "temperature": 0.8}
    a = client.completions.create(**ask, seed=42).choices[0].text
    assert client.completions.create(**ask, seed=42).choices[0].text == a
    assert client.completions.create(**ask, seed=43).choices[0].text != a


def test_completion_logprobs_and_echo(client: openai.OpenAI) -> None:
    out = client.completions.create(model=MODEL, prompt="log me", max_tokens=5, logprobs=3)
    lp = out.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 5
    assert "".join(lp.tokens) == out.choices[0].text
    for value, top in zip(lp.token_logprobs, lp.top_logprobs):
        assert value <= 0 and len(top) == 3
        assert list(top.values()) == sorted(top.values(), reverse=True)
    echoed = client.completions.create(model=MODEL, prompt="echo me", max_tokens=3, echo=True)
    assert echoed.choices[0].text.startswith("echo me")


def test_chat_logprobs_with_top_logprobs(client: openai.OpenAI) -> None:
    out = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                                         logprobs=True, top_logprobs=2, temperature=0)
    content = out.choices[0].logprobs.content
    assert len(content) == 4 and "".join(t.token for t in content) == out.choices[0].message.content
    for t in content:
        assert t.logprob <= 0 and bytes(t.bytes).decode() == t.token
        assert [a.logprob for a in t.top_logprobs] == sorted((a.logprob for a in t.top_logprobs), reverse=True)
        assert t.top_logprobs[0].token == t.token  # greedy: the chosen token is the most likely


def test_generate_logprobs_are_logprob_id_text(http: httpx.Client) -> None:
    out = http.post("/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 4}, "return_logprob": True,
                                       "top_logprobs_num": 2}).json()
    meta = out["meta_info"]
    assert [i for _, i, _ in meta["output_token_logprobs"]] == out["output_ids"]
    assert all(len(top) == 2 and top[0][0] >= top[1][0] for top in meta["output_top_logprobs"])


def test_stream_continuous_usage_stats(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                            max_tokens=30, stream=True,
                                            stream_options={"include_usage": True, "continuous_usage_stats": True})
    chunks = list(stream)
    counts = [c.usage.completion_tokens for c in chunks if c.choices and c.usage is not None]
    assert counts and counts == sorted(counts) and counts[-1] == 30
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 30


async def test_async_client_streams_n_choices(urls: list[str]) -> None:
    async with openai.AsyncOpenAI(base_url=urls[0] + "/v1", api_key="none", timeout=60, max_retries=0) as aclient:
        stream = await aclient.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                                       max_tokens=8, n=2, stream=True)
        text: dict[int, str] = {0: "", 1: ""}
        finished = set()
        async for chunk in stream:
            for choice in chunk.choices:
                text[choice.index] += choice.delta.content or ""
                if choice.finish_reason:
                    finished.add(choice.index)
        assert finished == {0, 1} and all(len(t.split()) == 8 for t in text.values())
        several = await asyncio.gather(*(aclient.completions.create(model=MODEL, prompt=f"p{i}", max_tokens=4)
                                         for i in range(8)))
        assert all(c.usage.completion_tokens == 4 for c in several)


# -- malformed bodies: 400, never 500 ----------------------------------------------------
@pytest.mark.parametrize("body", [
    {"model": MODEL, "messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
    {"model": MODEL, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
    {"model": MODEL, "messages": [{"role": "user", "content": [7]}]},
    {"model": MODEL, "messages": [{"role": "wizard", "content": "hi"}]},
    {"model": MODEL, "messages": [{"role": "user", "content": {"deep": [[[[[]]]]]}}]},
])
def test_malformed_chat_bodies_are_400(http: httpx.Client, body: dict[str, object]) -> None:
    answer = http.post("/v1/chat/completions", json=body)
    assert answer.status_code == 400 and answer.json()["object"] == "error"


def test_deep_and_broken_json_is_400(http: httpx.Client) -> None:
    deep = b'{"text": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    for path in ("/generate", "/v1/completions", "/v1/chat/completions"):
        assert http.post(path, content=deep).status_code == 400
        assert http.post(path, content=b'{"text": ').status_code == 400
    nested: object = []
    for _ in range(100):
        nested = [nested]
    assert http.post("/v1/completions", json={"model": MODEL, "prompt": "x", "extra": nested}).status_code == 400


# -- endpoints -------------------------------------------------------------------------
def test_get_load_ready_ping(http: httpx.Client) -> None:
    (row,) = http.get("/get_load").json()
    assert set(row) == {"dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens", "num_pending_tokens", "ts_tic"}
    assert http.get("/ready").status_code == 200 and http.get("/ping").status_code == 200


# -- metrics -----------------------------------------------------------------------------
def _families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _generated(http: httpx.Client) -> float:
    fams = _families(http.get("/metrics").text)
    gen = fams["sglang:generation_tokens"]
    return sum(s.value for s in gen.samples if s.name.endswith("_total"))  # type: ignore[attr-defined]


def test_metrics_have_sglang_0523_names_types_and_buckets(client: openai.OpenAI, http: httpx.Client) -> None:
    before = _generated(http)
    out = client.completions.create(model=MODEL, prompt="count me", max_tokens=17)
    streamed = list(client.completions.create(model=MODEL, prompt="count me", max_tokens=9, stream=True,
                                              stream_options={"include_usage": True}))
    assert _generated(http) - before == out.usage.completion_tokens + streamed[-1].usage.completion_tokens == 26
    answer = http.get("/metrics")
    assert answer.headers["content-type"].startswith("text/plain; version=")
    fams = _families(answer.text)
    types = {name: fams[name].type for name in fams}  # type: ignore[attr-defined]
    for name, kind in (("sglang:prompt_tokens", "counter"), ("sglang:generation_tokens", "counter"),
                       ("sglang:num_requests", "counter"), ("sglang:time_to_first_token_seconds", "histogram"),
                       ("sglang:inter_token_latency_seconds", "histogram"),
                       ("sglang:e2e_request_latency_seconds", "histogram"), ("sglang:cache_hit_rate", "gauge"),
                       ("sglang:num_used_tokens", "gauge"), ("sglang:num_running_reqs", "gauge")):
        assert types[name] == kind, name
    ttft = [s for s in fams["sglang:time_to_first_token_seconds"].samples  # type: ignore[attr-defined]
            if s.name.endswith("_bucket") and s.labels["is_streaming"] == "false"]
    assert [s.labels["le"] for s in ttft][:3] == ["0.1", "0.2", "0.4"] and len(ttft) == 19
    labels = next(s.labels for s in fams["sglang:num_requests"].samples)  # type: ignore[attr-defined]
    assert labels["model_name"] == MODEL and labels["is_streaming"] in ("true", "false")
    om = http.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert om.headers["content-type"].startswith("application/openmetrics-text") and om.text.endswith("# EOF\n")


@pytest.mark.slow  # second tier: it needs promtool (Debian's prometheus package), which a fresh machine lacks
def test_promtool_checks_the_metrics(http: httpx.Client, tmp_path: Path) -> None:
    import shutil
    import subprocess

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed here")
    check = subprocess.run([promtool, "check", "metrics"], input=http.get("/metrics").text, text=True,
                           capture_output=True, timeout=60)
    assert check.returncode == 0, check.stderr
