"""What the journal can hold, asked before a command is applied rather than found out after.

The journal is the audit log: a command that changed the server but whose
record cannot be written (nested too deep for the encoder, a lone surrogate
that UTF-8 cannot carry) would be a change nobody can account for. So the
control socket refuses such a request as ``bad_request`` before anything
acts on it, and a command record keeps a bounded summary of its arguments,
so one client cannot fill the journal (and evict its rotation history) with
64 KiB arguments.

Pure: used by the control socket (at parse time) and the command handler
(as the last check before applying).
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_DEPTH = 32  # nesting levels in a request's args; real commands use two
ARGS_LIMIT = 1024  # encoded bytes of args a command record keeps whole
HEAD = 200  # characters of larger args kept as a summary
MESSAGE_LIMIT = 300  # characters of an error message kept (it may quote the client's input)


def why_unjournalable(value: Any) -> str | None:
    """None if ``value`` encodes as journal JSON (UTF-8, finite numbers, bounded depth); else why not.

    Iterative, so that a 10,000-deep value costs a loop, not a RecursionError.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                return f"nested deeper than {MAX_DEPTH} levels"
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        return "an object key is not a string"
                    if why := _string_problem(key):
                        return why
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, str):
            if why := _string_problem(item):
                return why
        elif isinstance(item, float):
            if not math.isfinite(item):
                return "a number is not finite"
        elif not isinstance(item, (int, bool, type(None))):
            return f"a value of type {type(item).__name__} is not JSON"
    return None


def _string_problem(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a string holds a lone surrogate (\\u{ord(text[exc.start]):04x}), which UTF-8 cannot carry"
    return None


def bounded_args(args: Any) -> Any:
    """``args`` as a command record keeps them: whole up to ARGS_LIMIT bytes, else a short summary.

    The summary is plain ASCII JSON text, so even arguments that could not be
    journaled whole (and were refused for it) leave a readable trace.
    """
    try:
        text = json.dumps(args, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        size: int | None = len(text.encode("utf-8"))
    except (ValueError, TypeError, RecursionError):  # a lone surrogate, NaN, too deep: refused anyway
        text, size = _ascii_head(args), None
    if size is not None and size <= ARGS_LIMIT:
        return args
    head = text.encode("ascii", "backslashreplace").decode("ascii")[:HEAD]
    return {"summary": head + "...", "bytes": size}


def _ascii_head(args: Any) -> str:
    """A repr that cannot fail: ascii() escapes surrogates; depth is cut by the slice first."""
    try:
        return ascii(args)[:HEAD]
    except RecursionError:
        return "(nested too deep to show)"


def bounded_message(message: str) -> str:
    """An error message for the journal: at most MESSAGE_LIMIT characters, always encodable."""
    text = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT] + "..."
