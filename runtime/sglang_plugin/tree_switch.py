"""A tree draft (``--speculative-eagle-topk`` > 1) under specctl's switch: opt-in, proven on Triton (0.5.17).

Why: with a chain that accepts much less than the tree (2.0 against 2.7), the
report's static topk-4 tree served 1.32x the chain under specctl at 1-4
requests on the H200, and a third as much from 64 (docs/benchmarks.md). The
tree when quiet and specctl's off state when busy keeps both. SGLang's adaptive
machinery, which the switch rides on, assumes a chain in three places, each
reached here without editing SGLang (docs/sglang-plugin.md, "Tree drafts"):

- ``adaptive_unsupported_reason`` answers "only topk=1 is supported", and
  SGLang then turns adaptive *off* with a warning (a static tree, no switch).
  The AROUND hook asks SGLang's own function again with the args read as a
  chain, so every other reason it knows still refuses.
- ``_init_adaptive_speculative_params`` sets the draft tokens to steps + 1,
  which silently makes a 16-token tree at 2 steps a 3-token one. The AROUND
  hook puts the launch's value back (0.5.23: as a declaration, the last one
  wins).
- The draft-token bound that sizes KV and buffers in every state is
  ``max(candidate steps) + 1``. On 0.5.17 it is a ``cached_property`` of
  ``ServerArgs``, which a HookRegistry REPLACE would turn into a method, so
  the hook above fills its cache in the instance instead; on 0.5.23 an AROUND
  on ``SpeculativeAlgorithm.resolve_max_speculative_num_draft_tokens`` raises
  it to the launch's tokens (without it, 0.5.23 refuses the 16 at start-up).

Nothing in fast off changes: the steps-0 state is one draft token a request
whatever topk is, every draft input it makes is already (batch, topk), KV is
reserved per step, and the tree is rebuilt every draft. One thing is spared:
after every verify of a tree server, off steps included, SGLang compacts the
accepted path to the front of each request's block
(``_finalize_accept_tree_path``: a KV move in every layer, two gathers with
clones). With one draft token a request the path is the block's only slot, so
the compaction is an identity, as SGLang's own comment says of topk 1, where it
never runs; the AROUND hook skips it there (its zeros, gathers, clones and
clamps are most of the 21 ops a profiled tree's off step runs beyond a
chain's). server_args_check allows
only the candidates {0, launch steps} (SGLang would build any other depth as
a chain) and page size 1 where the release needs it.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import Any

from specctl.runtime.core.tree_drafts import TREE_SWITCH_ENV, tree_switch_enabled
from specctl.runtime.sglang_plugin.release_types import HookSpec, Release
from specctl.runtime.sglang_plugin.sglang_access import register_hook, resolve

logger = logging.getLogger(__name__)

ENV_ENABLE = TREE_SWITCH_ENV
TOPK_REASON = "(only topk=1 is supported)"  # SGLang's words, both releases (the contract tests check)
BOUND = "max_speculative_num_draft_tokens"  # 0.5.17's cached_property on ServerArgs


def enabled() -> bool:
    """Whether the operator opted in (off by default: proven on Triton with 0.5.17 only; docs/sglang-plugin.md)."""
    return tree_switch_enabled(os.environ)


def is_tree(topk: object) -> bool:
    """Whether ``--speculative-eagle-topk`` asks for a tree (more than one branch a step)."""
    return isinstance(topk, int) and topk > 1


def hooks_for(release: Release) -> tuple[HookSpec, ...]:
    """The hooks install registers: the release's when the operator opted in, else none."""
    return release.tree_hooks if enabled() else ()


def handlers(release: Release) -> dict[str, Callable[..., Any]]:
    """The callables behind compat's ``HookSpec.handler`` names for ``Release.tree_hooks``."""
    return {
        "adaptive_unsupported_reason": around_adaptive_unsupported_reason,
        "init_adaptive_speculative_params": functools.partial(around_init_adaptive_params, release),
        "resolve_max_speculative_num_draft_tokens": functools.partial(around_resolve_bound, release),
        "finalize_accept_tree_path": around_finalize_accept_tree_path,
    }


def install(release: Release, register: Callable[[HookSpec, Callable[..., Any]], None] = register_hook) -> bool:
    """plugin.INSTALLERS entry; returns whether hooks were registered."""
    specs = hooks_for(release)
    table = handlers(release)
    for spec in specs:
        register(spec, table[spec.handler])
    if specs:
        logger.info("specctl: tree drafts under the switch (%s=1; proven on Triton with SGLang 0.5.17)", ENV_ENABLE)
    return bool(specs)


class AsChain:
    """Server args read as a chain (topk 1): what SGLang's own checks say of everything else.

    Reads go through to the args, declarations included (0.5.23's views read
    ``_resolved_overrides``), with the tree width read as 1.
    """

    __slots__ = ("_args",)

    def __init__(self, server_args: Any) -> None:
        object.__setattr__(self, "_args", server_args)

    def __getattr__(self, name: str) -> Any:
        if name == "speculative_eagle_topk":
            return 1
        value = getattr(object.__getattribute__(self, "_args"), name)
        if name == "_resolved_overrides" and value:
            return [(source, {**fields, "speculative_eagle_topk": 1} if "speculative_eagle_topk" in fields else fields)
                    for source, fields in value]
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("AsChain is read-only")


