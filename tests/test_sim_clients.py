"""The simulator as a stand-in real clients can drive: the real `openai` client and SGLang's shapes.

Each test starts a simulator process on loopback and speaks to it as a load
tool or dashboard would speak to SGLang.
"""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from test_sim_server import start_sim  # noqa: F401  (the fixture)

MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # the default preset's served name


@pytest.fixture
def sim(start_sim) -> str:  # noqa: F811
    _, url = start_sim("--load", "steady:c=4")
    return url


@pytest.fixture
def client(sim: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{sim}/v1", api_key="none", timeout=60, max_retries=0)


def test_models_lists_the_served_model(client: openai.OpenAI) -> None:
    [model] = client.models.list().data
    assert model.id == MODEL and model.owned_by == "sglang" and model.object == "model"


def test_completion(client: openai.OpenAI) -> None:
    out = client.completions.create(model=MODEL, prompt="Say something about speculative decoding", max_tokens=12)
    assert out.object == "text_completion" and out.id.startswith("cmpl-")
    assert out.choices[0].finish_reason == "length" and len(out.choices[0].text.split()) == 12
    assert out.usage.completion_tokens == 12 and out.usage.prompt_tokens == 10
    assert out.usage.total_tokens == 22


def test_chat_completion(client: openai.OpenAI) -> None:
    out = client.chat.completions.create(model=MODEL, max_tokens=8,
                                         messages=[{"role": "user", "content": "Hello there"}])
    assert out.object == "chat.completion" and out.id.startswith("chatcmpl-")
    message = out.choices[0].message
    assert message.role == "assistant" and len(message.content.split()) == 8
    assert out.usage.completion_tokens == 8


def test_streamed_chat_arrives_token_by_token_with_usage(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model=MODEL, max_tokens=40, stream=True,
                                            stream_options={"include_usage": True},
                                            messages=[{"role": "user", "content": "Count to forty"}])
    chunks, arrivals = [], []
    for chunk in stream:
        chunks.append(chunk)
        arrivals.append(time.monotonic())
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    text = "".join(c.choices[0].delta.content for c in content)
    assert len(text.split()) == 40
    assert len(content) > 1, "the tokens come as the simulated steps produce them, not all at once"
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["length"]
    usage = chunks[-1]
    assert usage.choices == [] and usage.usage.completion_tokens == 40


def test_streamed_completion(client: openai.OpenAI) -> None:
    stream = client.completions.create(model=MODEL, prompt=[1, 2, 3, 4], max_tokens=20, stream=True)
    text = "".join(c.choices[0].text for c in stream if c.choices)
    assert len(text.split()) == 20


def test_bad_requests_are_sglang_errors(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL, messages=[], max_tokens=4)
    assert "messages" in str(bad.value)
    with pytest.raises(openai.BadRequestError) as bad:  # SGLang refuses max_tokens 0 on completions only
        client.completions.create(model=MODEL, prompt="x", max_tokens=0)
    assert "max_tokens must be positive" in str(bad.value)


def test_generate_stream_and_the_old_info_names(sim: str) -> None:
    with httpx.Client(base_url=sim, timeout=60) as http:
        lines = []
        with http.stream("POST", "/generate", json={"text": "hello", "sampling_params": {"max_new_tokens": 10},
                                                     "stream": True}) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            lines = [line for line in response.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
        assert len(chunks[-1]["output_ids"]) == 10 and chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
        assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
        assert [len(c["output_ids"]) for c in chunks] == sorted(len(c["output_ids"]) for c in chunks)
        info = http.get("/get_model_info").json()
        assert info["model_path"] == MODEL and info["is_generation"] is True
        server = http.get("/get_server_info").json()
        assert server["tp_size"] == 1 and "internal_states" in server
