"""The journal's record shapes: one JSON object per line, ``v`` and ``t`` first.

A *record* is a plain dict; the same dicts travel through the hub, the control
socket's ``subscribe`` stream, the journal and the console, so every consumer
sees exactly what was written. A field that could not be read is ``None``
(JSON ``null``), never a made-up number.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

VERSION = 1
KINDS = ("sample", "event", "command")


def sample(server: dict[str, Any], spec: dict[str, Any] | None, gpus: list[dict[str, Any]],
           procs: list[dict[str, Any]], *, sim: bool, t: float | None = None) -> dict[str, Any]:
    """A periodic snapshot of everything the console shows."""
    return {"v": VERSION, "t": time.time() if t is None else t, "kind": "sample", "sim": sim,
            "server": server, "spec": spec, "gpus": gpus, "procs": procs}


def event(name: str, t: float | None = None, **fields: Any) -> dict[str, Any]:
    """Something that happened once: a switch, a server start/exit/restart, a settings change."""
    return {"v": VERSION, "t": time.time() if t is None else t, "kind": "event", "event": name, **fields}


def command(cmd: str, ok: bool, uid: int | None, t: float | None = None, **fields: Any) -> dict[str, Any]:
    """A control command as received, with the peer's uid and whether it was applied."""
    return {"v": VERSION, "t": time.time() if t is None else t, "kind": "command", "cmd": cmd,
            "ok": ok, "uid": uid, **fields}


def loads(text: str | bytes) -> Any:
    """Strict JSON: no NaN or Infinity, and no number too large for a float (``1e999`` would read as
    inf, which dumps() then refuses: a request taken in could not be journalled, a record not drawn)."""
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:24]}{'...' if len(text) > 24 else ''} is too large")
    return value


def dumps(record: dict[str, Any]) -> str:
    """Compact UTF-8 JSON, one line, no trailing newline."""
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
