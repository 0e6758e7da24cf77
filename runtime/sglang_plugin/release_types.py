"""The shape of the plugin's data about a SGLang release: hook registrations, calls, names, facts.

compat.py fills these in, one ``Release`` per supported SGLang release, and the
contract tests (tests/test_plugin_contract.py) check each field against that
release's real source. Plain frozen dataclasses: nothing here reaches SGLang.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HookSpec:
    """One HookRegistry registration.

    ``handler`` names the callable (plugin.core_handlers for ``Release.hooks``,
    fast_off.handlers for ``Release.fast_off_hooks``); ``params`` are
    the target's parameter names (after ``self``) that the handler relies on.
    For a class target they are the constructor's.
    """

    target: str
    hook_type: str  # a HookType member name: REPLACE, AROUND, AFTER
    handler: str
    params: tuple[str, ...]


@dataclass(frozen=True)
class CallSpec:
    """A SGLang callable that fast_off calls itself (not a hook target).

    ``params`` are the parameter names its call passes (positional ones by the
    name they bind to): the target must take all of them and need no other.
    """

    target: str
    params: tuple[str, ...]


@dataclass(frozen=True)
class ReadDoneNames:
    """Where the scheduler's WAR barrier finds the step's read-done event (renamed in 0.5.23).

    fast_off moves the target runner's event to the runner the barrier reads
    after an off step (see fast_off.around_forward_batch_generation).
    """

    runner_property: str  # spec-worker property: the runner whose event the barrier waits on
    event_attr: str  # model-runner attribute holding that event


@dataclass(frozen=True)
class EarlyPublishNames:
    """What the early publish (early_publish.py, fast_off item 7) relies on (docs/sglang-plugin.md, "Fast off").

    ``publish_kwarg``: the step's keyword through which the scheduler hands
    over ``partial(FutureMap.publish, future_indices)``; ``plan_stream_attr``:
    the spec worker's plan stream (None unless SGLANG_ENABLE_OVERLAP_PLAN_STREAM);
    ``host_wait_attr``: the attribute of the future map that ``on_publish``
    is bound to which says whether the scheduler waits on the host for the
    publish (decided once at start-up); ``facts``: (file under sglang/, text)
    pairs that make "the new lengths of an off step are seq_lens + 1, of a
    prefill seq_lens, and the scheduler waits on the host for their publish"
    true for the release.
    """

    publish_kwarg: str
    plan_stream_attr: str
    host_wait_attr: str
    facts: tuple[tuple[str, str], ...]



@dataclass(frozen=True)
class Release:
    """One supported SGLang release and how the plugin reaches into it."""

    version: str
    hooks: tuple[HookSpec, ...]
    # The read-only view of resolved server args (resolution moved between releases).
    args_view: str
    # Attention DP is on when int(view.<dp_attr>) > dp_above.
    dp_attr: str
    dp_above: int
    # Source files (under sglang/srt/) whose annotated class fields make up ServerArgs.
    args_field_files: tuple[str, ...]
    # (file under sglang/srt/, text) pairs the adapter's assumptions rest on, e.g. that the
    # per-request counts SGLang passes to on_verify_complete already exclude the bonus token.
    source_facts: tuple[tuple[str, str], ...]
    # fast_off's AROUND hooks, in registration order (fast_off.hooks_for picks those in use).
    fast_off_hooks: tuple[HookSpec, ...]
    read_done: ReadDoneNames
    early_publish: EarlyPublishNames
    # The attribute of get_internal_state's owner that holds the Scheduler (0.5.23 moved the
    # method into a controller that keeps it); None where the owner is the Scheduler itself.
    scheduler_attr: str | None
    # draft_extend_graphs' hooks (opt-in): 0.5.23's per-state draft-extend graph width, backported.
    draft_extend_hooks: tuple[HookSpec, ...] = ()
    # tree_switch's hooks (opt-in): a tree draft (topk > 1) under the switch. ``tree_declare``: the
    # function that declares a resolved field (0.5.23); None where the hook assigns it (0.5.17, which
    # also sizes KV from a cached_property the hook fills in). ``tree_page_one``: page size 1 only.
    tree_hooks: tuple[HookSpec, ...] = ()
    tree_declare: str | None = None
    tree_page_one: bool = False
    # switch_warmup's hook (the launcher process): SGLang's wait-and-warm-up, whose warm-up function it wraps.
    warmup_hooks: tuple[HookSpec, ...] = ()
    # server_info's AFTER hooks (always on): the builders of SGLang's argument dumps, whose answer loses its
    # ``*api_key*`` fields (/server_info is open even with --admin-api-key set).
    redact_hooks: tuple[HookSpec, ...] = ()
