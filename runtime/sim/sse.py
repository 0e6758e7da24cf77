"""Server-sent events as SGLang sends them: a ``data: {json}`` line per object, then ``data: [DONE]``.

The OpenAI-compatible streams (api.py) and /generate with ``stream`` (routes.py) write through these.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from specctl.runtime.sim.server import Piece


async def generate_stream(request: web.Request, pieces: AsyncIterator[Piece],
                          answer: Any) -> web.StreamResponse:
    """``data: {...}`` per chunk with everything so far (SGLang's default, not incremental), then ``[DONE]``.

    ``answer(piece)`` notes a piece and builds the same object as the non-streamed /generate.
    """
    response = await open_stream(request)
    async for piece in pieces:
        await send(response, answer(piece))
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def open_stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    return response


async def send(response: web.StreamResponse, obj: dict[str, Any]) -> None:
    await response.write(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")