def around_adaptive_unsupported_reason(original: Callable[..., str | None], server_args: Any,
                                       *args: Any, **kwargs: Any) -> str | None:
    """SGLang's reason, unless the only one is the tree: then whatever it says of the args as a chain."""
    reason = original(server_args, *args, **kwargs)
    if reason is None or TOPK_REASON not in reason:
        return reason
    return original(AsChain(server_args), *args, **kwargs)


def around_init_adaptive_params(release: Release, original: Callable[..., Any], server_args: Any,
                                *args: Any, **kwargs: Any) -> Any:
    """SGLang's adaptive set-up, then the launch's draft tokens back for a tree (SGLang sets steps + 1)."""
    view = resolve(release.args_view)(server_args)
    topk, tokens = view.speculative_eagle_topk, view.speculative_num_draft_tokens
    result = original(server_args, *args, **kwargs)
    if not is_tree(topk) or not isinstance(tokens, int):
        return result
    if release.tree_declare:
        resolve(release.tree_declare)(server_args, "specctl.tree_switch", speculative_num_draft_tokens=tokens)
    else:
        server_args.speculative_num_draft_tokens = tokens
        fill_bound(server_args, tokens)
    logger.info("specctl: tree draft kept at %d draft tokens (topk %d; SGLang's adaptive set-up writes steps + 1)",
                tokens, topk)
    return result


def fill_bound(server_args: Any, tokens: int) -> None:
    """0.5.17: the draft-token bound's cache, at least ``tokens`` (the property would answer steps + 1).

    ``cached_property`` is a non-data descriptor: the instance's own entry wins,
    and it travels with the args to the scheduler processes.
    """
    prop = type(server_args).__dict__.get(BOUND)
    computed = prop.func(server_args) if isinstance(prop, functools.cached_property) else None
    server_args.__dict__[BOUND] = max(tokens, computed if isinstance(computed, int) else 0)


def around_resolve_bound(release: Release, original: Callable[..., int | None], algorithm: Any, server_args: Any,
                         *args: Any, **kwargs: Any) -> int | None:
    """0.5.23: the draft-token bound at least the launch's tokens for a tree (SGLang answers steps + 1)."""
    bound = original(algorithm, server_args, *args, **kwargs)
    view = resolve(release.args_view)(server_args)
    tokens = view.speculative_num_draft_tokens
    if bound is None or not is_tree(view.speculative_eagle_topk) or not isinstance(tokens, int):
        return bound
    return max(bound, tokens)


def tree_problem(release: Release, server_args: Any, view: Any, candidates: list[int]) -> str | None:
    """Why specctl cannot switch this tree server (opted in), naming the flag; None if it can."""
    steps, topk, tokens = view.speculative_num_steps, view.speculative_eagle_topk, view.speculative_num_draft_tokens
    if sorted(candidates) != sorted({0, steps}):
        return (f"a tree draft (--speculative-eagle-topk {topk}) switches between its launch state and off only: "
                f"--speculative-adaptive-config must list candidate steps 0 and {steps} (--speculative-num-steps), "
                f"got {candidates} (SGLang would build other depths as chains)")
    if release.tree_page_one and int(getattr(view, "page_size", None) or 1) > 1:
        return (f"a tree draft under specctl's switch needs --page-size 1 on SGLang {release.version} "
                f"(the off state would reserve KV for one branch), got {view.page_size}")
    bound = None if release.tree_declare else getattr(server_args, BOUND, None)
    if isinstance(bound, int) and isinstance(tokens, int) and bound < tokens:
        return (f"SGLang sized this tree's KV for {bound} draft tokens, below its {tokens}: specctl's tree hook "
                f"did not run before the server args were built (unset {ENV_ENABLE} to run without it)")
    return None


_skipped_once = False  # whether the skip has been logged in this process (the off step's first time)


def around_finalize_accept_tree_path(original: Callable[..., Any], batch: Any, accept_index: Any, accept_lens: Any,
                                     predict: Any, logits_output: Any, bs: Any, token_to_kv_pool_allocator: Any,
                                     num_draft_tokens: int) -> Any:
    """SGLang's tree compaction, except at one draft token a request (the off step), where it is an identity.

    With one node a request, ``accept_index`` names each request's own slot: the
    KV move copies every slot onto itself, and the gathers give back ``predict``
    and the hidden states as they are. Skipping it returns them as SGLang's chain
    path (topk 1) does.
    """
    global _skipped_once
    if num_draft_tokens != 1:
        return original(batch, accept_index, accept_lens, predict, logits_output, bs,
                        token_to_kv_pool_allocator=token_to_kv_pool_allocator, num_draft_tokens=num_draft_tokens)
    if not _skipped_once:
        _skipped_once = True
        logger.info("specctl: tree compaction skipped at one draft token a request (the off step; an identity there)")
    return predict
