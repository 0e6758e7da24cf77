"""The simulator's HTTP routes: SGLang's endpoints and its own, over a :class:`SimServer`.

Every failure is a JSON answer (client errors 4xx, anything unexpected a 500
without a traceback), as a tool that parses SGLang's errors expects. The
handlers only read the server or queue work into it (server.py holds the
engine, pacing.py paces it); api.py and admin.py add the OpenAI-compatible and the
KV-pool endpoints.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics

from specctl.runtime.sim import admin, api, readouts
from specctl.runtime.sim.body import read_json
from specctl.runtime.sim.generate import BadRequest, Job, client_rid, generate_answer, parse_generate, split_batch
from specctl.runtime.sim.load import parse_load
from specctl.runtime.sim.openai_request import ApiError, error_response
from specctl.runtime.sim.sampling import Stop
from specctl.runtime.sim.server import Overloaded, Piece, SimServer
from specctl.runtime.sim.sse import generate_stream

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


@web.middleware
async def _json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure is a JSON answer: client errors 4xx, anything unexpected a 500 without a traceback."""
    try:
        return await handler(request)
    except BadRequest as exc:
        if request.path == "/generate":  # http_server's _create_error_response for a ValueError
            return web.json_response({"error": {"message": str(exc)}}, status=400)
        return _error(400, str(exc))
    except Overloaded as exc:  # SGLang: an HTTPException(503) from the scheduler's abort
        if request.path.startswith("/v1/"):
            return error_response(ApiError(str(exc), status=503, kind="503"))
        return web.json_response({"detail": str(exc)}, status=503)
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
    return await read_json(request)


class _Output:
    """One /generate request's output so far, shaped as SGLang's answer."""

    def __init__(self, server: SimServer, job: Job) -> None:
        self.server, self.job = server, job
        self.source = server.source(job)
        self.t0 = server.engine.now
        self.ids: list[int] = []
        self.text: list[str] = []
        self.logprobs: list[tuple[float, list[tuple[int, float]]]] | None = [] if job.logprobs is not None \
            else None
        self.last: Piece | None = None

    def pieces(self, rid: str | None, stream: bool) -> AsyncIterator[Piece]:
        job = self.job
        return self.server.run(job.prompt_tokens, self.server.new_limit(job.prompt_tokens, job.max_new), self.source,
                               stop=Stop(job.stop), eos=job.eos, rid=rid, stream=stream, follow=stream)

    def note(self, piece: Piece) -> dict[str, Any]:
        self.ids.extend(piece.ids)
        self.text.append(piece.text)
        if self.logprobs is not None:
            self.logprobs.extend(self.source.logprobs(piece.ids, self.job.logprobs or 0))
        self.last = piece
        return self.answer()

    def answer(self) -> dict[str, Any]:
        p = self.last
        out = generate_answer(self.job.prompt_tokens, list(self.ids), "".join(self.text),
                              p.finish if p else None, p.accept if p else None, self.server.engine.now - self.t0,
                              p.verifies if p else 0, self.logprobs)
        return self.server.answer(out)

    async def whole(self, rid: str | None) -> dict[str, Any]:
        async for piece in self.pieces(rid, stream=False):
            self.note(piece)
        return self.answer()


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
        return web.json_response(readouts.server_info(server))

    async def get_internal_state(_: web.Request) -> web.Response:
        return web.json_response([readouts.internal_state(server)])

    async def set_internal_state(request: web.Request) -> web.Response:
        return web.json_response(server.set_internal_state(await _json_body(request)))

    async def metrics(request: web.Request) -> web.Response:
        """Prometheus text (version 0.0.4) by default; OpenMetrics when the Accept header asks for it."""
        if "application/openmetrics-text" in request.headers.get("Accept", ""):
            body, ctype = openmetrics.generate_latest(server.registry), openmetrics.CONTENT_TYPE_LATEST
        else:
            body, ctype = generate_latest(server.registry), CONTENT_TYPE_LATEST
        return web.Response(body=body, headers={"Content-Type": ctype})

    async def generate(request: web.Request) -> web.StreamResponse:
        if not server.ready:
            return _error(503, "starting")
        body = await _json_body(request)
        batch = split_batch(body)
        if batch is not None:
            jobs = [parse_generate(one) for one in batch]
            for job in jobs:
                server.check(job)
            server.admit(len(jobs))
            return web.json_response(list(await asyncio.gather(*(_Output(server, job).whole(None) for job in jobs))))
        job = parse_generate(body)
        server.check(job)
        out = _Output(server, job)
        if body.get("stream"):
            if job.max_new != 0:
                server.admit()
            return await generate_stream(request, out.pieces(client_rid(body), stream=True), out.note)
        return web.json_response(await out.whole(client_rid(body)))

    async def ready(_: web.Request) -> web.Response:
        return web.Response(status=200 if server.ready else 503)

    async def get_load(_: web.Request) -> web.Response:
        """SGLang 0.5.17's /get_load (what the router reads): one row per DP rank."""
        e = server.engine
        used = e.ctx_tokens
        return web.json_response([{"dp_rank": 0, "num_reqs": len(e.running) + len(e.queue),
                                   "num_waiting_reqs": len(e.queue), "num_tokens": used, "num_pending_tokens": 0,
                                   "ts_tic": time.perf_counter()}])

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

    async def sim_load(_: web.Request) -> web.Response:
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
    app.router.add_get("/sim/load", sim_load)
    app.router.add_get("/get_load", get_load)
    app.router.add_get("/ready", ready)
    app.router.add_get("/ping", ready)  # SageMaker's: 200 when healthy (the simulator never pauses)
    app.router.add_post("/sim/load", set_load)
    app.router.add_post("/sim/stall", set_stall)
    api.add_routes(app, server)  # /v1/*, /model_info and the old /get_* names (api.py)
    admin.add_routes(app, server)  # /flush_cache and /v1/loads: the KV pool as an experiment reads it (admin.py)
    return app
