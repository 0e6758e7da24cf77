"""The early publish (fast_off item 7): an off step's new lengths, published before its forward.

Why: with a backend that needs host copies of the sequence lengths
(FlashInfer keeps ``needs_cpu_seq_lens``), SGLang's speculative scheduler
waits on the host for each step's ``on_publish`` before it launches the
next step (``FutureMap.resolve_seq_lens_cpu``). SGLang publishes after the
verify (or after the target prefill), so the overlap scheduler loses its
lead and the GPU waits for every launch. On one H200 that left specctl's
off state at 0.91-0.93x a server without speculation with prompts
arriving; with the early publish it read 0.95-1.02x (docs/benchmarks.md).

While off the new lengths are known before the forward: a decode step's
are ``seq_lens + 1`` (the 1-node tree accepts nothing), a prefill's are
``batch.seq_lens``. So they are published then, and SGLang's own later
publish of the step is swallowed (a second record would move the
scheduler's fence back to the end of the verify).

Two hooks share one armed publish (``_PENDING``): only the step hook
(``forward_batch_generation``) sees ``on_publish``, and only the prepare
hook (``eagle_prepare_for_verify``) knows the step is off, after it has
planned the DECODE graph.

``SPECCTL_EARLY_PUBLISH`` (read once at install):

- unset or ``auto`` (the default): on where the scheduler waits on the
  host for the lengths (its ``FutureMap.needs_cpu_seq_lens``, decided once
  at start-up; FlashInfer), off elsewhere (Triton, FA3: no wait, nothing
  to gain). Decided at the first step.
- ``1``: on for off decode steps and prefills; ``decode``: off decode
  steps only; ``0``: off.

``SPECCTL_EARLY_PUBLISH_CHECK=1`` compares every early value with the one
SGLang computes later (a device sync per step: for correctness runs, not
for timing) and logs a mismatch loudly.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from specctl.runtime.core.wire import FALSE_WORDS, env_flag
from specctl.runtime.sglang_plugin import progress_log
from specctl.runtime.sglang_plugin.release_types import EarlyPublishNames

logger = logging.getLogger(__name__)

ENV_EARLY = "SPECCTL_EARLY_PUBLISH"
ENV_EARLY_CHECK = "SPECCTL_EARLY_PUBLISH_CHECK"
AUTO = "auto"
DECODE_ONLY = "decode"
DECODE_AND_EXTEND = "decode+extend"
OFF = "off"


@dataclass
class EarlyPublishStats:
    """What the early publish did in this scheduler process; reported in the plugin's ``off_state``."""

    setting: str = AUTO  # what the environment asked: auto, decode+extend, decode or off
    mode: str = OFF  # what runs: decode+extend, decode or off (under auto: off until the first step decides)
    decided: bool = False  # under auto: whether the first step has looked at the scheduler
    check: bool = False
    decode: int = 0  # off decode steps whose lengths were published before the forward
    extend: int = 0  # prefills published before the target forward
    swallowed: int = 0  # SGLang's own publishes skipped after an early one
    mismatches: int = 0  # check mode: early value != SGLang's (SGLang's was published)
    logged: int = 0  # early publishes at the last progress line

    def report(self) -> dict[str, Any]:
        """The plugin's ``off_state.early_publish``: the mode and the counts."""
        out = asdict(self)
        del out["logged"], out["decided"]
        return out


STATS = EarlyPublishStats()


@dataclass
class _Pending:
    """A step's publish, armed by the step hook, fired by the prepare hook if the step is off.

    ``value`` is what was published early (check mode).
    """

    publish: Callable[..., None]
    value: Any = None
    done: bool = False


_PENDING: _Pending | None = None


def read_env() -> None:
    """The switches, read once at install, as SPECCTL_FAST_OFF is."""
    raw = (os.environ.get(ENV_EARLY) or "").strip().lower()
    if raw in ("", AUTO):
        setting = AUTO
    elif raw == DECODE_ONLY:
        setting = DECODE_ONLY
    elif raw in FALSE_WORDS:
        setting = OFF
    else:
        setting = DECODE_AND_EXTEND
    check = setting != OFF and env_flag(os.environ.get(ENV_EARLY_CHECK), False)
    global STATS, _PENDING
    STATS = EarlyPublishStats(setting=setting, mode=OFF if setting == AUTO else setting,
                              decided=setting != AUTO, check=check)
    _PENDING = None
    if setting not in (AUTO, OFF):
        logger.info("specctl fast-off: early publish on (%s=%s: %s%s)", ENV_EARLY, raw, setting,
                    ", checked against SGLang's value" if check else "")


def scheduler_waits_on_host(on_publish: Any, names: EarlyPublishNames) -> bool | None:
    """Whether the scheduler waits on the host for this step's publish; None where it cannot tell.

    ``on_publish`` is ``partial(FutureMap.publish, future_indices)``: the
    future map it is bound to carries the scheduler's start-up decision.
    """
    owner = getattr(getattr(on_publish, "func", None), "__self__", None)
    value = getattr(owner, names.host_wait_attr, None)
    return value if isinstance(value, bool) else None


