"""SGLang's native /generate on the wire, as the simulator speaks it: the body read and the answer shaped.

Kept apart from the server's engine and routes because both /generate paths
(whole and streamed) and their tests share it, and because it is where the
simulator must look like SGLang to a client: the limits, the errors (SGLang's
own texts, from ``sampling/sampling_params.py`` and ``tokenizer_manager.py``),
``finish_reason`` on a stop or an abort, logprobs as ``[logprob, id, text]``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from specctl.runtime.sim.sampling import words

MAX_NEW_TOKENS = 10_000_000
DEFAULT_MAX_NEW_TOKENS = 128  # SamplingParams' default
MAX_BATCH = 4096  # prompts in one batched /generate
MAX_STOPS = 64
MAX_STOP_CHARS = 1024
MAX_TOP_LOGPROBS = 64


class BadRequest(Exception):
    """A client error; becomes a 400 JSON answer."""


@dataclass(frozen=True)
class Job:
    """One prompt's request, whichever endpoint it came through."""

    prompt_tokens: int
    prompt_key: str  # what the prompt is: greedy and seeded outputs are a function of it
    max_new: int | None  # None: no limit of its own (SGLang runs to the context, the simulator to an EOS)
    greedy: bool = False
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    logprobs: int | None = None  # None: none; k: each token's logprob and the k most likely (0: none of those)
    prompt_text: str | None = None
    prompt_ids: tuple[int, ...] | None = None

    @property
    def eos(self) -> bool:
        """Whether the simulated EOS ends it: it set no limit and did not ask to ignore EOS."""
        return self.max_new is None and not self.ignore_eos


def prompt_len(text: str) -> int:
    """Tokens of a text prompt: about four characters a token (the simulator has no tokenizer)."""
    return max(1, -(-len(text) // 4))


def check_stop(stop: Any, name: str = "stop") -> tuple[str, ...]:
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop) \
            or len(stop) > MAX_STOPS or sum(map(len, stop)) > MAX_STOP_CHARS:
        raise BadRequest(f"{name} must be a non-empty string or a list of at most {MAX_STOPS} of them")
    return tuple(stop)


def _number(sp: dict[str, Any], key: str, default: float) -> float:
    value = sp.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest(f"sampling_params.{key} must be a number")
    return float(value)


def check_sampling(temperature: float, top_p: float = 1.0) -> None:
    """SamplingParams.verify's checks of the values the simulator reads (its messages)."""
    if not math.isfinite(temperature) or temperature < 0.0:
        raise BadRequest(f"temperature must be a non-negative finite number, got {temperature}.")
    if not 0.0 < top_p <= 1.0:
        raise BadRequest(f"top_p must be in (0, 1], got {top_p}.")


def check_seed(seed: Any, name: str) -> int | None:
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise BadRequest(f"{name} must be an integer, got {type(seed).__name__}.")
    if not -(2**63) <= seed <= 2**63 - 1:
        raise BadRequest(f"{name} must be in [-2**63, 2**63 - 1], got {seed}.")
    return seed


def parse_generate(body: Any) -> Job:
    """One /generate prompt's job; BadRequest with SGLang's words on anything it refuses."""
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    ids, text = body.get("input_ids"), body.get("text")
    if ids is not None:
        if not isinstance(ids, list) or not ids or not all(type(t) is int for t in ids):
            raise BadRequest("input_ids must be a non-empty list of integers, or a list of them (a batch)")
        prompt, key, prompt_ids, prompt_text = len(ids), json.dumps(ids), tuple(ids), None
    elif isinstance(text, str) and text:
        prompt, key, prompt_ids, prompt_text = prompt_len(text), json.dumps(text), None, text
    else:
        raise BadRequest('give "input_ids" (list of integers) or "text" (a non-empty string)')
    sp = body.get("sampling_params", {})
    if sp is None:
        sp = {}
    if not isinstance(sp, dict):
        raise BadRequest("sampling_params must be an object")
    max_new = sp.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
    if max_new is not None:
        if isinstance(max_new, bool) or not isinstance(max_new, int):
            raise BadRequest("sampling_params.max_new_tokens must be an integer")
        if max_new < 0:
            raise BadRequest(f"max_new_tokens must be at least 0, got {max_new}.")
        if max_new > MAX_NEW_TOKENS:
            raise BadRequest(f"sampling_params.max_new_tokens must be at most {MAX_NEW_TOKENS}")
    temperature = _number(sp, "temperature", 1.0)
    check_sampling(temperature, _number(sp, "top_p", 1.0))
    top = body.get("top_logprobs_num", 0)
    if body.get("return_logprob"):
        if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS:
            raise BadRequest(f"top_logprobs_num must be an integer 0..{MAX_TOP_LOGPROBS}")
    ignore_eos = sp.get("ignore_eos", False)
    return Job(prompt, key, max_new, greedy=temperature == 0.0, seed=check_seed(sp.get("sampling_seed"),
                                                                                 "sampling_seed"),
               stop=check_stop(sp.get("stop"), "sampling_params.stop"), ignore_eos=bool(ignore_eos),
               logprobs=top if body.get("return_logprob") else None, prompt_text=prompt_text,
               prompt_ids=prompt_ids)


def split_batch(body: Any) -> list[dict[str, Any]] | None:
    """A batched /generate (``input_ids`` a list of prompts, or ``text`` a list) as one body per prompt; None
    for a single one. SGLang answers a batch with a list, one answer per prompt in order."""
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("text"), list):
        prompts, key = body["text"], "text"
    elif isinstance(body.get("input_ids"), list) and body["input_ids"] and isinstance(body["input_ids"][0], list):
        prompts, key = body["input_ids"], "input_ids"
    else:
        return None
    if not prompts or len(prompts) > MAX_BATCH:
        raise BadRequest(f"a batch is a list of 1 to {MAX_BATCH} prompts")
    if body.get("stream"):
        raise BadRequest("a batch cannot be streamed here; send its prompts one request each")
    if body.get("rid") is not None:
        raise BadRequest("a batch takes no rid here")
    return [{**body, key: prompt} for prompt in prompts]


def client_rid(body: dict[str, Any]) -> str | None:
    """The ``rid`` a /generate body names (SGLang's request id), if it is a string."""
    rid = body.get("rid")
    return rid if isinstance(rid, str) else None


ABORTED = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}  # FINISH_ABORT().to_json()


def generate_answer(prompt: int, ids: list[int], text: str, finish: dict[str, Any] | None, accept: float | None,
                    latency: float, verifies: int, logprobs: list[Any] | None = None) -> dict[str, Any]:
    """A /generate answer (or, streamed, one chunk with everything so far: SGLang's default)."""
    meta: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": len(ids),
        "finish_reason": finish,
        "spec_accept_length": None if accept is None else round(accept, 4),
        "spec_verify_ct": verifies,
        "e2e_latency": round(latency, 6),
    }
    if logprobs is not None:
        meta["input_token_logprobs"], meta["input_top_logprobs"] = [], []  # logprob_start_len -1: none of the prompt
        meta["output_token_logprobs"] = [[lp, i, None] for i, (lp, _) in zip(ids, logprobs)]
        meta["output_top_logprobs"] = [[[v, t, None] for t, v in top] for _, top in logprobs]
    return {"text": text, "output_ids": ids, "meta_info": meta}


__all__ = ["ABORTED", "BadRequest", "Job", "client_rid", "generate_answer", "parse_generate", "split_batch", "words"]
