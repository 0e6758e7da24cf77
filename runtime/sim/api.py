"""The endpoints real clients use, in SGLang 0.5.23's shapes: OpenAI-compatible, streaming, model info.

Load tools and dashboards speak to SGLang through ``/v1/models``,
``/v1/completions`` and ``/v1/chat/completions`` (``stream: true`` as
server-sent events), ``/generate`` with ``stream`` and the old
``/get_model_info`` / ``/get_server_info`` names. The shapes follow SGLang's
``entrypoints/openai/protocol.py`` and ``http_server.py`` (0.5.23); the timing
is the simulator's: a request's tokens appear as the performance model
produces them, tick by tick, so a client measures the simulated server's TTFT
and inter-token latency. Kept apart from server.py's handlers so each side
can change without the other.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from specctl.runtime.sim.server import SimServer

CHARS_PER_TOKEN = 4  # the simulator has no tokenizer: about four characters a token, as for /generate's text
MESSAGE_OVERHEAD_TOKENS = 4  # a chat template's role markers per message, roughly
DEFAULT_MAX_TOKENS = 16  # SGLang's CompletionRequest default, as OpenAI's
DEFAULT_CHAT_MAX_TOKENS = 128  # SGLang's chat default is "until EOS"; the simulator has no EOS, so this
CONTEXT_LEN = 131_072  # Llama 3.1's, what /v1/models reports as max_model_len


class ApiError(Exception):
    """A client error, answered as SGLang's ErrorResponse."""

    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.message, self.status, self.param = message, status, param


def error_response(exc: ApiError) -> web.Response:
    kind = "BadRequestError" if exc.status == 400 else "ServiceUnavailableError"
    return web.json_response({"object": "error", "message": exc.message, "type": kind, "param": exc.param,
                              "code": exc.status}, status=exc.status)


_WORDS = ("the", "model", "drafts", "tokens", "and", "verifies", "them", "in", "one", "pass")


def words(ids: list[int]) -> str:
    """Stand-in text for token ids: one word a token (the simulator has no tokenizer)."""
    return " ".join(_WORDS[i % len(_WORDS)] for i in ids)


def add_routes(app: web.Application, server: SimServer) -> None:
    """Register the client-facing endpoints on the simulator's application."""
    api = _Api(server)
    app.router.add_get("/v1/models", api.models)
    app.router.add_post("/v1/completions", api.completions)
    app.router.add_post("/v1/chat/completions", api.chat)
    app.router.add_get("/model_info", api.model_info)
    app.router.add_get("/get_model_info", api.model_info)  # the old name, still answered by 0.5.23
    app.router.add_get("/get_server_info", api.server_info)


