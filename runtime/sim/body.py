"""Request bodies, read as a public server must: within a time limit, bounded in size and depth.

A client that sends its head and then trickles (or never sends) its body is
cut off after BODY_TIMEOUT_S, so it cannot hold a connection and a handler
forever; JSON nested deeper than MAX_DEPTH is refused (400), whether the parser
gives up on it or not.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from specctl.runtime.sim.generate import BadRequest

BODY_TIMEOUT_S = 30.0
MAX_DEPTH = 64


def too_deep(obj: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``obj`` nests lists and objects deeper than ``limit`` (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (list, dict)):
            if depth > limit:
                return True
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item)
                         if isinstance(child, (list, dict)))
    return False


async def read_json(request: web.Request) -> Any:
    """The request's JSON body (None when empty); BadRequest for a slow, deep or malformed one."""
    try:
        raw = await asyncio.wait_for(request.read(), BODY_TIMEOUT_S)
    except TimeoutError:
        raise BadRequest(f"the request body did not arrive within {BODY_TIMEOUT_S:.0f} s") from None
    if not raw:
        return None
    try:
        body = json.loads(raw)
    except RecursionError:
        raise BadRequest(f"the JSON body is nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError):
        raise BadRequest("body is not valid JSON") from None
    if too_deep(body):
        raise BadRequest(f"the JSON body is nested deeper than {MAX_DEPTH} levels")
    return body
