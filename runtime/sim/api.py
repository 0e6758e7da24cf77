"""The endpoints real clients use, in SGLang 0.5.23's shapes: OpenAI-compatible, streaming, model info.

Load tools and dashboards speak to SGLang through ``/v1/models``,
``/v1/completions`` and ``/v1/chat/completions`` (``stream: true`` as
server-sent events), ``/generate`` with ``stream`` and the old
``/get_model_info`` / ``/get_server_info`` names. The shapes and the checks
follow SGLang's ``entrypoints/openai/protocol.py``, ``serving_completions.py``,
``serving_chat.py`` and ``http_server.py`` (0.5.23); the timing is the
simulator's: a request's tokens appear as the performance model produces
them, tick by tick, so a client measures the simulated server's TTFT and
inter-token latency. Every output (``n`` choices, batch prompts) is its own
simulated request in the batch. docs/simulator.md ("Conformance with SGLang") lists each parameter.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from aiohttp import web

from specctl.runtime.sim.body import read_json
from specctl.runtime.sim.generate import (
    MAX_BATCH,
    MAX_TOP_LOGPROBS,
    BadRequest,
    Job,
    check_sampling,
    check_seed,
    check_stop,
    prompt_len,
)
from specctl.runtime.sim.sampling import Stop, TokenSource, prompt_ids, token_text, words

if TYPE_CHECKING:
    from specctl.runtime.sim.server import Piece, SimServer

__all__ = ["ApiError", "add_routes", "error_response", "generate_stream", "words"]

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


def add_routes(app: web.Application, server: SimServer) -> None:
    """Register the client-facing endpoints on the simulator's application."""
    api = _Api(server)
    app.router.add_get("/v1/models", api.models)
    app.router.add_get("/v1/models/{model:.+}", api.model)
    app.router.add_post("/v1/completions", api.completions)
    app.router.add_post("/v1/chat/completions", api.chat)
    app.router.add_get("/model_info", api.model_info)
    app.router.add_get("/get_model_info", api.model_info)  # the old name, still answered by 0.5.23
    app.router.add_get("/get_server_info", api.server_info)


@dataclass
class _Choice:
    """What one output has produced so far."""

    index: int
    job: Job
    source: TokenSource
    text: list[str] = field(default_factory=list)
    tokens: int = 0
    finish: dict[str, Any] | None = None
    logprobs: list[tuple[float, list[tuple[int, float]]]] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)


def finish_reason(finish: dict[str, Any] | None) -> tuple[str | None, Any]:
    """SGLang's OpenAI ``finish_reason`` and ``matched_stop`` from meta_info's finish_reason."""
    if finish is None:
        return None, None
    kind = finish.get("type")
    if kind == "stop":
        return "stop", finish.get("matched")
    if kind == "abort":
        return "abort", None
    return "length", None