class _Api:
    def __init__(self, server: SimServer) -> None:
        self.server = server

    @property
    def served(self) -> str:
        return self.server.cfg.preset.model_path

    # -- model and server info -------------------------------------------------
    async def models(self, _: web.Request) -> web.Response:
        card = {"id": self.served, "object": "model", "created": int(time.time()), "owned_by": "sglang",
                "root": self.served, "parent": None, "max_model_len": CONTEXT_LEN}
        return web.json_response({"object": "list", "data": [card]})

    async def model_info(self, _: web.Request) -> web.Response:
        p = self.server.cfg.preset
        return web.json_response({
            "model_path": p.model_path, "served_model_name": p.model_path, "tokenizer_path": p.model_path,
            "is_generation": True, "preferred_sampling_params": None, "weight_version": "default",
            "load_format": "auto", "reasoning_parser": None, "tool_call_parser": None,
            "disaggregation_mode": "null", "has_image_understanding": False, "has_audio_understanding": False,
            "model_type": None, "architectures": None,
        })

    async def server_info(self, _: web.Request) -> web.Response:
        return web.json_response(self.server.server_info())

    # -- OpenAI-compatible generation -----------------------------------------
    async def completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await _body(request)
            prompt = _prompt_tokens(body.get("prompt"), "prompt")
            max_new = _max_tokens(body, DEFAULT_MAX_TOKENS)
            self._check_ready()
            return await self._answer(request, body, prompt, max_new, chat=False)
        except ApiError as exc:
            return error_response(exc)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await _body(request)
            prompt = _chat_tokens(body.get("messages"))
            max_new = _max_tokens(body, DEFAULT_CHAT_MAX_TOKENS)
            self._check_ready()
            return await self._answer(request, body, prompt, max_new, chat=True)
        except ApiError as exc:
            return error_response(exc)

    def _check_ready(self) -> None:
        if not self.server.ready:
            raise ApiError("the server is starting", status=503)

    async def _answer(self, request: web.Request, body: dict[str, Any], prompt: int, max_new: int,
                      *, chat: bool) -> web.StreamResponse:
        if problem := self.server.fit_problem(prompt, max_new):
            raise ApiError(problem)
        model = body.get("model") if isinstance(body.get("model"), str) else self.served
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        if body.get("stream"):
            options = body.get("stream_options")
            usage = isinstance(options, dict) and bool(options.get("include_usage"))
            return await self._stream(request, rid, created, model, prompt, max_new, chat=chat, usage=usage)
        ids: list[int] = []
        async for new in self.server.tokens(prompt, max_new):
            ids.extend(new)
        text = words(ids)
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": "length", "matched_stop": None}
        if chat:
            choice["message"] = {"role": "assistant", "content": text, "reasoning_content": None}
        else:
            choice["text"] = text
        return web.json_response({"id": rid, "object": "chat.completion" if chat else "text_completion",
                                  "created": created, "model": model, "choices": [choice],
                                  "usage": _usage(prompt, len(ids)), "metadata": None})

    async def _stream(self, request: web.Request, rid: str, created: int, model: str, prompt: int,
                      max_new: int, *, chat: bool, usage: bool) -> web.StreamResponse:
        """SSE as SGLang sends it: (chat: a role chunk,) content chunks, a finish chunk, usage if asked, [DONE]."""
        response = await _sse(request)
        kind = "chat.completion.chunk" if chat else "text_completion"

        def chunk(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
            return {"id": rid, "object": kind, "created": created, "model": model, "choices": choices,
                    "usage": None, **extra}

        def piece(text: str | None, finish: str | None, role: str | None = None) -> dict[str, Any]:
            if chat:
                delta = {} if text is None and role is None else {"role": role, "content": text,
                                                                 "reasoning_content": None}
                return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "matched_stop": None}
            return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish, "matched_stop": None}

        if chat:
            await _send(response, chunk([piece("", None, role="assistant")]))
        produced = 0
        async for new in self.server.tokens(prompt, max_new):
            text = words(new)
            await _send(response, chunk([piece(text if produced == 0 else " " + text, None)]))
            produced += len(new)
        await _send(response, chunk([piece(None if chat else "", "length")]))
        if usage:
            await _send(response, chunk([], usage=_usage(prompt, produced)))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


# -- /generate with stream (SGLang's native API) ---------------------------------
async def generate_stream(request: web.Request, server: SimServer, prompt: int, max_new: int,
                          answer: Any, greedy: str | None = None, rid: str | None = None) -> web.StreamResponse:
    """``data: {...}`` per chunk with the text so far (SGLang's default, not incremental), then ``[DONE]``.

    ``answer(ids, req, finished)`` builds the same object as the non-streamed /generate.
    """
    response = await _sse(request)
    ids: list[int] = []
    async for new in server.tokens(prompt, max_new, greedy, rid):
        ids.extend(new)
        await _send(response, answer(list(ids), len(ids) == max_new))
    if max_new == 0:
        await _send(response, answer([], True))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def _sse(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    return response


async def _send(response: web.StreamResponse, obj: dict[str, Any]) -> None:
    await response.write(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


# -- request bodies ----------------------------------------------------------------
async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.read() or b"null")
    except (ValueError, UnicodeDecodeError):
        raise ApiError("body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ApiError("body must be a JSON object")
    if body.get("n", 1) != 1:
        raise ApiError("the simulator answers n=1 only", param="n")
    return body


def _prompt_tokens(prompt: Any, param: str) -> int:
    """Tokens in an OpenAI ``prompt``: a string, a list of token ids, or a list of one of either."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str) and prompt:
        return max(1, -(-len(prompt) // CHARS_PER_TOKEN))
    if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
        return len(prompt)
    raise ApiError(f"{param} must be a non-empty string or list of token ids (batches are not supported)",
                   param=param)


def _chat_tokens(messages: Any) -> int:
    if not isinstance(messages, list) or not messages:
        raise ApiError("messages must be a non-empty list", param="messages")
    total = 0
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError("each message needs a role", param="messages")
        content = message.get("content")
        if isinstance(content, list):  # content parts: count the text ones
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        if content is not None and not isinstance(content, str):
            raise ApiError("message content must be a string or a list of parts", param="messages")
        total += MESSAGE_OVERHEAD_TOKENS + -(-len(content or "") // CHARS_PER_TOKEN)
    return total


def _max_tokens(body: dict[str, Any], default: int) -> int:
    for param in ("max_completion_tokens", "max_tokens"):
        value = body.get(param)
        if value is not None:
            if type(value) is not int or value < 1:
                raise ApiError(f"{param} must be a positive integer", param=param)
            return value
    return default


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
            "prompt_tokens_details": None, "reasoning_tokens": 0, "completion_tokens_details": None}
