"""Reading an OpenAI-compatible request as SGLang 0.5.23 reads it: the body, its prompts or messages, and the
sampling parameters completions and chat share, with SGLang's checks and its error answer.

A client mistake is an ``ApiError``, answered by ``error_response`` in the shape of SGLang's
ErrorResponse (``entrypoints/openai/protocol.py``); a pydantic-style check is ``validation_error``
(SGLang's RequestValidationError handler: 400, type "Bad Request"). api.py turns what is read here
into the simulated requests it runs.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from specctl.runtime.sim.body import read_json
from specctl.runtime.sim.generate import MAX_BATCH, BadRequest, Job, check_sampling, check_seed, check_stop, prompt_len

DEFAULT_MAX_TOKENS = 16  # CompletionRequest's default
MESSAGE_OVERHEAD_TOKENS = 4  # a chat template's role markers per message, roughly


class ApiError(Exception):
    """A client error, answered as SGLang's ErrorResponse."""

    def __init__(self, message: str, status: int = 400, param: str | None = None,
                 kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.message, self.status, self.param, self.kind = message, status, param, kind


def error_response(exc: ApiError) -> web.Response:
    return web.json_response({"object": "error", "message": exc.message, "type": exc.kind, "param": exc.param,
                              "code": exc.status}, status=exc.status)


def validation_error(param: str, message: str) -> ApiError:
    """What SGLang's RequestValidationError handler answers (400, type "Bad Request") for a pydantic check."""
    return ApiError(f"Value error, {message}", param=None, kind="Bad Request")


async def read_body(request: web.Request) -> dict[str, Any]:
    try:
        body = await read_json(request)
    except BadRequest as exc:
        raise ApiError(str(exc)) from None
    if not isinstance(body, dict):
        raise ApiError("body must be a JSON object")
    return body


def common_job(body: dict[str, Any], max_new: int | None) -> Job:
    """The parameters completions and chat share, checked as SGLang checks them."""
    temperature = body.get("temperature", 1.0)
    top_p = body.get("top_p", 1.0)
    for name, value in (("temperature", temperature), ("top_p", top_p)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise validation_error(name, f"{name} must be a number")
    temperature = 1.0 if temperature is None else float(temperature)
    check_sampling(temperature, 1.0 if top_p is None else float(top_p))
    stop = check_stop(body.get("stop"))
    seed = check_seed(body.get("seed"), "seed")
    return Job(0, "", max_new, greedy=temperature == 0.0, seed=seed, stop=stop,
               ignore_eos=bool(body.get("ignore_eos")))


def read_prompts(prompt: Any) -> list[tuple[int, str, str | None, tuple[int, ...] | None]]:
    """An OpenAI ``prompt`` as its prompts: (tokens, key, text, ids) each. A string, a list of ids, a list of
    strings or a list of lists of ids (a batch)."""
    if isinstance(prompt, str):
        batch: list[Any] = [prompt]
    elif isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
        batch = [prompt]
    elif isinstance(prompt, list) and prompt and (all(isinstance(p, str) for p in prompt)
                                                  or all(isinstance(p, list) for p in prompt)):
        batch = prompt
    elif isinstance(prompt, list) and not prompt:
        raise ApiError("Prompt cannot be empty")
    else:
        raise validation_error("prompt", "prompt must be a string, a list of strings, a list of token ids or "
                                         "a list of lists of token ids")
    if len(batch) > MAX_BATCH:
        raise ApiError(f"a batch is at most {MAX_BATCH} prompts", param="prompt")
    if all(not p for p in batch):
        raise ApiError("Prompt cannot be empty")
    out = []
    for p in batch:
        if isinstance(p, str):
            out.append((prompt_len(p), json.dumps(p), p, None))
        elif isinstance(p, list) and p and all(type(t) is int for t in p):
            out.append((len(p), json.dumps(p), None, tuple(p)))
        else:
            raise ApiError("each prompt must be a non-empty string or list of token ids", param="prompt")
    return out


ROLES = ("system", "assistant", "user", "tool", "function", "developer")


def read_chat_prompt(messages: Any) -> tuple[int, str]:
    """A chat's prompt tokens and key: its messages' text, template markers per message."""
    if not isinstance(messages, list) or not messages:
        raise ApiError("messages must be a non-empty list", param="messages")
    total = 0
    texts = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise validation_error("messages", "each message must be an object with a string 'role'")
        if message["role"].lower() not in ROLES:
            raise validation_error("messages", f"'role' must be one of {list(ROLES)} (case-insensitive).")
        content = message.get("content")
        if isinstance(content, list):  # content parts: the text ones count
            parts = []
            for part in content:
                if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                    raise validation_error("messages", "each content part must be an object with a string 'type'")
                if part["type"] == "text":
                    if not isinstance(part.get("text"), str):
                        raise validation_error("messages", "a text content part needs a string 'text'")
                    parts.append(part["text"])
                else:
                    raise ApiError(f"content parts of type {part['type']!r} are not supported: the simulated "
                                   "model reads text only", param="messages")
            content = "\n".join(parts)
        if content is not None and not isinstance(content, str):
            raise validation_error("messages", "message content must be a string or a list of content parts")
        texts.append([message["role"], content or ""])
        total += MESSAGE_OVERHEAD_TOKENS + -(-len(content or "") // 4)
    return total, json.dumps(texts)

