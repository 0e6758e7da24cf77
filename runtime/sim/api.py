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

This module holds the handlers; openai_request.py reads and checks the bodies, openai_answer.py
shapes the answers and sse.py writes the streams.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from aiohttp import web

from specctl.runtime.sim import readouts
from specctl.runtime.sim.generate import MAX_BATCH, MAX_TOP_LOGPROBS, BadRequest, Job
from specctl.runtime.sim.openai_answer import Choice, choice_logprobs, echo_text, finish_reason, note, token_usage
from specctl.runtime.sim.openai_request import (
    DEFAULT_MAX_TOKENS,
    ApiError,
    common_job,
    error_response,
    read_body,
    read_chat_prompt,
    read_prompts,
    validation_error,
)
from specctl.runtime.sim.sampling import Stop
from specctl.runtime.sim.sse import open_stream, send

if TYPE_CHECKING:
    from specctl.runtime.sim.server import Piece, SimServer

__all__ = ["add_routes"]

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
        return web.json_response(readouts.server_info(self.server))

    # -- OpenAI-compatible generation -----------------------------------------
    async def completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await read_body(request)
            jobs = self._completion_jobs(body)
            return await self._answer(request, body, jobs, chat=False)
        except ApiError as exc:
            return error_response(exc)
        except BadRequest as exc:
            return error_response(ApiError(str(exc)))

    async def chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await read_body(request)
            jobs = self._chat_jobs(body)
            return await self._answer(request, body, jobs, chat=True)
        except ApiError as exc:
            return error_response(exc)
        except BadRequest as exc:
            return error_response(ApiError(str(exc)))

    def _completion_jobs(self, body: dict[str, Any]) -> list[Job]:
        prompts = read_prompts(body.get("prompt"))
        max_tokens = body.get("max_tokens", DEFAULT_MAX_TOKENS)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            raise validation_error("max_tokens", "max_tokens must be an integer")
        if max_tokens <= 0:
            raise validation_error("max_tokens", "max_tokens must be positive")
        logprobs = body.get("logprobs")
        if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int)
                                     or not 0 <= logprobs <= MAX_TOP_LOGPROBS):
            raise ApiError(f"logprobs must be an integer 0..{MAX_TOP_LOGPROBS}", param="logprobs")
        base = common_job(body, max_tokens)
        return [replace(base, prompt_tokens=n, prompt_key=key, prompt_text=text, prompt_ids=ids, logprobs=logprobs)
                for n, key, text, ids in prompts]

    def _chat_jobs(self, body: dict[str, Any]) -> list[Job]:
        tokens, key = read_chat_prompt(body.get("messages"))
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
        job = replace(common_job(body, limit), prompt_tokens=tokens, prompt_key=key, logprobs=top)
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
        choices = [Choice(i * n + k, job, self.server.source(job, k)) for i, job in enumerate(jobs) for k in range(n)]
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
                text = echo_text(c.job) + text
            choice: dict[str, Any] = {"index": c.index, "logprobs": choice_logprobs(c, chat, echo),
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
                                  "usage": token_usage(prompt, sum(c.tokens for c in choices)), "metadata": None})

    async def _collect(self, c: Choice, *, stream: bool) -> None:
        async for piece in self.server.run(c.job.prompt_tokens,
                                           self.server.new_limit(c.job.prompt_tokens, c.job.max_new), c.source,
                                           stop=_stop(c.job), eos=c.job.eos, stream=stream, follow=False):
            note(c, piece)

    async def _stream(self, request: web.Request, choices: list[Choice], rid: str, created: int, model: str, *,
                      chat: bool, echo: bool, usage: bool, continuous: bool) -> web.StreamResponse:
        """SSE as SGLang sends it: (chat: a role chunk per choice,) content chunks, a finish chunk per choice,
        usage if asked (per chunk too with continuous_usage_stats), then [DONE]."""
        kind = "chat.completion.chunk" if chat else "text_completion"
        prompt = sum({id(c.job): c.job.prompt_tokens for c in choices}.values())
        queue: asyncio.Queue[tuple[Choice, Piece | None]] = asyncio.Queue()

        async def feed(c: Choice) -> None:
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
            return token_usage(prompt, sum(c.tokens for c in choices)) if continuous else None

        response = await open_stream(request)
        tasks = [asyncio.create_task(feed(c)) for c in choices]
        try:
            if chat:
                for c in choices:
                    await send(response, chunk([{"index": c.index, "delta": {"role": "assistant", "content": "",
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
                note(c, piece)
                text = piece.text
                if echo and first[c.index]:
                    text = echo_text(c.job) + text
                first[c.index] = False
                if text or piece.ids:
                    lp = choice_logprobs(c, chat, False, start) if c.job.logprobs is not None else None
                    body: dict[str, Any] = {"index": c.index, "logprobs": lp, "finish_reason": None,
                                            "matched_stop": None}
                    if chat:
                        body["delta"] = {"role": None, "content": text, "reasoning_content": None}
                    else:
                        body["text"] = text
                    await send(response, chunk([body], running_usage()))
                if piece.finish is not None:
                    reason, matched = finish_reason(piece.finish)
                    end: dict[str, Any] = {"index": c.index, "logprobs": None, "finish_reason": reason,
                                           "matched_stop": matched}
                    if chat:
                        end["delta"] = {}
                    else:
                        end["text"] = ""
                    await send(response, chunk([end], running_usage()))
            if usage:
                await send(response, chunk([], token_usage(prompt, sum(c.tokens for c in choices))))
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return response



def _stop(job: Job) -> Stop:
    return Stop(job.stop)

