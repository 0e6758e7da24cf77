"""Fast "off" for specctl: while speculation is off, the target runs plain DECODE.

Why this exists: SGLang's adaptive worker (``EAGLEWorkerV2``, >= 0.5.17) has a
"steps 0" state for "no drafting", but it still sends every decode step
through the target-verify path (a 1-token tree with a custom mask) and runs
the draft model's extend each step. On an H200 with the Triton attention
backend that path serves the 1-token verify with the *extend* attention
kernel (3.4 ms per layer at batch 256 against 0.22 ms for the decode
kernels), so "steps 0" ran 2.2-3.4x slower than a server without
speculation; with FA3 it was 4-10 % slower. specctl's off state has to cost
what no speculation costs.

What it does (route (a) of docs/sglang-plugin.md, "Fast off"), through SGLang's HookRegistry
only (AROUND hooks, nothing edited or copied), for every attention backend alike:

1. AROUND ``EAGLEWorkerV2.build_adaptive_runtime_state``: when SGLang builds
   the steps-0 runtime state, give that state its own target attention
   backend and a decode CUDA-graph runner captured in DECODE mode (one token
   per request, no spec input, hidden states captured for the draft). The
   state's upstream TARGET_VERIFY graphs are dropped.
2. AROUND ``eagle_utils.eagle_prepare_for_verify``: when the active target
   backend is one of ours and the verify has one token per request, build a
   DECODE ForwardBatch (seq_lens + 1, positions = seq_lens, no spec input)
   over the same KV slot the verify would have written, and plan it on the
   DECODE graph runner (decode_batch.py). Everything after the forward is SGLang's own steps-0
   code (``run_eagle_verify``: ``eagle_sample`` with the trivial 1-node tree,
   accept_lens 1, bonus tokens, the next draft input), so the scheduler gets
   exactly the result format it expects and KV accounting is unchanged.
3. AROUND ``EAGLEWorkerV2.forward_batch_generation``: before each step,
   choose whether the draft model stays warm (item 4); after a cold off
   step, the target DECODE graph's read-done event is handed to the
   scheduler's WAR barrier, as a server without speculation has it (else
   the barrier waits for the whole forward). After a warm one SGLang's draft
   extend has recorded the event itself.
4. The draft extend while off (SGLang's own
   ``SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND``, which SGLang reads through
   ``os.getenv`` at every steps-0 step) runs only for batches smaller than
   the policy setting ``warm_below`` (0, the default: never). A warm draft
   spares the first verify after a resume at the cost of an eager
   draft extend every off step and a draft prefill per prompt (item 5; 5-9 %
   of throughput at 128-256 requests on FA3: docs/benchmarks.md); greedy outputs do not
   depend on it. draft_warmth.py says
   why every tensor-parallel rank decides alike.
5. AROUND ``EagleDraftWorker._draft_extend_for_prefill`` (both releases;
   0.5.23's takes a KV location plan as well): while off with the draft
   cold, prompts admitted are not prefilled by the draft either
   (draft_prefill.py); at 128-256 requests a prompt arrives about every
   decode step.
6. SGLang 0.5.17 only, AROUND ``alloc_for_spec_decode``: its per-request
   bookkeeping loop over a list, as 0.5.23 has it (spec_alloc.py). Items 5
   and 6 came from a profile of the off step on FA3 at 256 requests, which
   was CPU-bound (docs/sglang-plugin.md, "Fast off").
7. In the hooks of items 2 and 3, the "early publish" (early_publish.py):
   with a backend that needs host copies of the lengths (FlashInfer), the
   scheduler waits on the host for each step's publish before it launches
   the next one; while off the new lengths are known before the forward, so
   they are published then. On by default where the scheduler waits
   (``SPECCTL_EARLY_PUBLISH``; docs/sglang-plugin.md, "Fast off").

The hook targets and the WAR-barrier names, per SGLang release, are data in
compat.py (``Release.fast_off_hooks``, ``Release.read_done``), where the
contract tests check them against each release's source.

Knobs: ``SPECCTL_FAST_OFF`` (environment, read once at install; "0"
disables everything here: SGLang's steps-0 path runs), the policy setting
``warm_below`` (runtime, ``specctl set warm_below=16``; item 4) and
``SPECCTL_EARLY_PUBLISH`` / ``SPECCTL_EARLY_PUBLISH_CHECK`` (item 7, read once
at install, early_publish.py). Any failure
while building the decode state leaves SGLang's own steps-0 state in place
and logs why.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from specctl.runtime.core.wire import env_flag
from specctl.runtime.sglang_plugin import (
    decode_batch,
    draft_prefill,
    draft_trace,
    draft_warmth,
    early_publish,
    progress_log,
    spec_alloc,
)
from specctl.runtime.sglang_plugin.release_types import (
    EarlyPublishNames,
    HookSpec,
    ReadDoneNames,
    Release,
)
from specctl.runtime.sglang_plugin.sglang_access import register_hook

logger = logging.getLogger(__name__)

ENV_ENABLE = "SPECCTL_FAST_OFF"
# The HookSpec.handler of the per-step hook.
STEP_HANDLER = "forward_batch_generation"

# Attribute set on the attention backends this module builds: the per-step
# hook recognises "off" by it, without any state of its own.
MARK = "_specctl_fast_off"


@dataclass
class FastOffStats:
    """Counters for the server log and tests; one copy per scheduler process."""

    enabled: bool = False
    installed: bool = False
    built: bool = False
    build_error: str | None = None
    build_s: float | None = None
    graph_mem_gb: float | None = None
    graph_bs: int = 0
    decode_steps: int = 0
    graph_steps: int = 0
    warm_steps: int = 0  # off steps that ran the draft extend (batch below warm_below)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


STATS = FastOffStats()


def state() -> dict[str, Any]:
    """Fast-off counters, for tests and the server log."""
    return STATS.as_dict()


def summary() -> dict[str, Any]:
    """Whether this process's off state costs what no speculation costs, and if not, why.

    Reported in the plugin's internal state (``off_state``), so that the
    supervisor can tell the operator once, instead of a log line nobody reads:
    without fast off, "off" is SGLang's own steps-0 state, 2-4x slower than a
    server without speculation on Triton (docs/sglang-plugin.md, "Fast off"). Where it is
    fast, the early publish's mode and counts come along: whether it runs is
    decided inside the server (item 7), and the journal keeps what it did.
    """
    if not STATS.enabled:
        why = f"{ENV_ENABLE}=0: SGLang's own steps-0 state runs while off"
    elif STATS.build_error:
        why = f"building the DECODE state failed ({STATS.build_error}): SGLang's own steps-0 state runs while off"
    elif not STATS.built:
        why = "no DECODE state was built: SGLang's own steps-0 state runs while off"
    else:
        return {"fast": True, "why_not": None, "early_publish": early_publish.STATS.report()}
    return {"fast": False, "why_not": why}


def handlers(release: Release) -> dict[str, Callable[..., Any]]:
    """The callables behind compat's ``HookSpec.handler`` names in ``release.fast_off_hooks``."""
    return {
        "build_adaptive_runtime_state": around_build_adaptive_runtime_state,
        "eagle_prepare_for_verify": around_eagle_prepare_for_verify,
        STEP_HANDLER: functools.partial(around_forward_batch_generation, release.read_done, release.early_publish),
        "draft_extend_for_prefill": functools.partial(draft_prefill.around_draft_extend_for_prefill,
                                                      lambda: STATS.built),
        "alloc_for_spec_decode": spec_alloc.around_alloc_for_spec_decode,
    }


