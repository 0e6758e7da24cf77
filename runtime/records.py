"""The journal's record shapes: one JSON object per line, ``v`` and ``t`` first.

A *record* is a plain dict; the same dicts travel through the hub, the control
socket's ``subscribe`` stream, the journal and the console, so every consumer
sees exactly what was written. A field that could not be read is ``None``
(JSON ``null``), never a made-up number.
"""

from __future__ import annotations

import json
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


def dumps(record: dict[str, Any]) -> str:
    """Compact UTF-8 JSON, one line, no trailing newline."""
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