def _decide(on_publish: Any, names: EarlyPublishNames) -> None:
    """Under auto, at the first step: on if the scheduler waits on the host for the lengths."""
    STATS.decided = True
    waits = scheduler_waits_on_host(on_publish, names)
    if waits:
        STATS.mode = DECODE_AND_EXTEND
        logger.info("specctl fast-off: early publish on (auto): the scheduler waits on the host for each "
                    "step's lengths (%s, as with FlashInfer), so an off step publishes them before its forward",
                    names.host_wait_attr)
    elif waits is None:
        logger.warning("specctl fast-off: early publish stays off (auto): cannot tell whether the scheduler "
                       "waits on the host for the lengths (no %s on the publish's owner); %s=1 forces it",
                       names.host_wait_attr, ENV_EARLY)
    else:
        logger.info("specctl fast-off: early publish not needed (auto): the scheduler does not wait on the "
                    "host for the lengths with this attention backend")


def arm(names: EarlyPublishNames, worker: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
        is_ours: Callable[[Any], bool]) -> dict[str, Any]:
    """The step's keyword arguments, with SGLang's ``on_publish`` replaced where an early publish may run.

    - a prefill (SGLang's test: ``forward_mode.is_extend() or
      is_extend_in_batch``) while the active target backend is ours
      (``is_ours``): its new lengths are ``batch.seq_lens`` (SGLang's own
      rule), published here, before the target forward.
    - a decode step: SGLang's call is wrapped so that it does nothing if
      the prepare hook published already, which it does only for an off
      step (``fire``). An ON step publishes as always.

    Not with SGLang's plan stream (SGLANG_ENABLE_OVERLAP_PLAN_STREAM): the
    prepare hook then runs on that stream, not the forward stream.
    """
    on_publish = kwargs.get(names.publish_kwarg)
    if on_publish is None or STATS.setting == OFF:
        return kwargs
    if not STATS.decided:
        _decide(on_publish, names)
    if STATS.mode == OFF or getattr(worker, names.plan_stream_attr, None) is not None:
        return kwargs
    batch = args[0] if args else kwargs.get("batch")
    if batch is None:
        return kwargs
    global _PENDING
    if batch.forward_mode.is_extend() or getattr(batch, "is_extend_in_batch", False):
        if STATS.mode != DECODE_AND_EXTEND or not is_ours(worker._target_worker.model_runner.attn_backend):
            return kwargs
        pending = _Pending(on_publish, value=batch.seq_lens, done=True)
        on_publish(batch.seq_lens)
        STATS.extend += 1
    else:
        pending = _Pending(on_publish)
    _PENDING = pending
    return {**kwargs, names.publish_kwarg: functools.partial(_late_publish, pending)}


def disarm() -> None:
    """The step is over: a later prepare (none is expected) must not publish for it."""
    global _PENDING
    _PENDING = None


def fire(new_seq_lens: Any) -> None:
    """Publish an off decode step's lengths now, once; called by the prepare hook after planning."""
    pending = _PENDING
    if pending is None or pending.done:
        return
    pending.publish(new_seq_lens)
    pending.value, pending.done = new_seq_lens, True
    STATS.decode += 1


def log_progress() -> None:
    """After the step (the counts then include SGLang's late call): the first early publish, then every Nth."""
    published = STATS.decode + STATS.extend
    if published != STATS.logged and progress_log.due(published):
        STATS.logged = published
        logger.info(
            "specctl fast-off: early publish (%s): %d off decode steps and %d prefills published early, "
            "%d of SGLang's publishes swallowed, %d mismatches",
            STATS.mode, STATS.decode, STATS.extend, STATS.swallowed, STATS.mismatches)


def _late_publish(pending: _Pending, new_seq_lens: Any, *args: Any, **kwargs: Any) -> None:
    """SGLang's own publish of the step: passed on unless the plugin published early.

    In check mode the two values are compared first; on a mismatch SGLang's
    value is published after all, and the server log says so loudly.
    """
    if not pending.done:
        pending.publish(new_seq_lens, *args, **kwargs)
        return
    if STATS.check and not _same_lengths(pending.value, new_seq_lens):
        STATS.mismatches += 1
        logger.error(
            "specctl fast-off: EARLY PUBLISH MISMATCH #%d: published %s early, SGLang computed %s; "
            "SGLang's value published now. Set %s=0 and report this.",
            STATS.mismatches, _head(pending.value), _head(new_seq_lens), ENV_EARLY)
        pending.publish(new_seq_lens, *args, **kwargs)
        return
    STATS.swallowed += 1


def _as_list(lengths: Any) -> list[int]:
    """Host values of a lengths tensor (a device sync: check mode only)."""
    values = lengths.tolist() if hasattr(lengths, "tolist") else list(lengths)
    return [int(v) for v in values]


def _same_lengths(early: Any, late: Any) -> bool:
    return _as_list(early) == _as_list(late)


def _head(lengths: Any, n: int = 8) -> str:
    values = _as_list(lengths)
    more = f" ... ({len(values)} in all)" if len(values) > n else ""
    return f"{values[:n]}{more}"
