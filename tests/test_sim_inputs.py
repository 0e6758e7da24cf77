"""Bodies from outside (/generate, /set_internal_state) never raise anything but a client error."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from specctl.runtime.sim.generate import BadRequest, parse_generate
from specctl.runtime.sim.load import parse_load
from specctl.runtime.sim.presets import get_preset
from specctl.runtime.sim.server import SimServer
from specctl.runtime.sim.server_config import SimConfig

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
WIRE_KEYS = st.sampled_from(["specctl_mode", "specctl_off_at", "specctl_on_at", "specctl_steps",
                             "specctl_min_accept", "specctl_dwell", "specctl_nope", "max_running"])
WIRE_VALUES = st.one_of(st.integers(-3, 300), st.floats(allow_nan=True), st.booleans(), st.text(max_size=4))


def _server() -> SimServer:
    return SimServer(SimConfig(get_preset("h200-llama8b"), 1, parse_load("idle"), {}))


@given(JSON)
def test_generate_bodies_parse_or_are_refused(body: Any) -> None:
    try:
        job = parse_generate(body)
    except BadRequest:
        return
    assert job.prompt_tokens >= 1 and (job.max_new is None or job.max_new >= 0)


OPENAI = st.fixed_dictionaries({}, optional={
    "model": JSON, "prompt": JSON, "messages": JSON, "max_tokens": JSON, "max_completion_tokens": JSON, "n": JSON,
    "stop": JSON, "logprobs": JSON, "top_logprobs": JSON, "echo": JSON, "seed": JSON, "temperature": JSON,
    "top_p": JSON, "stream_options": JSON,
})


@settings(max_examples=300)
@given(OPENAI, st.booleans())
def test_openai_bodies_are_jobs_or_client_errors(body: dict[str, Any], chat: bool) -> None:
    """Whatever a client sends to /v1/completions or /v1/chat/completions is read into jobs or refused with
    a client error (400), never an exception that would be a 500."""
    from specctl.runtime.sim.api import _Api
    from specctl.runtime.sim.openai_request import ApiError

    api = _Api(_server())
    try:
        jobs = api._chat_jobs(body) if chat else api._completion_jobs(body)
    except (ApiError, BadRequest):
        return
    assert jobs and all(job.prompt_tokens >= 1 for job in jobs)


@settings(max_examples=200)
@given(st.one_of(JSON, st.dictionaries(st.just("server_args"), st.dictionaries(WIRE_KEYS, WIRE_VALUES, max_size=3))))
def test_set_internal_state_is_all_or_nothing(body: Any) -> None:
    server = _server()
    before = server.policy.settings
    try:
        answer = server.set_internal_state(body)
    except BadRequest:
        assert server.policy.settings == before
        return
    assert answer in ([True], [False])
    if answer == [False]:
        assert server.policy.settings == before
    else:
        changed = {k.removeprefix("specctl_") for k in body["server_args"]}
        assert all(getattr(server.policy.settings, k) == getattr(before, k)
                   for k in before.as_dict() if k not in changed)
