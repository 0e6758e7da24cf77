"""The simulator's HTTP routes: SGLang's endpoints and its own, over a :class:`SimServer`.

Every failure is a JSON answer (client errors 4xx, anything unexpected a 500
without a traceback), as a tool that parses SGLang's errors expects. The
handlers only read the server or queue work into it (server.py holds the
engine and its pacing); api.py and admin.py add the OpenAI-compatible and the
KV-pool endpoints.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import generate_latest

from specctl.runtime.sim import admin, api
from specctl.runtime.sim.generate import (
    BadRequest,
    client_rid,
    generate_answer,
    greedy_key,
    parse_generate,
    split_batch,
)
from specctl.runtime.sim.load import parse_load
from specctl.runtime.sim.server import SimServer

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


@web.middleware
async def _json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure is a JSON answer: client errors 4xx, anything unexpected a 500 without a traceback."""
    try:
        return await handler(request)
    except BadRequest as exc:
        return _error(400, str(exc))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, exc.reason)
    except ConnectionAbortedError as exc:
        return _error(503, str(exc))
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return _error(500, f"internal error: {type(exc).__name__}")


async def _json_body(request: web.Request) -> Any:
    try:
        return json.loads(await request.read() or b"null")
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("body is not valid JSON") from None


def build_app(server: SimServer) -> web.Application:
    """The aiohttp application answering SGLang's endpoints and the simulator's own."""
    stall = {"until": 0.0}  # loop time until which the server takes connections and answers nothing

    @web.middleware
    async def stalled(request: web.Request, handler: Handler) -> web.StreamResponse:
        """A stall as SGLang's (a first-use kernel compile, a long prefill): connections are taken,
        answers wait until it ends. The simulator's own /sim/ endpoints still answer, to end one."""
        left = stall["until"] - asyncio.get_running_loop().time()
        if left > 0 and not request.path.startswith("/sim/"):
            await asyncio.sleep(left)
        return await handler(request)

    app = web.Application(middlewares=[_json_errors, stalled], client_max_size=8 * 2**20)

    async def set_stall(request: web.Request) -> web.Response:
        body = await _json_body(request)
        seconds = body.get("seconds") if isinstance(body, dict) else None
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= 3600:
            raise BadRequest('body must be {"seconds": S} with S between 0 (end a stall) and 3600')
        stall["until"] = asyncio.get_running_loop().time() + seconds
        return web.json_response({"seconds": seconds})

    async def health(_: web.Request) -> web.Response:
        server.health_checks += 1
        if not server.ready:
            return _error(503, "starting")
        return web.Response(status=200)

    async def server_info(_: web.Request) -> web.Response:
        return web.json_response(server.server_info())

    async def get_internal_state(_: web.Request) -> web.Response:
        return web.json_response([server.internal_state()])

    async def set_internal_state(request: web.Request) -> web.Response:
        return web.json_response(server.set_internal_state(await _json_body(request)))

    async def metrics(_: web.Request) -> web.Response:
        text = generate_latest(server.registry).decode()
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def generate(request: web.Request) -> web.StreamResponse:
        if not server.ready:
            return _error(503, "starting")
        body = await _json_body(request)
        batch = split_batch(body)
        if batch is not None:
            return web.json_response(await server.generate_batch(batch))
        if isinstance(body, dict) and body.get("stream"):
            return await generate_stream(request, body)
        return web.json_response(await server.generate(body))

    async def generate_stream(request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        prompt, max_new = parse_generate(body)
        if problem := server.fit_problem(prompt, max_new):
            raise BadRequest(problem)
        t0 = server.engine.now

        def answer(ids: list[int], finished: bool) -> dict[str, Any]:
            out = generate_answer(prompt, ids, None, server.engine.now - t0, 0)
            if not finished:
                out["meta_info"]["finish_reason"] = None
            return server.answer(out)

        return await api.generate_stream(request, server, prompt, max_new, answer, greedy_key(body), client_rid(body))

    async def sim_gpus(_: web.Request) -> web.Response:
        return web.json_response(server.gpus.snapshot())

    async def set_failed_gpus(request: web.Request) -> web.Response:
        body = await _json_body(request)
        failed = body.get("failed") if isinstance(body, dict) else None
        if not isinstance(failed, list) or not all(type(i) is int for i in failed):
            raise BadRequest('body must be {"failed": [GPU index, ...]}')
        try:
            server.gpus.fail(frozenset(failed))
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        return web.json_response({"failed": sorted(server.gpus.failed)})

    async def get_load(_: web.Request) -> web.Response:
        return web.json_response({"spec": str(server.driver.spec)})

    async def set_load(request: web.Request) -> web.Response:
        body = await _json_body(request)
        if not isinstance(body, dict) or not isinstance(body.get("spec"), str):
            raise BadRequest('body must be {"spec": "<load spec>"}')
        try:
            spec = parse_load(body["spec"])
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        server.driver.set(spec, server.engine.now)
        return web.json_response({"spec": str(spec)})

    app.router.add_get("/health", health)
    app.router.add_get("/health_generate", health)  # SGLang's runs one token; the simulator's engine is always warm
    app.router.add_get("/server_info", server_info)
    app.router.add_route("GET", "/get_internal_state", get_internal_state)
    app.router.add_route("POST", "/get_internal_state", get_internal_state)
    app.router.add_post("/set_internal_state", set_internal_state)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/generate", generate)
    app.router.add_get("/sim/gpus", sim_gpus)
    app.router.add_post("/sim/gpus", set_failed_gpus)
    app.router.add_get("/sim/load", get_load)
    app.router.add_post("/sim/load", set_load)
    app.router.add_post("/sim/stall", set_stall)
    api.add_routes(app, server)  # /v1/*, /model_info and the old /get_* names (api.py)
    admin.add_routes(app, server)  # /flush_cache and /v1/loads: the KV pool as an experiment reads it (admin.py)
    return app