class _Api:
    def __init__(self, server: SimServer) -> None:
        self.server = server

    # -- model and server info -------------------------------------------------
    def _card(self, model: str) -> dict[str, Any]:
        return {"id": model, "object": "model", "created": int(time.time()), "owned_by": "sglang",
                "root": model, "parent": None, "max_model_len": self.server.context_length}

    async def models(self, _: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [self._card(self.server.served_model_name)]})

    async def model(self, request: web.Request) -> web.Response:
        model = request.match_info["model"]
        if model != self.server.served_model_name:
            return web.json_response({"error": {"message": f"The model '{model}' does not exist",
                                                "type": "invalid_request_error", "param": "model",
                                                "code": "model_not_found"}}, status=404)
        return web.json_response(self._card(model))

    async def model_info(self, _: web.Request) -> web.Response:
        path = self.server.model_path
        return web.json_response({
            "model_path": path, "served_model_name": self.server.served_model_name, "tokenizer_path": path,
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
            jobs = self._completion_jobs(body)
            return await self._answer(request, body, jobs, chat=False)
        except ApiError as exc:
            return error_response(exc)
        except BadRequest as exc:
            return error_response(ApiError(str(exc)))

    async def chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await _body(request)
            jobs = self._chat_jobs(body)
            return await self._answer(request, body, jobs, chat=True)
        except ApiError as exc:
            return error_response(exc)
        except BadRequest as exc:
            return error_response(ApiError(str(exc)))

    def _completion_jobs(self, body: dict[str, Any]) -> list[Job]:
        prompts = _prompts(body.get("prompt"))
        max_tokens = body.get("max_tokens", DEFAULT_MAX_TOKENS)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            raise validation_error("max_tokens", "max_tokens must be an integer")
        if max_tokens <= 0:
            raise validation_error("max_tokens", "max_tokens must be positive")
        logprobs = body.get("logprobs")
        if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int)
                                     or not 0 <= logprobs <= MAX_TOP_LOGPROBS):
            raise ApiError(f"logprobs must be an integer 0..{MAX_TOP_LOGPROBS}", param="logprobs")
        base = _common(body, max_tokens)
        return [replace(base, prompt_tokens=n, prompt_key=key, prompt_text=text, prompt_ids=ids, logprobs=logprobs)
                for n, key, text, ids in prompts]

    def _chat_jobs(self, body: dict[str, Any]) -> list[Job]:
        tokens, key = _chat_prompt(body.get("messages"))
        mct, mt = body.get("max_completion_tokens"), body.get("max_tokens")
        for name, value in (("max_completion_tokens", mct), ("max_tokens", mt)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise validation_error(name, f"{name} must be an integer")
        limit = mct or mt  # as serving_chat: a 0 falls through to the other (and None or 0 is 0)
        ctx = self.server.context_length
        if limit and limit > ctx:
            raise ApiError(f"max_completion_tokens is too large: {limit}."
                           f"This model supports at most {ctx} completion tokens.")
        if limit is not None and limit < 0:
            raise ApiError(f"max_new_tokens must be at least 0, got {limit}.")
        top = None
        if body.get("logprobs"):
            top = body.get("top_logprobs") or 0
            if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS:
                raise ApiError(f"top_logprobs must be an integer 0..{MAX_TOP_LOGPROBS}", param="top_logprobs")
        job = replace(_common(body, limit), prompt_tokens=tokens, prompt_key=key, logprobs=top)
        return [job]

    async def _answer(self, request: web.Request, body: dict[str, Any], jobs: list[Job], *,
                      chat: bool) -> web.StreamResponse:
        n = body.get("n", 1)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ApiError("n must be a positive integer", param="n")
        if n * len(jobs) > MAX_BATCH:
            raise ApiError(f"n times the prompts must be at most {MAX_BATCH}", param="n")
        if not self.server.ready:
            raise ApiError("the server is starting", status=503, kind="ServiceUnavailableError")
        for job in jobs:
            self.server.check(job)
        if any(job.max_new != 0 for job in jobs):
            self.server.admit(n * len(jobs))
        model = body.get("model") if isinstance(body.get("model"), str) else self.server.served_model_name
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        # as SGLang: prompt i's outputs are choices i*n .. i*n+n-1
        choices = [_Choice(i * n + k, job, self.server.source(job, k)) for i, job in enumerate(jobs) for k in range(n)]
        echo = bool(body.get("echo")) and not chat
        if body.get("stream"):
            options = body.get("stream_options")
            options = options if isinstance(options, dict) else {}
            return await self._stream(request, choices, rid, created, model, chat=chat, echo=echo,
                                      usage=bool(options.get("include_usage")),
                                      continuous=bool(options.get("continuous_usage_stats")))
        await asyncio.gather(*(self._collect(c, stream=False) for c in choices))
        out = []
        for c in choices:
            reason, matched = finish_reason(c.finish)
            text = "".join(c.text)
            if echo:
                text = _echo_text(c.job) + text
            choice: dict[str, Any] = {"index": c.index, "logprobs": self._logprobs(c, chat, echo),
                                      "finish_reason": reason, "matched_stop": matched}
            if chat:
                choice["message"] = {"role": "assistant", "content": text, "reasoning_content": None,
                                     "tool_calls": None}
            else:
                choice["text"] = text
            out.append(choice)
        prompt = sum(job.prompt_tokens for job in jobs)  # each prompt once, however many choices it has
        return web.json_response({"id": rid, "object": "chat.completion" if chat else "text_completion",
                                  "created": created, "model": model, "choices": out,
                                  "usage": _usage(prompt, sum(c.tokens for c in choices)), "metadata": None})

    async def _collect(self, c: _Choice, *, stream: bool) -> None:
        async for piece in self.server.run(c.job.prompt_tokens,
                                           self.server.new_limit(c.job.prompt_tokens, c.job.max_new), c.source,
                                           stop=_stop(c.job), eos=c.job.eos, stream=stream, follow=False):
            self._note(c, piece)

    def _note(self, c: _Choice, piece: Piece) -> None:
        c.text.append(piece.text)
        c.tokens += len(piece.ids)
        c.finish = piece.finish
        if c.job.logprobs is not None:
            c.ids.extend(piece.ids)
            c.logprobs.extend(c.source.logprobs(piece.ids, c.job.logprobs))

    def _logprobs(self, c: _Choice, chat: bool, echo: bool, start: int = 0) -> dict[str, Any] | None:
        if c.job.logprobs is None:
            return None
        ids, lps = c.ids[start:], c.logprobs[start:]
        if chat:
            return {"content": [_chat_logprob(start + i, t, lp, top) for i, (t, (lp, top)) in
                                enumerate(zip(ids, lps))]}
        tokens = [token_text(start + i, t) for i, t in enumerate(ids)]
        token_lps: list[float | None] = [lp for lp, _ in lps]
        tops: list[dict[str, float] | None] = [{token_text(start + i, a): v for a, v in top} if c.job.logprobs
                                               else None for i, (_, top) in enumerate(lps)]
        if echo and start == 0:  # the prompt's tokens first; the first has no logprob, as in SGLang
            pids = list(c.job.prompt_ids or prompt_ids(c.job.prompt_text or ""))
            plps = TokenSource(c.source.key + "/prompt", greedy=True).logprobs(pids, c.job.logprobs)
            ptexts = [token_text(i, t) for i, t in enumerate(pids)]
            tokens = ptexts + tokens
            token_lps = [None] + [lp for lp, _ in plps[1:]] + token_lps
            tops = [None] + [{token_text(i + 1, a): v for a, v in top} for i, (_, top) in
                             enumerate(plps[1:])] + tops
        offsets, at = [], 0
        for t in tokens:
            offsets.append(at)
            at += len(t)
        return {"text_offset": offsets, "token_logprobs": token_lps, "tokens": tokens, "top_logprobs": tops}

    async def _stream(self, request: web.Request, choices: list[_Choice], rid: str, created: int, model: str, *,
                      chat: bool, echo: bool, usage: bool, continuous: bool) -> web.StreamResponse:
        """SSE as SGLang sends it: (chat: a role chunk per choice,) content chunks, a finish chunk per choice,
        usage if asked (per chunk too with continuous_usage_stats), then [DONE]."""
        kind = "chat.completion.chunk" if chat else "text_completion"
        prompt = sum({id(c.job): c.job.prompt_tokens for c in choices}.values())
        queue: asyncio.Queue[tuple[_Choice, Piece | None]] = asyncio.Queue()

        async def feed(c: _Choice) -> None:
            try:
                async for piece in self.server.run(c.job.prompt_tokens,
                                                   self.server.new_limit(c.job.prompt_tokens, c.job.max_new),
                                                   c.source, stop=_stop(c.job), eos=c.job.eos, stream=True):
                    await queue.put((c, piece))
            finally:
                await queue.put((c, None))

        def chunk(choice_list: list[dict[str, Any]], usage_obj: dict[str, Any] | None = None) -> dict[str, Any]:
            return {"id": rid, "object": kind, "created": created, "model": model, "choices": choice_list,
                    "usage": usage_obj}

        def running_usage() -> dict[str, Any] | None:
            return _usage(prompt, sum(c.tokens for c in choices)) if continuous else None

        response = await _sse(request)
        tasks = [asyncio.create_task(feed(c)) for c in choices]
        try:
            if chat:
                for c in choices:
                    await _send(response, chunk([{"index": c.index, "delta": {"role": "assistant", "content": "",
                                                                              "reasoning_content": None},
                                                  "logprobs": None, "finish_reason": None, "matched_stop": None}]))
            open_ = len(choices)
            first = {c.index: True for c in choices}
            while open_:
                c, piece = await queue.get()
                if piece is None:
                    open_ -= 1
                    continue
                start = c.tokens
                self._note(c, piece)
                text = piece.text
                if echo and first[c.index]:
                    text = _echo_text(c.job) + text
                first[c.index] = False
                if text or piece.ids:
                    lp = self._logprobs(c, chat, False, start) if c.job.logprobs is not None else None
                    body: dict[str, Any] = {"index": c.index, "logprobs": lp, "finish_reason": None,
                                            "matched_stop": None}
                    if chat:
                        body["delta"] = {"role": None, "content": text, "reasoning_content": None}
                    else:
                        body["text"] = text
                    await _send(response, chunk([body], running_usage()))
                if piece.finish is not None:
                    reason, matched = finish_reason(piece.finish)
                    end: dict[str, Any] = {"index": c.index, "logprobs": None, "finish_reason": reason,
                                           "matched_stop": matched}
                    if chat:
                        end["delta"] = {}
                    else:
                        end["text"] = ""
                    await _send(response, chunk([end], running_usage()))
            if usage:
                await _send(response, chunk([], _usage(prompt, sum(c.tokens for c in choices))))
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return response


# -- /generate with stream (SGLang's native API) ---------------------------------
async def generate_stream(request: web.Request, pieces: AsyncIterator[Piece],
                          answer: Any) -> web.StreamResponse:
    """``data: {...}`` per chunk with everything so far (SGLang's default, not incremental), then ``[DONE]``.

    ``answer(piece)`` notes a piece and builds the same object as the non-streamed /generate.
    """
    response = await _sse(request)
    async for piece in pieces:
        await _send(response, answer(piece))
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
        body = await read_json(request)
    except BadRequest as exc:
        raise ApiError(str(exc)) from None
    if not isinstance(body, dict):
        raise ApiError("body must be a JSON object")
    return body


def _common(body: dict[str, Any], max_new: int | None) -> Job:
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


def _prompts(prompt: Any) -> list[tuple[int, str, str | None, tuple[int, ...] | None]]:
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


def _chat_prompt(messages: Any) -> tuple[int, str]:
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


def _stop(job: Job) -> Stop:
    return Stop(job.stop)


def _echo_text(job: Job) -> str:
    return job.prompt_text if job.prompt_text is not None else words(list(job.prompt_ids or ()))


def _chat_logprob(index: int, token_id: int, lp: float, top: list[tuple[int, float]]) -> dict[str, Any]:
    text = token_text(index, token_id)
    return {"token": text, "bytes": list(text.encode()), "logprob": lp,
            "top_logprobs": [{"token": token_text(index, a), "bytes": list(token_text(index, a).encode()),
                              "logprob": v} for a, v in top]}


def _usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
            "prompt_tokens_details": None, "reasoning_tokens": 0, "completion_tokens_details": None}
