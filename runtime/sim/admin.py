"""SGLang's operator endpoints a bench/gpu experiment uses: ``/flush_cache``, ``/v1/loads``, ``/abort_request``.

bench/gpu/ctl.py's ``used`` (the KV-leak check of every greedy run on the GPU
machine) flushes the radix cache, then reads ``num_used_tokens`` from
``/v1/loads``: 0 when nothing leaked. The simulator answers both in SGLang
0.5.17's shapes (``entrypoints/http_server.py``, ``entrypoints/v1_loads.py``,
``managers/load_snapshot.py``), so that check runs in a dry run too and reads
the simulated pool: the engine's context tokens, which must come back to 0
once every request has ended. The simulator has no radix cache, so a flush has
nothing to drop; it is refused while requests run or wait, as SGLang's is.
interleave.py ends every load with ``/abort_request`` ``{"abort_all": true}``:
the requests end at once, each answering what it has with ``finish_reason``
abort, so the next window starts on an empty server, as on the GPU.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aiohttp import web

from specctl.runtime.sim import readouts

if TYPE_CHECKING:
    from specctl.runtime.sim.server import SimServer

FLUSHED = ("Cache flushed.\nPlease check backend logs for more details. "
           "(When there are running or waiting requests, the operation will not be performed.)\n")
NOT_FLUSHED = "Flush cache failed.\n"
SECTIONS = frozenset({"core", "memory", "spec", "lora", "disagg", "queues", "all"})  # LoadSnapshot.VALID_SECTIONS


def add_routes(app: web.Application, server: SimServer) -> None:
    """Register ``/flush_cache`` (GET and POST, as SGLang), ``/v1/loads`` and ``/abort_request``."""

    async def flush_cache(_: web.Request) -> web.Response:
        idle = not server.engine.running and not server.engine.queue
        return web.Response(text=FLUSHED if idle else NOT_FLUSHED, status=200 if idle else 400)

    async def loads(request: web.Request) -> web.Response:
        include = request.query.get("include")
        sections = {s.strip() for s in include.split(",")} if include else None
        if sections is not None and not sections <= SECTIONS:
            return web.json_response({"detail": f"Invalid include sections: {sections - SECTIONS}. "
                                                f"Valid options: {sorted(SECTIONS)}"}, status=400)
        rank = request.query.get("dp_rank")
        rows = [load_snapshot(server)] if rank in (None, "0") else []
        if request.query.get("format") == "prometheus":
            return web.Response(text=prometheus(rows), content_type="text/plain", charset="utf-8")
        return web.json_response({"timestamp": datetime.now(UTC).isoformat(),
                                  "version": readouts.SGLANG_VERSION,
                                  "accelerator": server.cfg.preset.gpu.name,
                                  "num_accelerators": server.cfg.preset.tp_size, "loads": rows})

    async def abort_request(request: web.Request) -> web.Response:
        try:
            body = json.loads(await request.read() or b"{}")
        except (ValueError, UnicodeDecodeError):
            body = None
        rid = body.get("rid", "") if isinstance(body, dict) else None
        abort_all = body.get("abort_all", False) if isinstance(body, dict) else None
        if not isinstance(rid, str) or not isinstance(abort_all, bool):
            return web.json_response({"error": 'body must be {"rid": "...", "abort_all": false}'}, status=400)
        server.abort_requests(rid, abort_all)
        return web.Response(status=200)

    app.router.add_post("/abort_request", abort_request)
    app.router.add_route("GET", "/flush_cache", flush_cache)
    app.router.add_route("POST", "/flush_cache", flush_cache)
    app.router.add_get("/v1/loads", loads)


def load_snapshot(server: SimServer) -> dict[str, Any]:
    """One DP rank's core load keys (LoadSnapshot's scalar fields), from the simulated engine."""
    e = server.engine
    used = e.ctx_tokens
    waiting = sum(r.input_len for r in e.queue)
    return {
        "timestamp": round(e.now, 3), "dp_rank": 0,
        "num_running_reqs": len(e.running), "num_waiting_reqs": len(e.queue),
        "num_waiting_uncached_tokens": waiting, "num_used_tokens": used,
        "num_total_tokens": used, "num_active_tokens": used,
        "max_total_num_tokens": e.kv_pool_tokens, "max_running_requests": e.max_running,
        "token_usage": round(e.token_usage(), 4), "gen_throughput": round(e.gen_throughput(), 2),
        "cache_hit_rate": 0.0, "utilization": round(server.pacer.busy_fraction(e.now), 4),
        "total_prefill_uncached_tokens": e.prefill_tokens_total, "total_prefill_busy_us": 0,
        "decode_moments": None,
    }


def prometheus(rows: list[dict[str, Any]]) -> str:
    """``format=prometheus``: every numeric key a gauge ``sglang_KEY{dp_rank="R"}``, as v1_loads formats it."""
    lines: list[str] = []
    for key in (rows[0] if rows else {}):
        if key == "dp_rank":
            continue
        samples = [(r["dp_rank"], r[key]) for r in rows if isinstance(r[key], (int, float))]
        if samples:
            lines.append(f"# TYPE sglang_{key} gauge")
            lines += [f'sglang_{key}{{dp_rank="{rank}"}} {value}' for rank, value in samples]
    return "\n".join(lines) + "\n"
