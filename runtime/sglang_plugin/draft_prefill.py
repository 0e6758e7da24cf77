"""The draft model's prefill of prompts admitted while off: skipped while the draft is cold.

Why: at 128-256 requests a prompt arrives about every decode step, and
SGLang runs the draft's prefill eagerly for each (1-2 % of the step time on
the GPU, more on the scheduler's CPU), which a server without speculation
does not pay; FA3's off state fell short of no speculation exactly where
prompts arrive (docs/sglang-plugin.md, "Fast off").
The draft then has no KV for those prompts, as it has none for the tokens
generated while cold: after a resume, drafts for those requests are poorer
until they finish (greedy outputs do not change). ``warm_below`` keeps the draft warm, prefill
included (draft_warmth.cold_prefill decides).

The stand-in output is SGLang's own stub for a skipped draft extend
(``EAGLEWorkerV2._stub_skipped_draft_extend``): zero proposals and hidden
states of the shapes the FutureMap stashes, and the bonus tokens the next
step verifies. Every tensor-parallel rank decides alike (the same runtime
state, policy state and settings), so all ranks run the draft's prefill,
with its collectives, or none does. The hook is registered through
fast_off (compat's ``Release.fast_off_hooks``) for both releases, with one
stand-in: 0.5.23's prefill also takes the target's KV location plan (by
keyword; the stand-in writes no KV and passes it on untouched when the
draft runs), and the fields its draft input gained since 0.5.17
(``cuda_graph_compatible``, the window KV indices) keep their defaults,
which are what its prefill gives them whenever the stand-in may stand in
(``stub_fits``: no rejection sampling, no DSA seed). The
contract tests check both against each release's source; on 0.5.23 it has
not run on a GPU yet (docs/sglang-plugin.md, "Fast off").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specctl.runtime.sglang_plugin import draft_warmth, progress_log

logger = logging.getLogger(__name__)


@dataclass
class DraftPrefillStats:
    """One copy per scheduler process."""

    skipped: int = 0  # prefills while off whose draft prefill was skipped (draft cold)


STATS = DraftPrefillStats()


def around_draft_extend_for_prefill(ready: Callable[[], bool], original: Callable[..., Any], draft_worker: Any,
                                    batch: Any, *args: Any, **kwargs: Any) -> Any:
    """While off with the draft cold, skip the draft model's prefill of new prompts (see module doc).

    ``ready``: whether fast off built its DECODE state (bound by fast_off.handlers).
    SGLang passes (batch, target hidden states, next token ids, mm embeds) by position,
    and on 0.5.23 the KV location plan by keyword.
    """
    if not (ready() and draft_warmth.cold_prefill(draft_worker, batch) and stub_fits(draft_worker)):
        return original(draft_worker, batch, *args, **kwargs)
    STATS.skipped += 1
    if progress_log.due(STATS.skipped):
        logger.info("specctl fast-off: %d prefills while off with the draft cold (draft prefill skipped)",
                    STATS.skipped)
    next_token_ids = args[1] if len(args) > 1 else kwargs["next_token_ids"]
    return cold_draft_input(draft_worker, next_token_ids)


def stub_fits(draft_worker: Any) -> bool:
    """The stub stands in only where the prefill output has nothing beyond it.

    Not for rejection sampling (the next draft would need its probabilities)
    nor for DSA models (their prefill seeds the draft's top-k indices).
    """
    from sglang.srt.runtime_context import get_spec

    return not get_spec().speculative_use_rejection_sampling and not getattr(
        draft_worker, "seed_dsa_topk_from_draft_extend", False)


def cold_draft_input(draft_worker: Any, next_token_ids: Any) -> Any:
    """What a skipped draft prefill hands on: as SGLang's ``_stub_skipped_draft_extend`` fills it."""
    import torch
    from sglang.srt.speculative.eagle_info import EagleDraftInput
    from sglang.srt.speculative.eagle_utils import get_draft_recurrent_hidden_state_spec

    bs, device = next_token_ids.shape[0], next_token_ids.device
    hidden_size, hidden_dtype = get_draft_recurrent_hidden_state_spec(draft_worker.draft_runner)
    return EagleDraftInput(
        topk_p=torch.zeros((bs, draft_worker.topk), dtype=torch.float32, device=device),
        topk_index=torch.zeros((bs, draft_worker.topk), dtype=torch.int64, device=device),
        hidden_states=None if hidden_size is None else torch.zeros((bs, hidden_size), dtype=hidden_dtype,
                                                                   device=device),
        bonus_tokens=next_token_ids,
        num_tokens_per_req=1,
        num_tokens_for_logprob_per_req=1,
    )
