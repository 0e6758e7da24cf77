"""CUDA graphs for the draft extend at every built depth on SGLang 0.5.17, as 0.5.23 captures them.

SGLang 0.5.17's ``EAGLEDraftExtendCudaGraphRunner`` sizes its graph from
``spec_utils.resolve_num_tokens_per_req(phase="draft_extend", server_args=...)``,
which reads the launch's ``speculative_num_draft_tokens`` from the server
args. The adaptive machinery captures each extra depth's runner under a
capture override of ``get_spec()``, not of the server args, so a state built
for 1 or 2 steps (2 or 3 draft tokens a request) captures a graph of the
launch's width (4 at three steps), its ``can_run_graph`` refuses every batch of
its own width, and every step at that depth runs the draft extend eagerly. 0.5.23's ``resolve_num_tokens_per_req``
reads ``get_spec()`` instead ("adaptive spec captures each candidate step
config with that config's leaves overridden").

This AROUND hook gives 0.5.17 that answer for the draft extend of a state
that drafts (steps >= 1); the steps-0 state, whose draft extend only the warm
draft runs while off, keeps the launch's width as before. Outside a capture
override ``get_spec()`` holds the launch's values, so the launch state's
graph is what it was.

Opt-in (``SPECCTL_DRAFT_EXTEND_GRAPHS=1``): greedy outputs and logprobs are
identical at every depth with it on the GPU, but what it saves is not
measured; 0.5.23 lists no hook here.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from specctl.runtime.core.wire import env_flag
from specctl.runtime.sglang_plugin.release_types import HookSpec, Release
from specctl.runtime.sglang_plugin.sglang_access import register_hook

logger = logging.getLogger(__name__)

ENV_ENABLE = "SPECCTL_DRAFT_EXTEND_GRAPHS"


def hooks_for(release: Release) -> tuple[HookSpec, ...]:
    """The hooks install registers: the release's when the operator opted in, else none."""
    if not env_flag(os.environ.get(ENV_ENABLE), False):
        return ()
    return release.draft_extend_hooks


def install(release: Release, register: Callable[[HookSpec, Callable[..., Any]], None] = register_hook) -> bool:
    """plugin.INSTALLERS entry; returns whether a hook was registered."""
    specs = hooks_for(release)
    for spec in specs:
        register(spec, around_resolve_num_tokens_per_req)
    if specs:
        logger.info("specctl: draft-extend graphs at every built depth (%s=1)", ENV_ENABLE)
    return bool(specs)


def around_resolve_num_tokens_per_req(original: Callable[..., int], *args: Any, **kwargs: Any) -> int:
    """The draft extend's width for the state being captured; every other phase as SGLang says."""
    if kwargs.get("phase") == "draft_extend":
        from sglang.srt.runtime_context import get_spec  # the scheduler process has SGLang

        width = drafting_width(get_spec())
        if width is not None:
            return width
    return original(*args, **kwargs)


def drafting_width(spec: Any) -> int | None:
    """Draft tokens a request for a spec bag that drafts (steps >= 1); None for steps 0 or an unknown bag.

    ``spec`` is SGLang's ``get_spec()`` bag, overridden per state while its
    graphs are captured.
    """
    steps = getattr(spec, "speculative_num_steps", None)
    tokens = getattr(spec, "speculative_num_draft_tokens", None)
    if not isinstance(steps, int) or not isinstance(tokens, int) or steps < 1 or tokens < 1:
        return None
    return tokens
