"""The off step's target forward: one DECODE token per request where SGLang would verify one.

Item 2 of fast_off.py: while off, the verify SGLang prepares has one token a
request, which is a decode step in all but its mode. These functions build
that step's ForwardBatch in DECODE mode over the same KV slot the verify
would write, and plan it on the off state's DECODE graph runner; fast_off's
prepare hook calls them and counts the step. No state of their own.
"""

from __future__ import annotations

from typing import Any


def prepare_decode_forward(verify_input: Any, req_to_token_pool: Any, batch: Any, runner: Any) -> tuple[Any, bool]:
    """The off step's target forward batch: one DECODE token per request.

    Mirrors eagle_prepare_for_verify for ``draft_token_num == 1``: the token
    is the previous bonus token, its KV slot is ``req_to_token[seq_lens]``
    (allocated by the scheduler, freed through accept_lens as before); only
    the forward mode, the lengths the backend sees and the graph runner differ.
    Returns (forward_batch, can_run_cuda_graph) like the original.
    """
    from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs_uniform_func
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    bs = len(batch.req_pool_indices)
    batch.input_ids = verify_input.draft_token
    batch.out_cache_loc = assign_extend_cache_locs_uniform_func(
        req_pool_indices=batch.req_pool_indices,
        req_to_token=req_to_token_pool.req_to_token,
        start_offset=batch.seq_lens,
        batch_size=bs,
        draft_token_num=1,
        device=batch.device,
    )
    if hasattr(batch, "out_cache_loc_dsv4"):
        batch.out_cache_loc_dsv4 = None
    verify_input.seq_lens_cpu = batch.seq_lens_cpu
    verify_input.seq_lens_sum = int(batch.seq_lens_cpu.sum()) if batch.seq_lens_cpu is not None else None

    forward_batch = _decode_forward_batch(batch, runner, bs)
    batch.forward_mode = ForwardMode.TARGET_VERIFY  # what SGLang's later steps expect
    graph_runner = runner.decode_cuda_graph_runner
    can_run = bool(graph_runner is not None and graph_runner.can_run_graph(forward_batch))
    if can_run:
        graph_runner.load_batch(forward_batch)
        forward_batch.mark_forward_metadata_ready()
    return forward_batch, can_run


_SWAPPED = ("forward_mode", "seq_lens", "seq_lens_cpu", "seq_lens_sum", "orig_seq_lens", "spec_info")


def _decode_forward_batch(batch: Any, runner: Any, bs: int) -> Any:
    """ForwardBatch.init_new on a decode view of the batch, the batch left as it was.

    Decode convention: seq_lens count the token being decoded, so the
    backend attends over req_to_token[:seq_len + 1]; positions come out as
    the old seq_lens. No spec input, so backends take their plain decode path.
    """
    from sglang.srt.model_executor.forward_batch_info import (
        CaptureHiddenMode,
        ForwardBatch,
        ForwardMode,
    )

    saved = {name: getattr(batch, name) for name in _SWAPPED}
    try:
        batch.forward_mode = ForwardMode.DECODE
        batch.seq_lens = saved["seq_lens"] + 1
        batch.seq_lens_cpu = None if saved["seq_lens_cpu"] is None else saved["seq_lens_cpu"] + 1
        batch.seq_lens_sum = None if saved["seq_lens_sum"] is None else saved["seq_lens_sum"] + bs
        batch.orig_seq_lens = None if saved["orig_seq_lens"] is None else saved["orig_seq_lens"] + 1
        batch.spec_info = None
        return ForwardBatch.init_new(
            batch,
            runner,
            capture_hidden_mode=CaptureHiddenMode.FULL,
            return_hidden_states_before_norm=False,
        )
    finally:
        for name, value in saved.items():
            setattr(batch, name, value)
