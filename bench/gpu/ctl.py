#!/usr/bin/env python3
"""Small control client for a running SGLang server with the specctl plugin.

Standard library only, so that it runs on the GPU machine without the
project installed. Used by run_fast_off.sh between load points.

    ctl.py URL mode on|off|auto      set specctl's mode, print the state read back
    ctl.py URL set KEY=VALUE ...     set specctl settings (numbers), print the state
                                     (mode and set exit 1 when the server refuses the change)
    ctl.py URL state                 print internal_states[0]["specctl"] as JSON
    ctl.py URL used                  flush the radix cache, print KV tokens in use
    ctl.py URL info KEY ...          print /server_info keys as JSON
"""
from __future__ import annotations

import json
import sys
import time
import urllib.request
from typing import Any

MODE_CODES = {"auto": 0, "on": 1, "off": 2}


def http(url: str, path: str, payload: dict[str, Any] | None = None, timeout: float = 30.0) -> Any:
    """GET (payload None) or POST JSON; the decoded JSON answer or the raw text."""
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url.rstrip("/") + path, data=data, method="GET" if data is None else "POST")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        body = resp.read().decode()
    try:
        return json.loads(body)
    except ValueError:
        return body


def specctl_state(url: str) -> Any:
    """The plugin's state as /server_info reports it (None if absent)."""
    return spec_block(http(url, "/server_info"))


def spec_block(info: Any) -> Any:
    """The plugin's block of a decoded /server_info answer (None if absent)."""
    states = (info.get("internal_states") if isinstance(info, dict) else None) or [{}]
    return states[0].get("specctl") if isinstance(states, list) and isinstance(states[0], dict) else None


def set_server_args(url: str, args: dict[str, Any]) -> Any:
    """POST /set_internal_state; returns SGLang's answer."""
    return http(url, "/set_internal_state", {"server_args": args})


def find_key(obj: Any, key: str) -> list[Any]:
    """Every value stored under ``key`` anywhere in a JSON tree."""
    found: list[Any] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == key:
                found.append(v)
            found.extend(find_key(v, key))
    elif isinstance(obj, list):
        for v in obj:
            found.extend(find_key(v, key))
    return found


def used_tokens(url: str) -> Any:
    """KV tokens in use after flushing the radix cache (0 when nothing leaked)."""
    flush = None
    for _ in range(10):
        try:
            flush = http(url, "/flush_cache", {})
            break
        except Exception as exc:  # busy: requests still finishing
            flush = repr(exc)
            time.sleep(1.0)
    try:
        loads = http(url, "/v1/loads")
    except Exception as exc:  # older servers, the simulator
        return {"num_used_tokens": None, "error": repr(exc)[:200], "flush": str(flush)[:120]}
    return {"num_used_tokens": find_key(loads, "num_used_tokens"), "flush": str(flush)[:120]}


def command(url: str, cmd: str, rest: list[str]) -> Any:
    """Run one ctl command; returns what main() prints. KeyError/ValueError on bad input."""
    if cmd == "mode":
        answer = set_server_args(url, {"specctl_mode": MODE_CODES[rest[0]]})
        return {"set": answer, "specctl": specctl_state(url)}
    if cmd == "set":
        changes = {}
        for item in rest:
            key, _, value = item.partition("=")
            changes["specctl_" + key] = float(value) if "." in value else int(value)
        return {"set": set_server_args(url, changes), "specctl": specctl_state(url)}
    if cmd == "state":
        return specctl_state(url)
    if cmd == "used":
        return used_tokens(url)
    if cmd == "info":
        info = http(url, "/server_info")
        return {k: info.get(k) for k in rest}
    raise ValueError(f"unknown command {cmd!r}")


def main_capture(url: str, argv: list[str]) -> Any:
    """command() for callers that hold argv as a list (correctness.py)."""
    return command(url, argv[0], argv[1:])


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    try:
        out = command(argv[0], argv[1], argv[2:])
    except (KeyError, ValueError, IndexError) as exc:
        print(f"ctl: {exc!r}\n{__doc__}")
        return 2
    print(json.dumps(out, default=str))
    if argv[1] in ("mode", "set") and refused(out["set"]):
        print(f"ctl: the server refused {' '.join(argv[1:])} (answer {out['set']!r})", file=sys.stderr)
        return 1
    return 0


def refused(answer: Any) -> bool:
    """True where /set_internal_state said no: a false among its per-rank answers, or updated false.

    A script that goes on after a refused set measures the wrong state (a
    depth pin refused under the default floor ran as auto once), so the exit
    status carries it.
    """
    if isinstance(answer, list):
        return any(refused(a) for a in answer)
    if isinstance(answer, dict):
        return answer.get("updated", answer.get("success", True)) is False
    return answer is False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