def hooks_for(release: Release) -> tuple[HookSpec, ...]:
    """The hooks install registers under the current environment: all of the release's, or none.

    None when fast off is disabled. The step hook is needed whatever
    ``warm_below`` says, since the setting can change at any step. The
    plugin's start-up check verifies that exactly these were applied.
    """
    if not env_flag(os.environ.get(ENV_ENABLE), True):
        return ()
    return release.fast_off_hooks


def install(release: Release, register: Callable[[HookSpec, Callable[..., Any]], None] = register_hook) -> bool:
    """plugin.INSTALLERS entry: register the release's hooks, before SGLang applies them.

    ``register(spec, hook)`` defaults to SGLang's ``HookRegistry.register``
    (through compat); tests pass their own.
    Returns whether the hooks were registered.
    """
    STATS.enabled = env_flag(os.environ.get(ENV_ENABLE), True)
    if not STATS.enabled:
        logger.info("specctl fast-off disabled (%s=0): SGLang's steps-0 path runs", ENV_ENABLE)
        return False
    early_publish.read_env()
    draft_warmth.start_cold()
    by_name = handlers(release)
    for spec in hooks_for(release):
        register(spec, by_name[spec.handler])
    STATS.installed = True
    return True


# ------------------------------------------------------------ state building
def around_build_adaptive_runtime_state(original: Callable[..., Any], worker: Any, *args: Any, **kwargs: Any) -> Any:
    """Build SGLang's state, then give the steps-0 one a DECODE-mode target."""
    state_obj = original(worker, *args, **kwargs)
    steps = _arg(args, kwargs, 0, "speculative_num_steps")
    if steps != 0:
        return state_obj
    cuda_graph_bs = _arg(args, kwargs, 2, "cuda_graph_bs")
    try:
        _attach_decode_target(worker, state_obj, cuda_graph_bs)
    except Exception as exc:  # keep SGLang's own steps-0 state: slower, still correct
        STATS.build_error = f"{type(exc).__name__}: {exc}"
        logger.exception("specctl fast-off: could not build the DECODE state; SGLang's steps-0 path stays")
    return state_obj


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> Any:
    """A parameter passed either by position (after self) or by name."""
    if name in kwargs:
        return kwargs[name]
    return args[index] if len(args) > index else None


