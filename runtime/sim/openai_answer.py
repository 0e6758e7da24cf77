"""The answer side of the OpenAI-compatible endpoints: what one output has produced so far, and its pieces
in SGLang's shapes (``finish_reason`` and ``matched_stop``, logprobs for completions and chat, usage).

api.py runs the outputs and sends these, whole or as stream chunks; the shapes follow SGLang 0.5.23's
``serving_completions.py`` and ``serving_chat.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specctl.runtime.sim.generate import Job
from specctl.runtime.sim.sampling import TokenSource, prompt_ids, token_text, words

if TYPE_CHECKING:
    from specctl.runtime.sim.server import Piece


@dataclass
class Choice:
    """What one output has produced so far."""

    index: int
    job: Job
    source: TokenSource
    text: list[str] = field(default_factory=list)
    tokens: int = 0
    finish: dict[str, Any] | None = None
    logprobs: list[tuple[float, list[tuple[int, float]]]] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)


def finish_reason(finish: dict[str, Any] | None) -> tuple[str | None, Any]:
    """SGLang's OpenAI ``finish_reason`` and ``matched_stop`` from meta_info's finish_reason."""
    if finish is None:
        return None, None
    kind = finish.get("type")
    if kind == "stop":
        return "stop", finish.get("matched")
    if kind == "abort":
        return "abort", None
    return "length", None


def note(c: Choice, piece: Piece) -> None:
    """Add a piece to what its output has produced."""
    c.text.append(piece.text)
    c.tokens += len(piece.ids)
    c.finish = piece.finish
    if c.job.logprobs is not None:
        c.ids.extend(piece.ids)
        c.logprobs.extend(c.source.logprobs(piece.ids, c.job.logprobs))


def choice_logprobs(c: Choice, chat: bool, echo: bool, start: int = 0) -> dict[str, Any] | None:
    """An output's logprobs from its ``start``-th token: chat's ``content`` list or completions' columns."""
    if c.job.logprobs is None:
        return None
    ids, lps = c.ids[start:], c.logprobs[start:]
    if chat:
        return {"content": [chat_logprob(start + i, t, lp, top) for i, (t, (lp, top)) in
                            enumerate(zip(ids, lps))]}
    tokens = [token_text(start + i, t) for i, t in enumerate(ids)]
    token_lps: list[float | None] = [lp for lp, _ in lps]
    tops: list[dict[str, float] | None] = [{token_text(start + i, a): v for a, v in top} if c.job.logprobs
                                           else None for i, (_, top) in enumerate(lps)]
    if echo and start == 0:  # the prompt's tokens first; the first has no logprob, as in SGLang
        pids = list(c.job.prompt_ids or prompt_ids(c.job.prompt_text or ""))
        plps = TokenSource(c.source.key + "/prompt", greedy=True).logprobs(pids, c.job.logprobs)
        ptexts = [token_text(i, t) for i, t in enumerate(pids)]
        tokens = ptexts + tokens
        token_lps = [None] + [lp for lp, _ in plps[1:]] + token_lps
        tops = [None] + [{token_text(i + 1, a): v for a, v in top} for i, (_, top) in
                         enumerate(plps[1:])] + tops
    offsets, at = [], 0
    for t in tokens:
        offsets.append(at)
        at += len(t)
    return {"text_offset": offsets, "token_logprobs": token_lps, "tokens": tokens, "top_logprobs": tops}


def echo_text(job: Job) -> str:
    return job.prompt_text if job.prompt_text is not None else words(list(job.prompt_ids or ()))


def chat_logprob(index: int, token_id: int, lp: float, top: list[tuple[int, float]]) -> dict[str, Any]:
    text = token_text(index, token_id)
    return {"token": text, "bytes": list(text.encode()), "logprob": lp,
            "top_logprobs": [{"token": token_text(index, a), "bytes": list(token_text(index, a).encode()),
                              "logprob": v} for a, v in top]}


def token_usage(prompt: int, completion: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
            "prompt_tokens_details": None, "reasoning_tokens": 0, "completion_tokens_details": None}
