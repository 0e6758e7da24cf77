"""The control socket's wire: requests come in as bounded lines, answers go out as JSON lines.

Kept apart from the server (who may connect, how many, subscriptions) because
this is the part every byte a client sends goes through: a line has a size
bound and a time bound, a request is checked whole (UTF-8, JSON, shapes,
journalable) before anything acts on it, and an answer that is not plain
JSON becomes an ``internal`` error instead of a broken stream.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from typing import Any

from specctl.runtime.core import records
from specctl.runtime.core.errors import INTERNAL
from specctl.runtime.core.journalable import why_unjournalable

log = logging.getLogger(__name__)

MAX_LINE = 64 * 1024  # bytes in one line, not counting the newline
_READ_CHUNK = 64 * 1024
_SCALARS = (str, int, float, bool, type(None))


class LineTooLong(Exception):
    """A line went past MAX_LINE; its bytes were discarded up to its newline."""


class LineStalled(Exception):
    """A line was started but not finished within the line timeout."""


class BadRequest(Exception):
    """A request line that cannot be executed; ``req_id`` is echoed when it could be read."""

    def __init__(self, message: str, req_id: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.req_id = req_id


class LineReader:
    """Splits a stream into lines, with a bound on a line's size and on how long it may take.

    An idle connection (no partial line pending) may wait ``idle_timeout`` (None:
    forever); once a line has started, each further chunk must come within
    ``line_timeout``, so a client cannot pin a half-sent line forever. An idle
    timeout counts as the end of input; a stalled line raises LineStalled.
    """

    def __init__(self, reader: asyncio.StreamReader, idle_timeout: float | None,
                 line_timeout: float) -> None:
        self._reader = reader
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf known to hold no newline: a trickling client costs O(n)
        self._discarding = False
        self._eof = False
        self._idle_timeout = idle_timeout
        self._line_timeout = line_timeout

    async def readline(self) -> bytes | None:
        """The next line without its newline; None at end of input; raises LineTooLong."""
        while True:
            line = self._take_line()
            if line is not None:
                return line
            if self._eof:
                return self._take_tail()
            await self._fill()

    def _take_line(self) -> bytes | None:
        if self._discarding:  # inside an over-long line: drop everything up to its newline
            end = self._buf.find(b"\n")
            if end < 0:
                self._buf.clear()
                self._scanned = 0
                return None
            del self._buf[:end + 1]
            self._scanned = 0
            self._discarding = False
            raise LineTooLong
        end = self._buf.find(b"\n", self._scanned)
        if end < 0:
            self._scanned = len(self._buf)
            if len(self._buf) > MAX_LINE:
                self._discarding = True
                self._buf.clear()
                self._scanned = 0
            return None
        line = bytes(self._buf[:end])
        del self._buf[:end + 1]
        self._scanned = 0
        if len(line) > MAX_LINE:
            raise LineTooLong
        return line

    def _take_tail(self) -> bytes | None:
        """A last line without a newline still counts (``printf '{...}' | nc -U`` is common), unless it
        is the rest of an over-long line: that is discarded whole, up to EOF, and none of it runs."""
        if self._discarding:
            self._discarding = False
            self._buf.clear()
            self._scanned = 0
            raise LineTooLong
        if not self._buf:
            return None
        line = bytes(self._buf)
        self._buf.clear()
        self._scanned = 0
        if len(line) > MAX_LINE:
            raise LineTooLong
        return line

    async def _fill(self) -> None:
        pending = bool(self._buf) or self._discarding
        timeout = self._line_timeout if pending else self._idle_timeout
        try:  # asyncio.timeout: on 3.11 wait_for can swallow a cancel (stop()) that meets a read
            async with asyncio.timeout(timeout):
                data = await self._reader.read(_READ_CHUNK)
        except TimeoutError:
            if pending:
                raise LineStalled from None
            data = b""
        if data:
            self._buf += data
        else:
            self._eof = True


def dumps(obj: dict[str, Any]) -> bytes:
    """One wire line. ASCII-escaped, so even a lone surrogate a client sent in its id encodes."""
    return (json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n").encode("ascii")


def error(req_id: Any, code: str, message: str, **details: Any) -> dict[str, Any]:
    return {"id": req_id, "ok": False, "error": {"code": code, "message": message, **details}}


def encode_answer(answer: dict[str, Any]) -> bytes:
    """The answer's line; a result that is not plain JSON is the target's bug, answered as internal."""
    try:
        return dumps(answer)
    except (TypeError, ValueError):
        log.exception("control answer is not plain JSON: %r", answer)
        return dumps(error(answer["id"], INTERNAL, "the supervisor's answer could not be encoded"))


def is_interactive(line: bytes) -> bool:
    """The request says a person is waiting on it (``"interactive": true`` at its top level)."""
    try:
        obj = records.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(obj, dict) and obj.get("interactive") is True


def parse_request(line: bytes) -> tuple[Any, str, dict[str, Any]]:
    """Check one request line before anything acts on it; raises BadRequest naming what is wrong.

    Returns ``(id, cmd, args)``. Unknown top-level keys are ignored, as in QMP.
    """
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadRequest(f"not valid UTF-8 at byte {e.start}") from None
    try:
        obj = records.loads(text)
    except (ValueError, RecursionError) as e:
        raise BadRequest(f"not JSON: {str(e)[:200]}") from None
    if not isinstance(obj, dict):
        raise BadRequest(f"a request is a JSON object, got {type(obj).__name__}")
    req_id = obj.get("id")
    if not isinstance(req_id, _SCALARS) or (isinstance(req_id, float) and not math.isfinite(req_id)):
        raise BadRequest("id must be a JSON scalar (string, number, boolean or null)")
    cmd, args = obj.get("cmd"), obj.get("args")
    if not isinstance(cmd, str):
        raise BadRequest("cmd must be a string", req_id)
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise BadRequest("args must be a JSON object", req_id)
    # the journal must be able to hold what is applied: refuse here, before anything acts on it
    if why := why_unjournalable(cmd) or why_unjournalable(args):
        raise BadRequest(f"request cannot be journaled: {why}", req_id)
    return req_id, cmd, args