def _attach_decode_target(worker: Any, state_obj: Any, cuda_graph_bs: list[int] | None) -> None:
    """Swap the steps-0 state's target backend and graphs for DECODE-mode ones.

    Built under the worker's own capture override (steps 0, 1 draft token),
    as SGLang builds its states, so that backend buffers are sized the same.
    A fresh backend is needed: ``init_cuda_graph_state`` reallocates the
    buffers that captured graphs point into, so two runners cannot share one.
    """
    from sglang.srt.utils.common import get_available_gpu_memory

    runner = worker._target_worker.model_runner
    tic = time.perf_counter()
    before = get_available_gpu_memory(worker.device, worker.gpu_id)
    with worker._override_worker_state(0, 1, cuda_graph_bs=cuda_graph_bs):
        backend = _new_attention_backend(runner)
        graph_runner = None
        if state_obj.target_graph_runner is not None:
            graph_runner = decode_graph_runner_class()(
                runner,
                attn_backend=backend,
                speculative_num_steps=0,
                speculative_num_draft_tokens=1,
            )
    setattr(backend, MARK, True)
    state_obj.target_attn_backend = backend
    state_obj.target_graph_runner = graph_runner
    STATS.build_s = round(time.perf_counter() - tic, 2)
    STATS.graph_mem_gb = round(before - get_available_gpu_memory(worker.device, worker.gpu_id), 3)
    STATS.graph_bs = len(graph_runner.capture_bs) if graph_runner is not None else 0
    STATS.built = True
    logger.info(
        "specctl fast-off: steps-0 state now runs the target in DECODE mode "
        "(backend %s, decode graphs for %d batch sizes, %.2f s, %.3f GB); "
        "draft extend while off: skipped unless the batch is below warm_below",
        type(backend).__name__,
        STATS.graph_bs,
        STATS.build_s,
        STATS.graph_mem_gb,
    )


def _new_attention_backend(runner: Any) -> Any:
    """A fresh target attention backend, as SGLang's own state builder makes one."""
    backup_init = runner.init_new_workspace
    try:
        return runner._get_attention_backend(init_new_workspace=True)
    finally:
        runner.init_new_workspace = backup_init


_RUNNER_CLASS: type | None = None


def decode_graph_runner_class() -> type:
    """SGLang's DecodeCudaGraphRunner, made to capture DECODE in a spec server.

    In a speculative server the target's runner always captures
    TARGET_VERIFY with an EagleVerifyInput. With one token per request the
    buffers are the decode ones already; only the capture mode, the spec
    input (none: the backend then plans from req_to_token like a plain
    decode) and the hidden-state capture (FULL, for the draft) differ.
    """
    global _RUNNER_CLASS
    if _RUNNER_CLASS is not None:
        return _RUNNER_CLASS
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
    from sglang.srt.model_executor.runner import DecodeCudaGraphRunner

    class SpecctlDecodeGraphRunner(DecodeCudaGraphRunner):
        """Decode graphs for the steps-0 state (see decode_graph_runner_class)."""

        def capture(self) -> None:
            if self.captured_req_width != 1 or getattr(self, "ragged_verify_mode", False):
                raise RuntimeError(
                    f"fast-off needs 1 token per request and no ragged verify "
                    f"(width {self.captured_req_width}, ragged {getattr(self, 'ragged_verify_mode', None)})"
                )
            self.capture_forward_mode = ForwardMode.DECODE
            self.capture_hidden_mode = max(self.capture_hidden_mode, CaptureHiddenMode.FULL)
            super().capture()

        def get_spec_info(self, num_tokens: int) -> None:
            return None

    _RUNNER_CLASS = SpecctlDecodeGraphRunner
    return _RUNNER_CLASS


