"""Record what the draft model proposes, per request and position: a GPU experiment's probe.

Why: after an off period the draft model's KV cache has holes where the
tokens generated while off should be (fast off skips the draft extend, see
fast_off.py), so its proposals may differ from what an always-on server's
draft would propose, and acceptance may dip until the context moves past
them. With the device kit's random weights acceptance cannot show that (it
is simulated, or near zero), but the proposals can: a server that resumes
and one that never stopped are given the same greedy prompts, and
bench/gpu/resume.py compares their proposals at the same (request,
position). Greedy outputs are identical across modes, so the contexts are.

Off unless ``SPECCTL_TRACE_DRAFTS`` names a file (one per scheduler process:
``.<pid>`` is appended). Each drafting verify appends one JSON line per
request: ``{"rid": ..., "len": L, "draft": [root, d1, d2, ...]}`` where L is
the request's length before the verify and ``root`` the last verified token.
Reading the proposals synchronises the device every step: never on in
production, only in the experiment.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, TextIO

ENV = "SPECCTL_TRACE_DRAFTS"

logger = logging.getLogger(__name__)

_out: TextIO | None = None
_failed = False


def enabled() -> bool:
    """Whether this process traces (read per call: the env var is set before the server starts)."""
    return bool(os.environ.get(ENV)) and not _failed


def record(verify_input: Any, batch: Any) -> None:
    """Append one line per request of a drafting verify; never raises into SGLang."""
    global _failed
    width = getattr(verify_input, "draft_token_num", 1) or 1
    if width < 2 or not enabled() or batch.forward_mode.is_idle():
        return
    try:
        _sync()
        lines = rows(verify_input.draft_token.tolist(), batch.seq_lens.tolist(),
                     [getattr(r, "rid", None) for r in getattr(batch, "reqs", None) or []], width)
        out = _file()
        out.writelines(json.dumps(line) + "\n" for line in lines)
        out.flush()
    except Exception:  # a probe must not take the server down
        _failed = True
        logger.exception("specctl draft trace: stopped")


def rows(tokens: list[int], lens: list[int], rids: list[Any], width: int) -> list[dict[str, Any]]:
    """Split the flat draft tokens (width per request, batch order) into one row per request."""
    if len(tokens) != width * len(lens):
        raise ValueError(f"{len(tokens)} draft tokens for {len(lens)} requests of width {width}")
    if len(rids) != len(lens):
        rids = [None] * len(lens)
    return [{"rid": rid, "len": int(n), "draft": tokens[i * width:(i + 1) * width]}
            for i, (rid, n) in enumerate(zip(rids, lens))]


def _file() -> TextIO:
    global _out
    if _out is None:
        _out = open(f"{os.environ[ENV]}.{os.getpid()}", "a", encoding="utf-8")
    return _out


def _sync() -> None:
    """Wait for the device: the draft tokens come from another stream than the one planning the verify."""
    try:
        import torch
    except ImportError:  # the CPU tests' fakes
        return
    if torch.cuda.is_available():
        torch.cuda.synchronize()
