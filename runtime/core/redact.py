"""Secrets kept out of what specctl shows, journals or lets SGLang answer: API keys in argument dumps and logs.

Shared by the SGLang plugin (it strips ``*api_key*`` fields from SGLang's
``/server_info`` answer and from every other argument dump built the same way)
and the supervisor (it masks any key it knows, and any ``api_key=...`` pattern,
in the server's log lines before they reach the journal or the screen). Pure:
text and dicts in, text and dicts out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "<redacted>"
MIN_KNOWN = 4  # a known key shorter than this is not masked by value (it would mask ordinary text)

# a field name that holds a key: admin_api_key, api_key, router_api_key, ... (also with dashes: --admin-api-key)
_NAME = r"[A-Za-z0-9_-]*api[_-]key[A-Za-z0-9_-]*"
# name=value, name: value, 'name': 'value', "name": "value", --name=value; a quoted value or a bare word
_ASSIGN = re.compile(
    rf"""(?P<head>(?<![A-Za-z0-9_]){_NAME}['"]?\s*[:=]\s*)"""
    r"""(?:(?P<q>['"])(?P<qv>(?:\\.|(?!(?P=q)).)*)(?P=q)|(?P<bare>[^\s,)}\]'"]+))""",
    re.IGNORECASE)
# a command line's flag and its value as the next word: --admin-api-key VALUE
_FLAG = re.compile(rf"(?P<head>--{_NAME}\s+)(?P<val>[^\s-][^\s]*)", re.IGNORECASE)
_SECRET_FIELD = re.compile(r"api[_-]?key", re.IGNORECASE)
_UNSET = {"None", "null", "none", ""}


def is_secret_field(name: str) -> bool:
    """A server argument that holds a key (``admin_api_key``, ``api_key``, ``*_api_key*``)."""
    return bool(_SECRET_FIELD.search(name))


def _mask_assign(m: re.Match[str]) -> str:
    if m.group("q"):
        value = m.group("qv")
        return m.group(0) if value in _UNSET else f"{m.group('head')}{m.group('q')}{MASK}{m.group('q')}"
    value = m.group("bare")
    return m.group(0) if value in _UNSET else f"{m.group('head')}{MASK}"


def redact_text(text: str, known: Iterable[str | None] = ()) -> str:
    """``text`` with every known key and every ``*api_key*`` value masked."""
    for key in sorted({k for k in known if k and len(k) >= MIN_KNOWN}, key=len, reverse=True):
        text = text.replace(key, MASK)
    text = _ASSIGN.sub(_mask_assign, text)
    return _FLAG.sub(lambda m: f"{m.group('head')}{MASK}", text)


def redact_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of an argument dump without its key fields (nested dumps too); a command line in it
    (``launch_command``) keeps its words but not a key's value."""
    out: dict[str, Any] = {}
    for name, value in args.items():
        if isinstance(name, str) and is_secret_field(name):
            continue
        if isinstance(value, Mapping):
            value = redact_args(value)
        elif isinstance(value, str) and name == "launch_command":
            value = redact_text(value)
        elif isinstance(value, list) and name == "launch_command":
            value = _redact_argv(value)
        out[name] = value
    return out


def _redact_argv(argv: list[Any]) -> list[Any]:
    out: list[Any] = []
    hide_next = False
    for word in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        if isinstance(word, str) and word.startswith("--") and is_secret_field(word):
            if "=" in word:
                out.append(word.split("=", 1)[0] + "=" + MASK)
            else:
                out.append(word)
                hide_next = True
            continue
        out.append(word)
    return out