# ------------------------------------------------------------ per decode step
def around_forward_batch_generation(
    names: ReadDoneNames,
    early: EarlyPublishNames,
    original: Callable[..., Any],
    worker: Any,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """Choose the step's draft warmth; after a cold off step, hand over the read-done event.

    Warmth: SGLang reads its skip switch inside ``original`` (only in a
    steps-0 step), so draft_warmth sets it before, from ``warm_below``.

    Hand-over: the scheduler fences its next shared-buffer writes on the
    read-done event of the step's last reader, which for the spec worker is
    the draft runner (its draft extend). With the draft extend skipped nobody
    records one, and the scheduler falls back to waiting for the whole
    forward. In an off step the last reader of req_to_token is the target's
    DECODE graph, which records exactly that event before its replay (as in
    a server without speculation), so it is moved to where the scheduler
    looks. An off step that ran outside the CUDA graphs (a batch above the
    captured sizes) recorded no event: what the target runner holds then is an
    earlier step's (a verify graph's), already passed, and handing it over would
    let the scheduler write buffers this forward still reads. That stale event
    is dropped instead, and the scheduler waits for the whole forward.
    ``names`` are the release's (compat ``Release.read_done``), bound by ``handlers``.

    Early publish (item 7): see ``early_publish.arm``.
    """
    warm = draft_warmth.choose(args, kwargs)
    before, graphed_before = STATS.decode_steps, STATS.graph_steps
    kwargs = early_publish.arm(early, worker, args, kwargs, _is_ours)
    try:
        out = original(worker, *args, **kwargs)
    finally:
        early_publish.disarm()
    early_publish.log_progress()
    if STATS.decode_steps != before:
        if warm:
            STATS.warm_steps += 1  # SGLang's draft extend recorded the event itself
        else:
            _hand_over_read_done(worker, names, fresh=STATS.graph_steps != graphed_before)
    return out


def _hand_over_read_done(worker: Any, names: ReadDoneNames, fresh: bool = True) -> None:
    """Move the target runner's read-done event to the runner the scheduler reads.

    ``fresh``: whether this step's graph replay recorded it; a stale one is
    dropped, never handed over (see around_forward_batch_generation).
    """
    target = worker._target_worker.model_runner
    event = getattr(target, names.event_attr, None)
    if event is None:
        return
    reader = getattr(worker, names.runner_property, None)
    if reader is None or reader is target:
        return
    setattr(target, names.event_attr, None)
    if fresh:
        setattr(reader, names.event_attr, event)


def _is_ours(attn_backend: Any) -> bool:
    """Whether the active target backend is the off state's DECODE one (built here, marked)."""
    return bool(getattr(attn_backend, MARK, False))


def around_eagle_prepare_for_verify(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Plan a DECODE forward instead of a 1-token verify while specctl is off."""
    verify_input, req_to_token_pool, batch, target_worker = _prepare_args(args, kwargs)
    runner = target_worker.model_runner
    if (
        not _is_ours(runner.attn_backend)
        or getattr(verify_input, "draft_token_num", None) != 1
        or batch.forward_mode.is_idle()
    ):
        if draft_trace.enabled():
            draft_trace.record(verify_input, batch)
        return original(*args, **kwargs)
    forward_batch, can_run = decode_batch.prepare_decode_forward(verify_input, req_to_token_pool, batch, runner)
    _count(len(batch.req_pool_indices), can_run)
    if can_run:
        # After the DECODE graph's plan (its host-to-device copies are on this stream
        # now), before the replay; a non-graph step plans inside the forward, so
        # SGLang's own publish stays for it.
        early_publish.fire(batch.seq_lens + 1)
    return forward_batch, can_run


_PREPARE_NAMES = ("verify_input", "req_to_token_pool", "batch", "target_worker")


def _prepare_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    """eagle_prepare_for_verify's four arguments, however they were passed."""
    values = list(args) + [kwargs[n] for n in _PREPARE_NAMES[len(args):]]
    return values[0], values[1], values[2], values[3]


def _count(bs: int, graph: bool) -> None:
    """Count off steps; log the first one and then every progress_log.LOG_EVERY."""
    STATS.decode_steps += 1
    STATS.graph_steps += int(graph)
    if progress_log.due(STATS.decode_steps):
        logger.info(
            "specctl fast-off: %d DECODE-mode off steps (%d in CUDA graphs, %d before this one with the draft "
            "warm); this one bs=%d graph=%s",
            STATS.decode_steps,
            STATS.graph_steps,
            STATS.warm_steps,
            bs,
            graph,
        )
