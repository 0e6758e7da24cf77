"""SGLang's /generate on the wire, as the simulator speaks it: the body read, the ids made, the answer shaped.

Kept apart from the server's engine and routes because both /generate paths
(whole and streamed) and their tests share it, and because it is where the
simulator must look like SGLang to a client: the limits, the errors, greedy
outputs that depend on the prompt alone, ``finish_reason`` on an abort.
"""

from __future__ import annotations

import json
import random
from typing import Any

from specctl.runtime.sim.api import words

MAX_PROMPT_TOKENS = 131_072
MAX_NEW_TOKENS = 131_072


class BadRequest(Exception):
    """A client error; becomes a 400 JSON answer."""


def parse_generate(body: Any) -> tuple[int, int]:
    """Prompt length and max_new_tokens from an SGLang /generate body; BadRequest on anything else."""
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    ids, text = body.get("input_ids"), body.get("text")
    if ids is not None:
        if not isinstance(ids, list) or not ids or not all(type(t) is int for t in ids):
            raise BadRequest("input_ids must be a non-empty list of integers, or a list of them (a batch)")
        prompt = len(ids)
    elif isinstance(text, str) and text:
        prompt = max(1, -(-len(text) // 4))  # about four characters a token
    else:
        raise BadRequest('give "input_ids" (list of integers) or "text" (a non-empty string)')
    if prompt > MAX_PROMPT_TOKENS:
        raise BadRequest(f"prompt of {prompt} tokens is longer than {MAX_PROMPT_TOKENS}")
    sp = body.get("sampling_params", {})
    if not isinstance(sp, dict):
        raise BadRequest("sampling_params must be an object")
    max_new = sp.get("max_new_tokens", 128)
    if type(max_new) is not int or not 0 <= max_new <= MAX_NEW_TOKENS:
        raise BadRequest(f"sampling_params.max_new_tokens must be an integer 0..{MAX_NEW_TOKENS}")
    return prompt, max_new


MAX_BATCH = 4096  # prompts in one batched /generate


def split_batch(body: Any) -> list[dict[str, Any]] | None:
    """A batched /generate (``input_ids`` a list of prompts) as one body per prompt; None for a single one.

    SGLang answers a batch with a list, one answer per prompt in order; the
    prompts share the sampling parameters. A batch cannot be streamed here.
    """
    if not isinstance(body, dict) or not isinstance(body.get("input_ids"), list) or not body["input_ids"] \
            or not isinstance(body["input_ids"][0], list):
        return None
    prompts = body["input_ids"]
    if len(prompts) > MAX_BATCH or not all(isinstance(p, list) for p in prompts):
        raise BadRequest(f"a batch is a list of at most {MAX_BATCH} prompts, each a list of integers")
    if body.get("stream"):
        raise BadRequest("a batch cannot be streamed; send its prompts one request each")
    if body.get("rid") is not None:
        raise BadRequest("a batch takes no rid here")
    return [{**body, "input_ids": ids} for ids in prompts]


def client_rid(body: dict[str, Any]) -> str | None:
    """The ``rid`` a /generate body names (SGLang's request id), if it is a string."""
    rid = body.get("rid")
    return rid if isinstance(rid, str) else None


def greedy_key(body: dict[str, Any]) -> str | None:
    """The prompt of a greedy request (``temperature`` 0), else None (SGLang's default samples, at 1.0).

    Greedy decoding's output depends on the prompt alone, so the same prompt gets the same ids in every
    request, mode and batch, as bench/gpu/correctness.py expects of SGLang; a sampled one differs per request.
    """
    sp = body.get("sampling_params")
    if not isinstance(sp, dict) or sp.get("temperature") != 0:
        return None
    return json.dumps(body["input_ids"] if body.get("input_ids") is not None else body.get("text"))


def output_ids(seed: int, rid: int, n: int, greedy: str | None = None) -> list[int]:
    """Deterministic stand-in token ids (a Llama-3 vocabulary has 128256): per prompt when greedy, else per request."""
    rng = random.Random(f"{seed}:{greedy}") if greedy is not None else random.Random(seed * 1_000_003 + rid)
    return [rng.randrange(128_256) for _ in range(n)]


ABORTED = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}  # FINISH_ABORT().to_json()


def generate_answer(prompt: int, ids: list[int], accept: float | None, latency: float,
                     verifies: int, aborted: bool = False) -> dict[str, Any]:
    return {
        "text": words(ids),
        "output_ids": ids,
        "meta_info": {
            "prompt_tokens": prompt,
            "completion_tokens": len(ids),
            "finish_reason": dict(ABORTED) if aborted else {"type": "length", "length": len(ids)},
            "spec_accept_length": None if accept is None else round(accept, 4),
            "spec_verify_ct": verifies,
            "e2e_latency": round(latency, 6),
        },
    }
